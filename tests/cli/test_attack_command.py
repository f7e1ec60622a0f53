"""The canonical command, end to end, with a tiny budget; and its one-sentence errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from commands import one_sentence_error

TINY = ["attack.steps=2", "attack.batch_size=4", "attack.checkpoint_every=1", "gallery_views=4",
        "eot.grid.azimuth_deg=[-30,30]", "eot.grid.distance_m=[5,12]", "eot.grid.lighting=[noon,low_sun]",
        "progress=false",
        # the approach windows (eot=approach, the default) at their smallest: one drive of one window and two views
        "eot.sampler.drives=1", "eot.sampler.segments=1", "eot.sampler.views_per_step=2", "eot.sampler.fit.drives=1",
        "eot.sampler.fit.frames_per_drive=3", "evaluation.area.keep=[0.5]"]


def run_cli(args: list[str], tmp_path: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "WANDB_MODE": "offline", "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", "physattack", *args, f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path)


@pytest.mark.slow
def test_canonical_command_writes_every_output(tmp_path):
    proc = run_cli(["+scene=stop_sign", "attack=yield", *TINY], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    for name in ["patch.png", "patch.pt", "texture.png", "views.png", "heatmap.png", "training.png",
                 "metrics.json", "config.yaml", "checkpoint.pt"]:
        assert (run / name).is_file(), f"{name} missing"
    assert list((run / "wandb").glob("offline-run-*")), "no offline W&B run"
    m = json.loads((run / "metrics.json").read_text())
    assert m["views"] == 8 and len(m["per_view"]) == 8
    assert m["target_label"] == "yield" and m["steps_done"] == 2
    assert 0.0 <= m["attack_success_rate"]["rate"] <= 1.0 or m["attack_success_rate"]["n"] == 0
    assert m["clean_accuracy"]["n"] == 8
    assert 0.10 < m["patch_area_fraction"] <= 0.20
    assert "held-out success" in proc.stdout
    # the main figure says what the patch was fitted to and how the held-out victims read it, in the
    # terminal, in metrics.json and at the top of report.md
    # it leads with the drive verdict (the attacked stack, then the held-out classifiers), then the per-view figures
    last = [line for line in proc.stdout.splitlines() if line.startswith("targeted -> yield")][-1]
    assert last.startswith("targeted -> yield, fitted to signnet: over 2 held-out drives (two-stage (detnet -> "
                           "signnet)) the car runs the sign in "), last
    assert "the 10 held-out classifiers in " in last and "; per view: held-out success" in last
    assert last.index("held-out classifiers") < last.index("per view")
    assert "views of the held-out protocol" in last and "not fitted to: 10 held-out victims read it" in last
    assert m["headline"] == last
    assert "**Headline:**" in (run / "report.md").read_text()
    assert "held-out protocol (" in proc.stdout and "views), signnet: clean accuracy" in proc.stdout
    assert not list(run.glob(".*tmp*")), "a temporary file was left behind"
    # every attack run ends with the quick drive-by report (conf/drive/quick.yaml: two drives)
    assert m["drive"]["drives"] == 2 and m["drive"]["stack"] == "two-stage" and "stop_rate_attacked" in m["drive"]
    assert (run / "drive" / "drive.md").is_file() and (run / "drive" / "drive_0.mp4").is_file()
    assert "drive-by (two-stage (detnet -> signnet), 2 held-out drives)" in proc.stdout
    # and with the area frontier: the run's stickers, then half their area, per view and per drive
    assert (run / "area.png").is_file() and "## Area frontier" in (run / "report.md").read_text()
    steps = m["area"]["steps"]
    assert [s["keep"] for s in steps] == [1.0, 0.5] and all("drives" in s for s in steps)
    assert steps[0]["area_fraction"] == pytest.approx(m["patch_area_fraction"], abs=1e-4)
    assert steps[0]["cells"] > steps[-1]["cells"] and set(steps[0]["views"]) >= {"signnet", "zoo_vit"}


@pytest.mark.slow
def test_reprogram_command_learns_a_label_map_and_reports_the_task(tmp_path):
    proc = run_cli(["+scene=reprogram_board", "attack=reprogram", "attack.steps=4", "attack.batch_size=4",
                    "attack.remap_every=1", "eot.grid.azimuth_deg=[-30,30]", "eot.grid.distance_m=[1.0]",
                    "eot.grid.lighting=[noon]", "progress=false"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = tmp_path / "run"
    for name in ["program.png", "confusion.png", "training.png", "views.png", "metrics.json", "patch.pt"]:
        assert (run / name).is_file(), f"{name} missing"
    assert list((run / "export").iterdir()), "the frame was not exported for printing"
    m = json.loads((run / "metrics.json").read_text())
    assert m["classes"] == 5 and m["chance"] == 0.2 and m["evaluations"] == 2 * 9
    assert len(set(m["label_map"])) == 5                       # learned one-to-one (label_map: auto)
    manifest = json.loads((run / "export" / "manifest.json").read_text())
    assert manifest["source"]["label_map"] == m["label_map"]    # the printed frame says what each label means
    assert m["task_accuracy"]["n"] == m["random_program_accuracy"]["n"] == 18
    assert "held-out task accuracy" in proc.stdout and "digits read as 0=" in proc.stdout


def test_missing_scene_says_to_add_it(tmp_path):
    msg = one_sentence_error(run_cli(["attack=yield"], tmp_path))
    assert "+scene=stop_sign" in msg and "yield_sign" in msg


def test_unknown_target_label_lists_the_victims_labels(tmp_path):
    msg = one_sentence_error(run_cli(["+scene=stop_sign", "attack.target=banana"], tmp_path))
    assert "banana" in msg and "yield" in msg and "stop" in msg


def test_missing_weights_file_says_what_to_do(tmp_path):
    msg = one_sentence_error(run_cli(["+scene=stop_sign", f"victim.weights={tmp_path / 'none.safetensors'}"],
                                     tmp_path))
    assert "none.safetensors" in msg and "physattack.train signnet" in msg


def test_mesh_without_uvs_is_refused(tmp_path):
    scene = tmp_path / "flat"
    scene.mkdir()
    (scene / "scene.yaml").write_text("name: flat\nclass_name: stop\nmesh: m.obj\ntexture_size_m: [1, 1]\n")
    (scene / "m.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 3\n")
    msg = one_sentence_error(run_cli(["+scene=stop_sign", f"scene.name_or_path={scene}"], tmp_path))
    assert "UV" in msg
