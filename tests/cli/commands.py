"""Helpers of the command tests: run a command in this process (the door's refusals return 2, a
refusal inside the Hydra job exits 2 through ``SystemExit``) or as ``python -m``; check the one
``error:`` sentence; digest a folder to prove nothing in it changed."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

# the small attack of the end-to-end tests
TINY = ["attack.steps=2", "attack.batch_size=4", "attack.checkpoint_every=1", "gallery_views=4",
        "eot.grid.azimuth_deg=[-30,30]", "eot.grid.distance_m=[5,12]", "eot.grid.lighting=[noon,low_sun]",
        "progress=false",
        # the approach windows (eot=approach, the default) at their smallest: one drive of one window and two views
        "eot.sampler.drives=1", "eot.sampler.segments=1", "eot.sampler.views_per_step=2", "eot.sampler.fit.drives=1",
        "eot.sampler.fit.frames_per_drive=3",
        "evaluation.area.enabled=false",     # the area frontier: in the canonical command's test only
        "printer.export.dpi=40",             # the print bundle at 40 dpi (300 costs ~10 s a run; export's own tests)
        # the two held-out victims trained on warped photographs cost every tiny run's protocol and drive panel:
        # kept only by the tests of their group (with_warp)
        "~evaluation.victims.warp_resnet10t", "~evaluation.victims.warp_mobilenetv3"]
NO_WARP = TINY[-2:]


def with_warp(args: list[str]) -> list[str]:
    """``args`` with the warp-trained held-out victims left in the pool."""
    return [a for a in args if a not in NO_WARP]


def call(main, argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code or 0)


def one_sentence(capsys) -> str:
    """The last stderr line, checked to be one ``error:`` sentence without a traceback."""
    return last_error_line(capsys.readouterr().err)


def one_sentence_error(proc: subprocess.CompletedProcess) -> str:
    """A ``python -m`` run's refusal: exit status 2 and one ``error:`` sentence without a traceback."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    return last_error_line(proc.stderr)


def last_error_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("error: ") and "Traceback" not in err, err[-2000:]
    return lines[-1]


def tree_digest(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder``, by relative path."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def run_module(module: str, args: list[str], cwd: Path, timeout: int = 300, **kw) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(cwd / "home"), "WANDB_MODE": "disabled", "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=cwd, **kw)
