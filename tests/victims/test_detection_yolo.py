"""Ultralytics YOLO as an optional victim: skipped unless the `yolo` extra is installed; never downloads."""

from __future__ import annotations

import sys

import pytest
import torch

from physattack.victims import VictimError


def test_without_ultralytics_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ultralytics", None)     # as if it were not installed
    from physattack.victims.yolo import load_yolo
    with pytest.raises(VictimError, match=r"physattack\[yolo\]"):
        load_yolo(random_init=True)


@pytest.fixture(scope="module")
def yolo(tmp_path_factory):
    pytest.importorskip("ultralytics")
    from physattack.victims.yolo import load_yolo
    return load_yolo("yolov8n.yaml", input_size=160, random_init=True)


def test_yolo_from_its_yaml_has_coco_names_and_gradients(yolo, stop_scene):
    from physattack.attack.detection_objectives import hide
    from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
    from physattack.eot.frames import FrameSampler
    from physattack.patch import sticker_for_scene
    from physattack.render import Renderer
    assert len(yolo.labels) == 80 and yolo.labels[11] == "stop sign" and yolo.label_index("stop") == 11
    patch = sticker_for_scene(stop_scene, shape="bars", area=0.18)
    pipe = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (128, 128))
    params = FrameSampler(ViewSampler(background_count=4, jpeg_share=0.0)).sample(2, torch.Generator().manual_seed(0))
    views = pipe(stop_scene, patch.apply(stop_scene.texture), params)
    out = yolo(views.images)
    assert out.candidate_scores.shape[0] == 2 and out.candidate_scores.shape[2] == 80
    assert out.candidate_boxes.shape == (*out.candidate_scores.shape[:2], 4)
    hide(out, 11, views).sum().backward()
    assert float(patch.logits.grad.abs().sum()) > 0


def test_yolo_loads_a_local_pt_and_refuses_a_missing_one(yolo, tmp_path):
    from ultralytics import YOLO
    from physattack.victims.yolo import load_yolo
    with pytest.raises(VictimError, match="not on this machine"):
        load_yolo(weights=str(tmp_path / "yolov8n.pt"))
    model = YOLO("yolov8n.yaml")
    path = tmp_path / "mine.pt"
    model.save(str(path))
    loaded = load_yolo(weights=str(path), input_size=160)
    assert loaded.label_index("stop") == 11 and not loaded.training
