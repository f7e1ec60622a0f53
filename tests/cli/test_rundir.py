"""Run folders (physattack/cli/rundir.py): a run writes only into a new folder or inside the folder
``resume=`` names; nothing an earlier run wrote is ever changed."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import json
import os

import pytest
from commands import TINY, call, last_error_line, run_module, tree_digest
from omegaconf import OmegaConf

from physattack.cli.rundir import CLAIM_FILE, claim_output, free_folder, guard_own_folder, remove_if_untouched
from physattack.errors import InputError


def hydra_cfg(run_dir, **top):
    return OmegaConf.create({"hydra": {"run": {"dir": str(run_dir)}}, **top})


def test_a_taken_default_folder_moves_on_and_an_explicit_one_is_refused(tmp_path):
    taken = tmp_path / "outputs" / "12-00-00"
    taken.mkdir(parents=True)
    (taken / "metrics.json").write_text("{}")
    overrides, made = claim_output("run", hydra_cfg(taken), ["+scene=stop_sign"])
    assert overrides == [f"hydra.run.dir='{tmp_path / 'outputs' / '12-00-00-2'}'"]
    assert made[0] == tmp_path / "outputs" / "12-00-00-2" and made[0].is_dir()
    with pytest.raises(InputError, match="already holds files"):
        claim_output("run", hydra_cfg(taken), [f"hydra.run.dir={taken}"])
    remove_if_untouched(made)
    assert not made[0].exists() and taken.is_dir()


def test_resume_claims_a_folder_inside_the_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoint.pt").write_bytes(b"x")
    (run / "resume").mkdir()
    (run / "resume" / "metrics.json").write_text("{}")
    overrides, _ = claim_output("run", hydra_cfg(tmp_path / "new", resume=str(run)), [f"resume={run}"])
    assert overrides == [f"hydra.run.dir='{run / 'resume-2'}'"]
    with pytest.raises(InputError, match="no checkpoint.pt"):
        claim_output("run", hydra_cfg(tmp_path / "new", resume=str(tmp_path)), [f"resume={tmp_path}"])


def test_a_requeued_job_continues_only_its_own_unfinished_run(tmp_path):
    run = tmp_path / "0"
    (run / ".hydra").mkdir(parents=True)
    assert guard_own_folder(run, "a: 1\n") is False                 # only Hydra's own files: fresh
    (run / "config.yaml").write_text("a: 1\n")
    (run / "checkpoint.pt").write_bytes(b"x")
    assert guard_own_folder(run, "a: 1\n") is True                  # same config, unfinished: continue
    with pytest.raises(InputError, match="another run"):
        guard_own_folder(run, "a: 2\n")                             # another config's files
    (run / "metrics.json").write_text("{}")
    with pytest.raises(InputError, match="another run"):
        guard_own_folder(run, "a: 1\n")                             # finished: never written again


def test_free_folder_makes_a_new_folder_and_never_reuses_one(tmp_path):
    assert free_folder(tmp_path / "export") == tmp_path / "export"
    assert (tmp_path / "export").is_dir()
    assert free_folder(tmp_path / "export") == tmp_path / "export-2"         # made by an earlier writer
    (tmp_path / "export-3").mkdir()
    assert free_folder(tmp_path / "export") == tmp_path / "export-4"


def test_a_path_through_dotdot_is_the_folder_it_names(tmp_path):
    finished = tmp_path / "finished"
    (finished / ".hydra").mkdir(parents=True)
    (finished / ".hydra" / "config.yaml").write_text("a: 1\n")
    (finished / "metrics.json").write_text("{}")
    before = tree_digest(finished)
    sneaky = tmp_path / "new" / ".." / "finished"
    with pytest.raises(InputError, match=f"hydra.run.dir={finished} already holds files"):
        claim_output("run", hydra_cfg(sneaky), [f"hydra.run.dir={sneaky}"])
    assert not (tmp_path / "new").exists() and tree_digest(finished) == before


def test_the_door_resolves_and_claims_before_hydra_writes(tmp_path, monkeypatch):
    """``hydra.run.dir=<new>/../<finished>`` through the real door: refused, no .hydra rewritten, no folder left."""
    monkeypatch.chdir(tmp_path)
    finished = tmp_path / "finished"
    (finished / ".hydra").mkdir(parents=True)
    (finished / ".hydra" / "config.yaml").write_text("a: 1\n")
    (finished / "patch.pt").write_bytes(b"x")
    before = tree_digest(finished)
    from physattack.cli.attack import main
    status = call(main, ["+scene=stop_sign", f"hydra.run.dir={tmp_path}/new/../finished"])
    assert status == 2
    assert tree_digest(finished) == before and not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["finished"]


def _claim_at_once(folder, barrier, queue):
    barrier.wait()
    from physattack.cli.rundir import claim_output
    try:
        overrides, _ = claim_output("run", hydra_cfg(folder), [f"hydra.run.dir={folder}"])
        queue.put(("won", overrides[0]))
    except InputError as e:
        queue.put(("refused", str(e)))


def test_two_claims_of_one_folder_at_once_have_exactly_one_winner(tmp_path):
    """Twenty times, two processes claim the same new folder at the same instant: one wins, one is refused."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    for k in range(20):
        folder = tmp_path / f"race-{k}" / "run"
        barrier, queue = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_claim_at_once, args=(folder, barrier, queue)) for _ in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(30)
        results = sorted(queue.get(timeout=5) for _ in procs)
        assert [r[0] for r in results] == ["refused", "won"], results
        assert "already holds files" in results[0][1] or "just taken by another run" in results[0][1]
        assert sorted(p.name for p in folder.iterdir()) == [CLAIM_FILE]


