"""Detector objectives: hand-made candidates, the hide attack on the bundled detector, clear errors."""

from __future__ import annotations

import pytest
import torch

from physattack.attack import AttackError, AttackSetup, EOTAttack
from physattack.config import RunConfig
from physattack.attack.detection_objectives import (candidate_iou, hidden, hide, mislabel, mislabelled, on_sign,
                                                    topk_mean, untargeted)
from physattack.attack.objectives import DETECTOR_OBJECTIVES, OBJECTIVES
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.eot.frames import FrameSampler
from physattack.patch import sticker_for_scene
from physattack.printing import load_palette
from physattack.render import Renderer
from physattack.victims import VictimError
from physattack.victims.detection import Detections, DetectorOutput

T = torch.tensor


class Views:
    def __init__(self, boxes):
        self.boxes = torch.as_tensor(boxes, dtype=torch.float32)


def output(scores, boxes, dets=None, threshold=0.5):
    scores = torch.as_tensor(scores, dtype=torch.float32)
    boxes = torch.as_tensor(boxes, dtype=torch.float32)
    valid = torch.ones(scores.shape[:2], dtype=torch.bool)
    dets = dets or [Detections(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.long))] * len(scores)
    return DetectorOutput(boxes, scores, valid, dets, threshold)


# one view, sign box (10,10,30,30); candidates: on the sign, shifted but centred on it, far away
BOXES = [[[10, 10, 30, 30], [14, 14, 34, 34], [60, 60, 80, 80]]]
SIGN = Views([[10, 10, 30, 30]])


def test_candidates_on_the_sign_are_the_ones_pushed():
    assert candidate_iou(T(BOXES, dtype=torch.float32), SIGN.boxes)[0].tolist() == pytest.approx([1.0, 256 / 544, 0.0])
    assert on_sign(output(torch.rand(1, 3, 2), BOXES), SIGN, 0.3)[0].tolist() == [True, True, False]
    far_only = output([[[0.1, 0.0], [0.1, 0.0], [0.99, 0.0]]], BOXES)
    near = output([[[0.1, 0.9], [0.1, 0.0], [0.0, 0.0]]], BOXES)
    assert hide(far_only, 1, SIGN).item() == pytest.approx(0.0, abs=1e-6)   # a box elsewhere is not the sign
    assert hide(near, 1, SIGN).item() > 0.5
    assert topk_mean(T([[1.0, 5.0, 3.0]]), T([[True, False, True]]), 2).item() == pytest.approx(2.0)
    assert topk_mean(T([[1.0]]), T([[False]]), 3).item() == 0.0


def test_hide_gradient_lowers_the_sign_score():
    logits = torch.zeros(1, 3, 2, requires_grad=True)
    out = output(torch.sigmoid(logits), BOXES)
    hide(out, 1, SIGN).sum().backward()
    assert (logits.grad[0, :2, 1] > 0).all()                                   # the two on the sign, stop class
    assert logits.grad[0, 2].abs().sum() == 0 and logits.grad[..., 0].abs().sum() == 0   # not elsewhere, not others


def test_mislabel_and_untargeted_point_the_right_way():
    sign_as_stop = output([[[0.1, 0.9, 0.05], [0.1, 0.6, 0.1], [0.0, 0.0, 0.0]]], BOXES)
    sign_as_yield = output([[[0.1, 0.05, 0.9], [0.1, 0.1, 0.6], [0.0, 0.0, 0.0]]], BOXES)
    assert mislabel(sign_as_yield, 2, SIGN) < mislabel(sign_as_stop, 2, SIGN)
    assert untargeted(sign_as_yield, 1, SIGN) < untargeted(sign_as_stop, 1, SIGN)


