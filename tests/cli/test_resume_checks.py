"""``resume=`` continues only a run of the same scene, patch, victim, attack, renderer and seed
(physattack/cli/attack.py ``check_resume``): a mismatch is one sentence naming the key, its value in
the run and the value given, before any folder is made."""

from __future__ import annotations

import pytest
from commands import call, last_error_line, tree_digest
from omegaconf import OmegaConf

from physattack.cli.attack import compose, main

CANONICAL = ["+scene=stop_sign", "attack=yield"]


@pytest.fixture
def earlier_run(tmp_path):
    """A run folder as `python -m physattack +scene=stop_sign attack=yield` leaves it (config and checkpoint)."""
    run = tmp_path / "run"
    run.mkdir()
    cfg = compose(*CANONICAL)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (run / "checkpoint.pt").write_bytes(b"not read: the check comes first")
    return run


@pytest.mark.parametrize("overrides, key, theirs, mine", [
    (["+scene=yield_sign", "attack=yield"], "scene.name_or_path", "stop_sign", "yield_sign"),
    ([*CANONICAL, "patch=paint"], "patch._target_", "physattack.patch.sticker_for_scene", "physattack.patch.PaintPatch"),
    ([*CANONICAL, "patch.shape=bars"], "patch.shape", "search", "bars"),
    ([*CANONICAL, "patch.area=0.1"], "patch.area", "0.195", "0.1"),
    ([*CANONICAL, "victim=zoo_resnet10t"], "victim._target_", "physattack.victims.load_signnet",
     "physattack.victims.timm.bundled_timm_victim"),
    (["+scene=stop_sign", "attack=untargeted"], "attack.objective", "targeted", "untargeted"),
    ([*CANONICAL, "attack.target=no_entry"], "attack.target", "yield", "no_entry"),
    ([*CANONICAL, "renderer.rasterizer.backend=torch"], "renderer.rasterizer.backend", "auto", "torch"),
    ([*CANONICAL, "seed=1"], "seed", "0", "1"),
])
def test_a_resume_that_changes_what_the_run_was_is_refused(earlier_run, tmp_path, monkeypatch, capsys,
                                                           overrides, key, theirs, mine):
    monkeypatch.chdir(tmp_path)
    if key == "patch._target_":
        mine = OmegaConf.select(compose(*overrides), "patch._target_")
    before = tree_digest(earlier_run)
    assert call(main, [*overrides, f"resume={earlier_run}"]) == 2
    line = last_error_line(capsys.readouterr().err)
    assert f"whose {key} is {theirs}, but this command gives {mine}" in line, line
    assert tree_digest(earlier_run) == before
    assert sorted(p.name for p in earlier_run.iterdir()) == ["checkpoint.pt", "config.yaml"]   # no resume/ folder


def test_a_resume_may_change_the_steps_and_the_learning_rate(earlier_run):
    from physattack.cli.attack import check_resume

    cfg = compose(*CANONICAL, "attack.steps=800", "attack.lr=0.1", "patch.init_color=[0.2,0.2,0.2]",
                  f"resume={earlier_run}")
    check_resume(cfg, OmegaConf.load(earlier_run / "config.yaml"))      # no error