@pytest.mark.slow
def test_two_runs_started_into_one_folder_at_once(tmp_path):
    """Two real runs into one hydra.run.dir at the same moment: one finishes with complete files, the other
    is refused with one sentence and exit 2 and writes nothing."""
    run = tmp_path / "run"
    env = {**os.environ, "HOME": str(tmp_path / "home"), "WANDB_MODE": "disabled", "OMP_WAIT_POLICY": "PASSIVE"}
    args = [sys.executable, "-m", "physattack", "+scene=stop_sign", "attack=yield", *TINY, "evaluation.enabled=false",
            "patch.shape=bars", f"hydra.run.dir={run}"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [o[1][-2000:] for o in outs]
    loser = next(o for p, o in zip(procs, outs) if p.returncode == 2)
    assert last_error_line(loser[1]).startswith(f"error: hydra.run.dir={run}")
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps_done"] == 2
    for name in ("patch.pt", "checkpoint.pt", "config.yaml", "texture.png", "export/manifest.json"):
        assert (run / name).is_file(), name


@pytest.mark.slow
def test_resume_and_evaluate_write_beside_and_change_no_old_file(finished_run, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(finished_run, run)
    before = tree_digest(run)
    proc = run_module("physattack", ["+scene=stop_sign", "attack=yield", *TINY, "attack.steps=3",
                                     "evaluation.enabled=false", f"resume={run}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads((run / "resume" / "metrics.json").read_text())["steps_done"] == 3
    assert (run / "resume" / "export" / "manifest.json").is_file()
    proc = run_module("physattack.evaluate", [f"run_dir={run}", "evaluation.settings.atlas=false",
                                              "evaluation.grid.camera_effects=[default]"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "heldout" in json.loads((run / "evaluation" / "metrics.json").read_text())
    assert "views), signnet: clean accuracy" in proc.stdout            # whose rates the console gives
    assert "**Headline:**" in (run / "evaluation" / "report.md").read_text()
    after = tree_digest(run)
    assert {k: after[k] for k in before} == before, "a file of the earlier run changed"


@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_run_saves_and_exits_non_zero(sig, status, tmp_path):
    run = tmp_path / "run"
    env = {**os.environ, "HOME": str(tmp_path / "home"), "WANDB_MODE": "disabled", "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.Popen([sys.executable, "-m", "physattack", "+scene=stop_sign", "attack=yield", *TINY,
                             "attack.steps=100000", "patch.shape=bars", f"hydra.run.dir={run}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path)
    deadline = time.time() + 240
    while not (run / "checkpoint.pt").is_file() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.2)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == status, err[-3000:]
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["interrupted"] is True and metrics["interrupted_by"] == int(sig)
    assert 1 <= metrics["steps_done"] < 100000
    assert (run / "patch.pt").is_file() and (run / "export" / "manifest.json").is_file()
    assert "resume=" in err and "Traceback" not in err
