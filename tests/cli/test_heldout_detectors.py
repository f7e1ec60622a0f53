"""Held-out detectors (physattack/cli/build.py: protocol_members, the detector kind's pool; physattack/evaluate/detectors.py): after a
detector attack every detector of evaluation.detectors is scored, the attacked ones (each ensemble member) as
attacked and the rest as held out, never called while the patch is optimized."""

from __future__ import annotations

import json

import pytest
import torch
from commands import TINY
from omegaconf import OmegaConf, open_dict

from physattack.cli import build
from physattack.cli.kinds import PerceptionInputs, named
from physattack.cli.attack import attack_and_report, compose, headline
from physattack.cli.parts import attack_parts
from physattack.evaluate.detectors import detectors_line
from physattack.evaluate.members import tag_members
from physattack.train.detector import DetectorTraining, save_detector
from physattack.tracking import NullTracker
from physattack.victims import VictimError, load_detnet
from physattack.victims.ensemble import Ensemble
from physattack.victims.torchvision_detection import sign_detector

SMALL = [*TINY, "attack.steps=2", "attack.batch_size=2", "attack.mask_search_steps=0", "eot.grid.distance_m=[6]",
         "eot.grid.lighting=[noon]", "eval_batch_size=4", "gallery_views=2", "logger=none"]


@pytest.fixture(scope="module")
def tiny_weights(tmp_path_factory) -> dict:
    """Randomly initialised FCOS and SSDlite sign detectors (DetNet's labels, 64 px) written as the training
    writes them."""
    folder = tmp_path_factory.mktemp("detectors")
    labels = list(load_detnet().labels)
    paths = {}
    for name, arch in (("det_fcos", "fcos"), ("det_ssdlite", "ssdlite")):
        meta = DetectorTraining(arch=arch, image_size=64, fpn_channels=32).architecture(labels)
        torch.manual_seed(0)
        paths[name] = save_detector(folder / f"{name}.safetensors", sign_detector(meta), {**meta, "storage": "float32"})[0]
    return paths


def pool(weights: dict) -> dict:
    return {"detnet": {"_target_": "physattack.victims.load_detnet"},
            **{name: {"_target_": "physattack.victims.torchvision_detection.bundled_sign_detector", "name": name,
                      "weights": str(path)} for name, path in weights.items()}}


def attack_config(victim: str, weights: dict):
    extra = [f"victim.members.det_fcos.weights={weights['det_fcos']}", # and the area frontier over the pool
             "evaluation.area.enabled=true", "evaluation.area.keep=[0.5]", "evaluation.area.rank_views=2",
             "evaluation.area.drives=false"] if victim == "detector_ensemble" else []
    cfg = compose("+scene=stop_sign", "attack=hide", f"victim={victim}", *SMALL, *extra)
    with open_dict(cfg):
        cfg.evaluation.detectors = OmegaConf.create(pool(weights))
    return cfg


