"""Fixtures of the command tests: an empty working folder, and one finished tiny run."""

from __future__ import annotations

from pathlib import Path

import pytest
from commands import TINY, run_module, with_warp


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run in an empty folder, so that a default run folder (outputs/...) would show up there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    return tmp_path


@pytest.fixture(scope="session")
def finished_run(tmp_path_factory) -> Path:
    """A finished tiny run of the canonical command (no full protocol), shared by the tests that
    must not change it."""
    root = tmp_path_factory.mktemp("finished")
    proc = run_module("physattack", ["+scene=stop_sign", "attack=yield", *with_warp(TINY),
                                     "evaluation.enabled=false", f"hydra.run.dir={root / 'run'}"], root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run"
