"""``python -m physattack.evaluate`` fails with one sentence on bad input."""

from __future__ import annotations

import os
import subprocess
import sys


def run(module: str, args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "WANDB_MODE": "disabled", "OMP_WAIT_POLICY": "PASSIVE"}
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env,
                          timeout=300, cwd=tmp_path)


def test_evaluate_needs_a_finished_run(tmp_path):
    proc = run("physattack.evaluate", [f"run_dir={tmp_path / 'nothing'}"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: ") and "config.yaml" in last and "Traceback" not in proc.stderr

