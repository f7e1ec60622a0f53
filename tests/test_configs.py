"""Every YAML in conf/ composes, and every group option instantiates (or fails with its sentence)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.utils import instantiate

from physattack.errors import InputError
from physattack.render.pytorch3d import pytorch3d_available

CONF = Path(str(resources.files("physattack.conf")))
OPTIONS = sorted((p.parent.name, p.stem) for p in CONF.glob("*/*.yaml") if p.parent.name not in {"hydra", "experiment"})
EXPERIMENTS = sorted(p.stem for p in CONF.glob("experiment/*.yaml"))


@pytest.fixture
def hydra_ctx():
    """Hydra's global state for one test: per test, since the front door's own composition (``door_compose``, used
    by tests here too) clears it, and a worker may run those between any two tests of this module."""
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module="physattack.conf", version_base="1.3"):
        yield


#: victim options built from bundled weights (the others need cached torchvision/timm weights).
BUNDLED_VICTIMS = {"signnet", "signnet_clear", "signnet_fog", "detnet", "det_fcos", "det_retinanet", "ensemble",
                   "ensemble_convnext", "detector_ensemble", "stack_tinynet_e"}


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}/{o}" for g, o in OPTIONS])
def test_group_option_composes_and_instantiates(hydra_ctx, stop_scene, group, option, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))      # empty caches, whatever this machine has
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    # scene and drive are not in config.yaml's defaults (the attack run reads conf/drive/quick.yaml itself)
    overrides = ["+scene=stop_sign"] + ([f"{group}={option}"] if group not in ("scene", "drive") else
                                        [f"scene={option}"] if group == "scene" else [f"+drive={option}"])
    cfg = compose(config_name="config", overrides=overrides)
    node = cfg[group]
    if group == "patch":
        obj = instantiate(node, scene=stop_scene)
        assert obj.area_fraction(stop_scene.face_mask) > 0
    elif group == "logger":
        obj = instantiate(node, dir=str(tmp_path), run_config={"a": {"b": 1}}, _recursive_=False, _convert_="all")
        obj.finish()
    elif group == "victim" and option not in BUNDLED_VICTIMS and not option.startswith(("zoo_", "warp_")):
        with pytest.raises(Exception) as err:
            instantiate(node)            # no torchvision weights are cached here, and nothing downloads
        msg = str(err.value.__cause__)
        assert isinstance(err.value.__cause__, InputError) and ("not on this machine" in msg or "[yolo]" in msg)
        if "[yolo]" not in msg:          # the optional YOLO extra, when installed, builds from its YAML
            obj = instantiate(node, random_init=True)
            assert len(obj.labels) in (1000, 91, 80)    # ImageNet classifiers, torchvision COCO, YOLO COCO
    elif group == "eot":
        for key in ("sampler", "backgrounds", "eval_backgrounds", "grid"):
            assert instantiate(node[key], _convert_="all") is not None
    elif group == "renderer" and option == "pytorch3d" and not pytorch3d_available():
        with pytest.raises(Exception) as err:
            instantiate(node)
        assert isinstance(err.value.__cause__, InputError) and "PyTorch3D" in str(err.value.__cause__)
    elif group == "printer":
        from physattack.printing import load_palette
        assert load_palette(node.palette).shape[1] == 3
    else:
        assert instantiate(node) is not None


def test_canonical_composition(hydra_ctx):
    cfg = compose(config_name="config", overrides=["+scene=stop_sign", "attack=yield"])
    assert cfg.scene.name_or_path == "stop_sign" and cfg.attack.target == "yield"
    assert cfg.victim._target_.endswith("load_signnet") and cfg.patch._target_.endswith("sticker_for_scene")


#: Experiments that are one run's recipe rather than a sweep.
RECIPES = {"transfer", "unseen", "hide_unseen"}


@pytest.mark.parametrize("name", [e for e in EXPERIMENTS if e not in RECIPES])
def test_experiment_files_compose_with_their_sweeps(hydra_ctx, name):
    cfg = compose(config_name="config", overrides=["+scene=stop_sign", f"+experiment={name}"],
                  return_hydra_config=True)
    assert cfg.hydra.sweeper.params, "an experiment file should sweep something"
    assert cfg.logger.group == name


def test_the_canonical_command_draws_fog_night_and_dusk_four_windows_a_drive_and_32_close_views():
    from physattack.cli.attack import compose as door_compose

    cfg = door_compose("+scene=stop_sign", "attack=yield")
    sampler = instantiate(cfg.eot.sampler, _convert_="all")
    assert sampler.views_per_step == 32 and sampler.segments == 4 and sampler.conditions.any
    assert (sampler.conditions.fog, sampler.conditions.night, sampler.conditions.dusk) == (0.15, 0.15, 0.1)
    assert cfg.attack.steps == 300 and cfg.victim._target_.endswith("load_signnet")


@pytest.mark.parametrize("name", ["unseen", "hide_unseen"])
def test_the_red_team_presets_keep_the_approach_windows_they_were_measured_with(name):
    from physattack.cli.attack import compose as door_compose

    attack = "hide" if name == "hide_unseen" else "yield"
    cfg = door_compose("+scene=stop_sign", f"attack={attack}", f"+experiment={name}")
    sampler = instantiate(cfg.eot.sampler, _convert_="all")
    assert not sampler.conditions.any and sampler.fit.get("shrink", 0.0) == 0.0       # daylight, the detector's boxes
    if name == "unseen":                    # four windows a drive (the canonical command's), 48 close views
        assert sampler.views_per_step == 48 and sampler.segments == 4
    else:
        assert sampler.views_per_step == 16 and sampler.segments == 2


def test_the_red_team_preset_is_the_ensemble_over_approach_windows_within_a_quarter_of_the_face():
    from physattack.cli.attack import compose as door_compose

    cfg = door_compose("+scene=stop_sign", "attack=yield", "+experiment=unseen")
    assert cfg.victim._target_.endswith("build_ensemble") and "zoo_convnext_atto" in cfg.victim.members
    assert {"zoo_resnet10t_48", "zoo_ghostnet_48"} <= set(cfg.victim.members)   # two that see a far sign's 48 px
    assert cfg.eot.sampler._target_.endswith("ApproachSampler") and cfg.patch.area <= 0.25
    assert cfg.eot.sampler.decision.every_window     # a drawn window stands for its drive's: +12 points over drives
    judge = cfg.attack.restart_judge                # up to three starts, judged on the red team's own drives
    assert cfg.attack.restarts == 3 and judge.by == "drives" and judge.accept == 0.8 and judge.drives.seed == 4000
    held_out = set(cfg.evaluation.victims) - set(cfg.victim.members)
    families = {cfg.evaluation.families[n] for n in held_out} - {cfg.evaluation.families[n] for n in cfg.victim.members}
    assert len(families) >= 3                      # at least three families no member shares
    other_data = {n for n in held_out if (cfg.evaluation.get("data") or {}).get(n, "render") != "render"}
    assert other_data >= {"warp_resnet10t", "warp_mobilenetv3"}     # and victims that never saw a render, apart


def test_the_four_member_preset_is_one_line_back_as_the_readme_says():
    from physattack.cli.attack import compose as door_compose

    cfg = door_compose("+scene=stop_sign", "attack=yield", "+experiment=unseen",
                       "~victim.members.zoo_ghostnet_48", "eot.sampler.views_per_step=32", "attack.restarts=1")
    assert list(cfg.victim.members) == ["signnet_clear", "zoo_resnet10t", "zoo_convnext_atto", "zoo_resnet10t_48"]
    assert cfg.eot.sampler.views_per_step == 32 and cfg.eot.sampler.segments == 4 and cfg.attack.restarts == 1


def test_the_data_map_names_pool_victims_and_every_pool_victim_has_a_family():
    from physattack.cli.attack import compose as door_compose

    cfg = door_compose("+scene=stop_sign", "attack=yield")
    extra = set(cfg.evaluation.data) - set(cfg.evaluation.victims)
    assert not extra, f"evaluation.data names {sorted(extra)}, which evaluation.victims lacks"
    assert set(cfg.evaluation.data.values()) == {"warp"}
    assert set(cfg.evaluation.victims) <= set(cfg.evaluation.families)      # every pool victim has its family


def test_the_transfer_recipe_sets_the_ensemble_loss_and_input_diversity_and_passes_the_door():
    from physattack.cli.attack import compose as door_compose

    cfg = door_compose("+scene=stop_sign", "attack=yield", "+experiment=transfer")
    assert cfg.victim._target_.endswith("build_ensemble") and cfg.attack.objective == "targeted_logit"
    assert cfg.victim.diversity == 0.5 and cfg.attack.target == "yield"


def test_the_hiding_preset_hides_from_the_detector_ensemble_on_half_the_face_with_a_held_out_detector():
    from physattack.cli.attack import compose as door_compose

    cfg = door_compose("+scene=stop_sign", "attack=hide", "victim=detector_ensemble", "+experiment=hide_unseen")
    assert cfg.attack.objective == "hide" and cfg.victim._target_.endswith("build_ensemble")
    assert list(cfg.victim.members) == ["detnet", "det_fcos"]
    assert cfg.eot.sampler._target_.endswith("ApproachSampler") and cfg.patch.area == 0.5
    assert cfg.eot.sampler.clean_camera == 0.5 and cfg.eot.sampler.decision.every_window
    assert set(cfg.evaluation.detectors) - set(cfg.victim.members)     # a detector no member is: held out
    plain = door_compose("+scene=stop_sign", "+experiment=hide_unseen")       # the preset alone says the same
    assert plain.attack.objective == "hide" and plain.victim == cfg.victim