def test_success_reads_the_detections_after_nms():
    def one(box, score, label):
        return [Detections(T([box], dtype=torch.float32), T([score]), T([label]))]
    on = output(torch.zeros(1, 3, 3), BOXES, one([11, 11, 30, 30], 0.8, 1))
    below = output(torch.zeros(1, 3, 3), BOXES, one([11, 11, 30, 30], 0.3, 1))
    elsewhere = output(torch.zeros(1, 3, 3), BOXES, one([60, 60, 80, 80], 0.9, 1))
    as_yield = output(torch.zeros(1, 3, 3), BOXES, one([11, 11, 30, 30], 0.8, 2))
    assert hidden(on, 1, SIGN).tolist() == [False]
    assert hidden(below, 1, SIGN).tolist() == [True] and hidden(elsewhere, 1, SIGN).tolist() == [True]
    assert mislabelled(as_yield, 2, SIGN).tolist() == [True] and mislabelled(on, 2, SIGN).tolist() == [False]


def test_objectives_are_registered_and_classifiers_refuse_detector_ones(stop_scene, signnet):
    assert {"hide", "mislabel"} <= set(OBJECTIVES)
    assert not OBJECTIVES["hide"].targeted and OBJECTIVES["mislabel"].targeted
    assert DETECTOR_OBJECTIVES["targeted"] is OBJECTIVES["mislabel"]
    with pytest.raises(AttackError, match="needs a detector victim"):
        EOTAttack(objective="hide", target=None).label(signnet, stop_scene)


def test_unknown_target_label_names_the_detectors_labels(stop_scene):
    from physattack.victims.torchvision_detection import load_torchvision_detector
    coco = load_torchvision_detector("ssdlite320_mobilenet_v3_large", random_init=True)
    assert coco.label_index(stop_scene.class_name) == 13          # scene "stop" is COCO's "stop sign"
    with pytest.raises(VictimError) as err:
        EOTAttack(objective="targeted", target="yield").label(coco, stop_scene)
    msg = str(err.value)
    assert "'yield'" in msg and "stop sign" in msg and "traffic light" in msg and "N/A" not in msg
    assert msg.count(".") == 1 and "\n" not in msg


@pytest.fixture(scope="module")
def detnet():
    from physattack.victims import load_detnet
    return load_detnet()


def stop_scores(detnet, scene, patch, params, pipe):
    """Mean over views of the highest pre-NMS stop-sign score among candidates on the sign."""
    with torch.no_grad():
        views = pipe(scene, patch.apply(scene.texture), params)
        out = detnet(views.images)
        s = out.candidate_scores[..., detnet.label_index("stop")]
        mask = on_sign(out, views, 0.3)
        return float(torch.where(mask, s, torch.zeros_like(s)).amax(1).mean())


def test_hide_lowers_prenms_stop_scores_on_the_bundled_detector(detnet, stop_scene, tmp_path):
    pipe = ViewPipeline(Renderer(), BackgroundBank(8, seed=0), (detnet.input_size,) * 2)
    sampler = FrameSampler(ViewSampler(background_count=8, jpeg_share=0.0, distance_m=(4.0, 12.0)))
    held = FrameSampler(ViewSampler(background_count=8, jpeg_share=0.0, distance_m=(4.0, 12.0)))
    params = held.sample(12, torch.Generator().manual_seed(123))
    patch = sticker_for_scene(stop_scene, shape="bars", area=0.18)
    before = stop_scores(detnet, stop_scene, patch, params, pipe)
    attack = EOTAttack(objective="hide", target=None, steps=6, batch_size=6, lr=0.3, mask_search_steps=0,
                       checkpoint_every=0)
    setup = AttackSetup(scene=stop_scene, patch=patch, victim=detnet, pipeline=pipe, sampler=sampler,
                        palette=load_palette())
    result = attack.run(setup, RunConfig(seed=0, progress=False), tmp_path)
    assert result.steps_done == 6 and result.zero_grad_steps == 0
    losses = [h["adv_loss"] for h in result.history]
    after = stop_scores(detnet, stop_scene, patch, params, pipe)
    assert before > 0.3, before                         # the clean sign is seen...
    assert after < before - 0.1, (before, after)        # ...and a few steps of hide push its scores down
    assert losses[-1] < losses[0]
