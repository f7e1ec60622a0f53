"""The detector interface and the bundled DetNet: candidates, NMS, decoding, weights and held-out AP."""

from __future__ import annotations

import json
import math

import pytest
import torch

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline
from physattack.eot.frames import FrameGrid
from physattack.render import Renderer
from physattack.victims import DetNet, VictimError, load_detnet
from physattack.victims.detection import (best_scores_on_boxes, nms_detections, pad_candidates, resize_square,
                                          scale_boxes)
from physattack.victims.detnet import STRIDE, default_detnet_weights


@pytest.fixture(scope="module")
def detnet():
    return load_detnet()


def test_padding_keeps_the_graph_and_marks_padding():
    s1 = torch.rand(3, 4, requires_grad=True)
    boxes, scores, valid = pad_candidates([torch.rand(3, 4), torch.rand(1, 4)], [s1, torch.rand(1, 4)])
    assert boxes.shape == (2, 3, 4) and scores.shape == (2, 3, 4)
    assert valid.tolist() == [[True] * 3, [True, False, False]]
    scores.sum().backward()
    assert torch.equal(s1.grad, torch.ones(3, 4))


def test_nms_keeps_the_best_of_overlapping_boxes_per_class():
    boxes = torch.tensor([[[0, 0, 10, 10], [1, 1, 11, 11], [0, 0, 10, 10], [50, 50, 60, 60]]], dtype=torch.float32)
    scores = torch.tensor([[[0.0, 0.9, 0.1], [0.0, 0.8, 0.0], [0.0, 0.1, 0.7], [0.9, 0.0, 0.0]]])
    det = nms_detections(boxes, scores, min_score=0.05, iou=0.5, skip_labels=(0,))[0]
    # the two class-1 boxes overlap (IoU 0.68): one is left; class 2 keeps its own box; column 0 never wins
    assert sorted(zip(det.labels.tolist(), det.scores.tolist())) == [(1, pytest.approx(0.9)), (2, pytest.approx(0.7))]
    assert len(det.above(0.8)) == 1
    assert det.above(0.8).named(("bg", "stop", "yield")) == [("stop", pytest.approx(0.9), [0.0, 0.0, 10.0, 10.0])]


def test_boxes_scale_back_to_the_input_image():
    assert scale_boxes(torch.tensor([[16.0, 32.0, 80.0, 160.0]]), (160, 160), (80, 40)).tolist() == \
        [[4.0, 16.0, 20.0, 80.0]]
    assert resize_square(torch.rand(1, 3, 50, 70), 32).shape == (1, 3, 32, 32)


def test_detnet_decodes_a_heatmap_peak_into_its_box():
    net = DetNet(["stop", "yield"], input_size=64).freeze()
    g = 64 // STRIDE
    heat = torch.full((1, 2, g, g), -10.0)
    heat[0, 1, 5, 3] = 4.0                       # yield centred in cell (x=3, y=5)
    log_size = torch.full((1, 2, g, g), math.log(4.0))
    offset = torch.full((1, 2, g, g), 0.5)
    boxes, scores = net.decode(heat, log_size, offset)
    i = 5 * g + 3
    assert boxes[0, i].tolist() == pytest.approx([6.0, 14.0, 22.0, 30.0])   # centre (14, 22), 16 px square
    assert scores.shape == (1, g * g, 2) and scores[0, i, 1] > 0.98 and scores[0, i, 0] < 1e-4


def test_bundled_weights_record_their_heldout_ap():
    meta = json.loads(default_detnet_weights().with_suffix(".json").read_text())
    assert meta["heldout_ap50"]["stop"] >= 0.90
    assert meta["heldout_frames"] >= 500 and meta["heldout_signs"] >= 500
    assert set(meta["heldout_ap50"]) == set(meta["labels"]) and len(meta["labels"]) == 9
    assert default_detnet_weights().stat().st_size < 5 * 2**20


def test_bundled_detector_finds_clean_stop_signs_in_heldout_frames(detnet, stop_scene):
    grid = FrameGrid(EvalGrid(azimuth_deg=[-37.5, -7.5, 22.5], distance_m=[4.0, 11.0, 22.0],
                              lighting=["noon", "low_sun"], background_count=24))
    pipe = ViewPipeline(Renderer(), BackgroundBank(24, seed=1000), (detnet.input_size,) * 2)
    with torch.no_grad():
        views = pipe(stop_scene, stop_scene.texture, grid.params())
        out = detnet(views.images)
    scores = best_scores_on_boxes(out.detections, views.boxes, detnet.label_index("stop"))
    assert float((scores >= detnet.score_threshold).float().mean()) >= 0.85, scores


def test_detnet_is_frozen_deterministic_and_names_its_labels(detnet):
    assert not detnet.training and all(not p.requires_grad for p in detnet.parameters())
    x = torch.rand(2, 3, 96, 96)
    with torch.no_grad():
        a, b = detnet(x), detnet(x)
    assert torch.equal(a.candidate_scores, b.candidate_scores)
    assert a.candidate_boxes.shape[:2] == a.candidate_scores.shape[:2] and a.candidate_scores.shape[2] == 9
    assert float(a.candidate_boxes.detach().abs().max()) < 96 * 8          # boxes in pixels of the 96-px input
    with pytest.raises(VictimError, match="no label 'banana'.*stop, yield"):
        detnet.label_index("banana")


def test_missing_detnet_weights_say_how_to_train_them(tmp_path):
    with pytest.raises(VictimError, match="python -m physattack.train detnet"):
        load_detnet(tmp_path / "none.safetensors")