@pytest.mark.parametrize("victim, attacked, held_out", [
    ("detector_ensemble", ["detnet", "det_fcos"], ["det_ssdlite"]),
    ("detnet", ["detnet"], ["det_fcos", "det_ssdlite"]),          # the pool's detnet is the attacked one
])
def test_held_out_detectors_are_scored_but_never_called_by_the_optimizer(victim, attacked, held_out, tiny_weights,
                                                                          tmp_path, monkeypatch):
    monkeypatch.setattr(build, "export_patch", lambda *args, **kwargs: {})     # the print bundle is not tested here
    cfg = attack_config(victim, tiny_weights)
    run = build.run_config(cfg)
    parts = attack_parts(cfg, run, torch.device("cpu"))
    assert parts.kind.name == "detector"                           # the detectors' pool, not the classifier protocol
    roles = {n: m.role for n, m in parts.members.items()}
    assert [n for n, r in roles.items() if r == "attacked"] == attacked == parts.victim_names
    assert [n for n, r in roles.items() if r == "held-out"] == held_out

    calls = {n: 0 for n in roles}
    for name, member in parts.members.items():
        member.victim.register_forward_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    during_attack = {}
    run_attack = parts.attack.run

    def spy_run(*args, **kwargs):
        result = run_attack(*args, **kwargs)
        during_attack.update(calls)
        return result
    parts.attack.run = spy_run
    run_report = attack_and_report(parts, run, tmp_path, NullTracker())
    run_report.headline = parts.kind.headline(run_report)
    metrics = run_report.to_json()
    assert {n: during_attack[n] for n in held_out} == {n: 0 for n in held_out}, \
        "a held-out detector was called during optimization"
    assert all(calls[n] > 0 for n in held_out), "a held-out detector was never scored"
    if victim == "detector_ensemble":          # the members were the ones the optimizer asked
        assert all(during_attack[n] > 0 for n in attacked)

    table = metrics["heldout"]["detectors"]
    assert list(table["members"]) == attacked + held_out and not table["skipped"]
    for name, row in table["members"].items():
        assert row["role"] == roles[name] and row["label"] == "stop" and row["views"] == 2
        for key in ("detection_rate_clean", "detection_rate_attacked"):
            assert row[key]["n"] == 2 and 0.0 <= row[key]["rate"] <= 1.0 and len(row[key]["ci95"]) == 2
    assert table["held_out_mean"]["victims"] == held_out
    written = json.loads(run_report.write(tmp_path).read_text())
    assert written["heldout"]["detectors"]["members"].keys() == table["members"].keys() and written["kind"] == "detector"
    report = (tmp_path / "report.md").read_text()
    assert "## Detectors: attacked and held out" in report and all(f"| {n} | held-out |" in report for n in held_out)
    line = detectors_line(table)
    assert line.startswith("detectors (detection rate clean -> attacked") and all(n in line for n in held_out)
    for row in table["members"].values():                       # each detector's rates per grid value, too
        assert row["per_condition"] and all(sum(r["views"] for r in rows) == 2 for rows in row["per_condition"].values())
    assert "### Detectors by condition" in report and (tmp_path / "heldout_detectors.png").is_file()
    if victim == "detector_ensemble":          # the area frontier: every detector of the pool at each step
        steps = metrics["area"]["steps"]
        assert [r["keep"] for r in steps] == [1.0, 0.5] and steps[0]["area_fraction"] > steps[1]["area_fraction"] > 0
        assert all(list(r["views"]) == attacked + held_out and r["views"][n]["n"] <= 2 for r in steps for n in r["views"])
        assert [steps[0]["views"][n]["role"] for n in attacked + held_out] == [roles[n] for n in attacked + held_out]
        assert "## Area frontier" in report and "the sign gone" in report and (tmp_path / "area.png").is_file()
    line = headline(run_report)                  # the main figure says what it was and was not fitted to
    assert f"not fitted to: {len(held_out)} held-out detector" in line and line in report
    assert all(n in line.split("not fitted to")[1] for n in held_out)
    assert all(n in line.split(":")[0] for n in attacked)


def test_per_condition_detection_rates_show_where_a_detector_still_sees_the_sign():
    from physattack.evaluate.detectors import detector_conditions

    conditions = [{"lighting": light, "distance_m": d} for light in ("low_sun", "noon") for d in (5.0, 10.0)]
    clean = torch.tensor([0.9, 0.9, 0.9, 0.2])                # the far noon frame is missed even clean
    attacked = torch.tensor([0.8, 0.7, 0.1, 0.1])             # hidden at noon only
    tables = detector_conditions(clean, attacked, 0.5, conditions)
    light = {r["value"]: r for r in tables["lighting"]}
    assert light["low_sun"]["detection_rate_attacked"]["rate"] == 1.0 and light["noon"]["detection_rate_attacked"]["rate"] == 0.0
    assert (light["noon"]["disappearance_rate"]["count"], light["noon"]["disappearance_rate"]["n"]) == (1, 1)
    assert [r["value"] for r in tables["distance_m"]] == [5.0, 10.0]
    assert [r["detection_rate_clean"]["rate"] for r in tables["distance_m"]] == [1.0, 0.5]


