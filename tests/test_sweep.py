"""Sweeps through Hydra's submitit launcher: a local 2-job multirun, and the Slurm preset composing."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("hydra_plugins.hydra_submitit_launcher")


def test_slurm_preset_composes_without_slurm(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "physattack", "+scene=stop_sign", "hydra/launcher=slurm",
                           "hydra.launcher.partition=gpu", "--cfg", "hydra"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "SlurmLauncher" in proc.stdout and "partition: gpu" in proc.stdout and "gpus_per_node: 1" in proc.stdout


@pytest.mark.slow
def test_two_job_multirun_through_submitit_local(tmp_path):
    env = {**os.environ, "HOME": str(tmp_path / "home"), "WANDB_MODE": "offline", "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run(
        [sys.executable, "-m", "physattack", "--multirun", "hydra/launcher=local", "+scene=stop_sign",
         "seed=0,1", "attack.steps=1", "attack.batch_size=2", "attack.mask_search_steps=1", "gallery_views=2",
         "eot.grid.azimuth_deg=[0]", "eot.grid.distance_m=[6]", "eot.grid.lighting=[noon]", "progress=false",
         "evaluation.enabled=false", "+drive=none",          # the launcher is under test, not the reports
         "eot.sampler.drives=1", "eot.sampler.segments=1", "eot.sampler.views_per_step=2",   # nor the approach
         "eot.sampler.fit.drives=1", "eot.sampler.fit.frames_per_drive=3",                   # windows at full size
         f"hydra.sweep.dir={tmp_path / 'sweep'}"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seeds = []
    for job in ("0", "1"):
        run = tmp_path / "sweep" / job
        m = json.loads((run / "metrics.json").read_text())
        seeds.append(m["seed"])
        assert (run / "patch.png").is_file() and (run / "checkpoint.pt").is_file()
        offline = list((run / "wandb").glob("offline-run-*"))
        assert offline, f"job {job} logged no W&B run"
    assert sorted(seeds) == [0, 1]


def test_optuna_tuning_preset_composes(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = subprocess.run([sys.executable, "-m", "physattack", "+scene=stop_sign", "hydra/sweeper=tune",
                           "--cfg", "hydra"], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "OptunaSweeper" in proc.stdout and "direction: maximize" in proc.stdout and "attack.lr" in proc.stdout
