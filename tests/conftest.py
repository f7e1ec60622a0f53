"""Shared fixtures: a device, the stop-sign scene, the bundled victim; W&B never touches $HOME."""

from __future__ import annotations

import os

import pytest
import torch

os.environ.setdefault("WANDB_MODE", "disabled")
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
if os.environ.get("PYTEST_XDIST_WORKER"):      # workers share the cores: one thread each
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def device() -> torch.device:
    """CPU, or what PHYSATTACK_TEST_DEVICE names (benchmarks/gpu_check.sh sets cuda)."""
    return torch.device(os.environ.get("PHYSATTACK_TEST_DEVICE", "cpu"))


@pytest.fixture(scope="session")
def stop_scene():
    from physattack.scene import load_scene
    return load_scene("stop_sign")


@pytest.fixture(scope="session")
def signnet():
    from physattack.victims import load_signnet
    return load_signnet()