def test_a_detector_without_the_scene_class_and_a_classifier_are_skipped_with_their_reason(tiny_weights, stop_scene):
    from physattack.evaluate.detectors import evaluate_detectors
    from physattack.victims import load_signnet

    other = DetectorTraining(arch="fcos", image_size=64, fpn_channels=32).architecture(["yield", "one_way"])
    members = tag_members(held_out={"no_stop": sign_detector(other).freeze(), "signnet": load_signnet()})
    table = evaluate_detectors(stop_scene, stop_scene.texture, stop_scene.texture, None, None, members)
    assert table["members"] == {} and table["held_out_mean"]["detection_rate_attacked"] is None
    assert table["skipped"]["no_stop"]["reason"] == "its labels lack the scene's class 'stop'"
    assert table["skipped"]["signnet"]["reason"].startswith("a classifier")


def test_the_drive_panel_of_a_detector_run_is_its_detectors_each_on_its_own_tiles(stop_scene):
    """A detector run's drive stack scans the frames with each detector of its pool (attacked and held
    out); a classifier or a detector without the sign's class is left off, with the reason."""
    from omegaconf import OmegaConf
    from physattack.victims import load_signnet

    other = DetectorTraining(arch="fcos", image_size=64, fpn_channels=32).architecture(["yield", "one_way"])
    members = tag_members(attacked={"detnet": load_detnet()},
                          held_out={"no_stop": sign_detector(other).freeze(), "signnet": load_signnet()})
    node = OmegaConf.merge(build.drive_config("quick"), {"dashcam": {"width_px": 640, "height_px": 360}})
    perception = named("detector").perception(node, PerceptionInputs(members["detnet"].victim, ["detnet"], members,
                                                                     (64, 0.6), torch.device("cpu")))
    parts = build.drive_evaluation(node, perception, scene=stop_scene, renderer=None,
                                   backgrounds=torch.zeros(1, 3, 8, 8))
    stack = parts.stack
    assert stack.kind == "detector" and list(stack.panel) == ["detnet"]
    assert stack.panel["detnet"].model.detector is members["detnet"].victim and stack.panel["detnet"].role == "attacked"
    assert stack.panel_skipped == {"no_stop": "its labels lack the scene's class 'stop'",
                                   "signnet": "a classifier, on a detector stack"}


def test_an_ensemble_member_without_the_label_is_one_sentence_naming_it(tiny_weights):
    yield_only = sign_detector(DetectorTraining(arch="ssdlite", image_size=64).architecture(["yield"])).freeze()
    ensemble = Ensemble([load_detnet(), yield_only], names=["detnet", "det_yield"])
    with pytest.raises(VictimError) as err:
        ensemble.label_index("stop")
    text = str(err.value)
    assert "det_yield" in text and "'stop'" in text and "remove it from victim.members" in text and "\n" not in text
    with pytest.raises(VictimError, match="at least one member"):
        Ensemble([])


def test_a_detector_ensemble_member_without_the_target_is_refused_naming_it(tiny_weights, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    coco = ("+victim.members.coco={_target_: physattack.victims.torchvision_detection.load_torchvision_detector, "
            "arch: ssdlite320_mobilenet_v3_large, random_init: true}")
    cfg = compose("+scene=stop_sign", "attack=mislabel", "victim=detector_ensemble",
                  f"victim.members.det_fcos.weights={tiny_weights['det_fcos']}", coco, *SMALL)
    with pytest.raises(VictimError) as err:
        attack_parts(cfg, build.run_config(cfg), torch.device("cpu"))
    text = str(err.value)
    assert "Ensemble member 'coco' has no label 'yield'" in text and "victim.members" in text and "\n" not in text
