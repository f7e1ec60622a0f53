"""The detector commands end to end: `python -m physattack +scene=stop_sign attack=hide victim=<detector>`
with a tiny budget — every torchvision adapter with random weights (nothing downloaded), the bundled
DetNet — and the one-sentence errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from commands import one_sentence_error

TINY = ["attack.steps=2", "attack.batch_size=2", "attack.mask_search_steps=1", "attack.checkpoint_every=1",
        "gallery_views=2", "eval_batch_size=2", "eot.grid.azimuth_deg=[-30,30]", "eot.grid.distance_m=[6]",
        "eot.grid.lighting=[noon]", "progress=false", "+drive=none",    # no drive report: the tiles would take minutes
        # the approach windows (eot=approach, the default) at their smallest: one window of one drive, two views
        "eot.sampler.drives=1", "eot.sampler.segments=1", "eot.sampler.views_per_step=2",
        "evaluation.area.enabled=false",     # the area frontier: tests/evaluate/test_area.py, test_heldout_detectors.py
        "printer.export.dpi=40"]             # the print bundle at 40 dpi (300 costs ~10 s a run)
TORCHVISION = ["fasterrcnn_mobilenet_v3_large_320_fpn", "fasterrcnn_resnet50_fpn", "retinanet_resnet50_fpn",
               "fcos_resnet50_fpn", "ssdlite320_mobilenet_v3_large"]
YOLO = pytest.param("yolov8n", marks=pytest.mark.skipif(importlib.util.find_spec("ultralytics") is None,
                                                         reason="the optional yolo extra is not installed"))


def run_cli(args: list[str], tmp_path: Path, timeout: int = 400) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "WANDB_MODE": "offline", "OMP_WAIT_POLICY": "PASSIVE",
           "TORCH_HOME": str(tmp_path / "torch")}                    # an empty torch cache: nothing to find
    return subprocess.run([sys.executable, "-m", "physattack", *args, f"hydra.run.dir={tmp_path / 'run'}"],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=tmp_path)


def check_run(proc, run: Path, objective: str) -> dict:
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ["patch.png", "patch.pt", "texture.png", "views.png", "heatmap.png", "clean_heatmap.png",
                 "training.png", "metrics.json", "config.yaml", "checkpoint.pt"]:
        assert (run / name).is_file(), f"{name} missing"
    assert list((run / "wandb").glob("offline-run-*")), "no offline W&B run"
    m = json.loads((run / "metrics.json").read_text())
    assert m["views"] == 2 and len(m["per_view"]) == 2 and m["steps_done"] == 2
    assert m["zero_gradient_steps"] == 0, "the patch got no gradient through the detector"
    for key in ("detection_rate_clean", "detection_rate_attacked", "disappearance_rate", "vanish_rate"):
        assert m[key]["n"] <= 2 and 0.0 <= (m[key]["rate"] if m[key]["n"] else 0.0) <= 1.0
    assert all(len(v["gt_box"]) == 4 and v["gt_box"][2] > v["gt_box"][0] for v in m["per_view"])
    assert m["attack"].startswith(objective) and "detection rate" in proc.stdout
    assert 0.10 < m["patch_area_fraction"] <= 0.20
    assert "drive" not in m and not (run / "drive").exists(), "+drive=none still judged drives"
    return m


@pytest.mark.slow
@pytest.mark.random_weights
@pytest.mark.parametrize("victim", TORCHVISION + [YOLO])
def test_hide_runs_end_to_end_on_a_randomly_initialised_detector(victim, tmp_path):
    size = ["victim.input_size=128"] if "resnet50" in victim else []   # the 320-px models run at their own size
    proc = run_cli(["+scene=stop_sign", "attack=hide", f"victim={victim}", "victim.random_init=true", *size, *TINY],
                   tmp_path)
    m = check_run(proc, tmp_path / "run", "hide")
    assert m["true_label"] == "stop sign" and m["target_label"] is None
    assert m["victim_names"] == [victim] and f"hide on {victim}, fitted to it:" in proc.stdout   # the headline names it


@pytest.mark.slow
def test_mislabel_runs_end_to_end_on_the_bundled_detector(tmp_path):
    proc = run_cli(["+scene=stop_sign", "attack=mislabel", "victim=detnet", *TINY], tmp_path)
    m = check_run(proc, tmp_path / "run", "mislabel")
    assert m["target_label"] == "yield" and "mislabel_rate" in m and m["ap50_clean"] >= 0.0


def test_yield_against_a_coco_detector_lists_its_labels(tmp_path):
    msg = one_sentence_error(run_cli(["+scene=stop_sign", "attack=yield",
                                      "victim=fasterrcnn_mobilenet_v3_large_320_fpn", "victim.random_init=true"],
                                     tmp_path))
    assert "'yield'" in msg and "stop sign" in msg and "person" in msg and "N/A" not in msg


def test_hide_against_a_classifier_says_it_needs_a_detector(tmp_path):
    msg = one_sentence_error(run_cli(["+scene=stop_sign", "attack=hide"], tmp_path))
    assert "needs a detector victim" in msg


def test_torchvision_detector_without_weights_says_where_to_put_them(tmp_path):
    msg = one_sentence_error(run_cli(["+scene=stop_sign", "attack=hide", "victim=retinanet_resnet50_fpn"], tmp_path))
    assert "not on this machine" in msg and "victim.weights" in msg
