"""Fixtures of the scene tests."""

from __future__ import annotations

import shutil

import pytest

from physattack.scene.scene import bundled_scenes_dir


@pytest.fixture()
def stop_copy(tmp_path):
    """A writable copy of the bundled stop-sign folder."""
    folder = tmp_path / "my_stop"
    shutil.copytree(bundled_scenes_dir() / "stop_sign", folder)
    return folder
