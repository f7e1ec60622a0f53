"""Box metrics against a small example worked out by hand, and the pictures with boxes drawn."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from physattack.evaluate.detection import detection_metrics, detections_gallery, draw_detections
from physattack.victims.detection import (Detections, average_precision, best_scores_on_boxes, class_ap,
                                          match_detections)

T = torch.tensor


def det(boxes, scores, labels) -> Detections:
    return Detections(T(boxes, dtype=torch.float32).view(-1, 4), T(scores, dtype=torch.float32), T(labels))


# Three images, one stop sign (class 1) each, boxes 10×10:
#   image 0: GT (0,0,10,10).  Detections: A stop 0.9 at (0,0,10,10)  IoU 1     -> TP
#                                          B stop 0.8 at (1,1,11,11)  IoU 81/119 -> duplicate: FP
#   image 1: GT (20,20,30,30). Detections: C stop 0.7 at (25,25,35,35) IoU 25/175 -> FP
#                                          D yield 0.95 at (20,20,30,30)          -> other class, ignored
#   image 2: GT (0,0,10,10).  Detections: E stop 0.6 at (0,0,10,9)    IoU 0.9    -> TP
# Stop detections by score: A TP, B FP, C FP, E TP -> precision 1, 1/2, 1/3, 1/2; recall 1/3, 1/3, 1/3, 2/3.
# Monotone precision from the right: 1, 1/2, 1/2, 1/2. AP = 1/3·1 + (2/3 − 1/3)·1/2 = 1/2.
GT_BOXES = [T([[0, 0, 10, 10]]), T([[20, 20, 30, 30]]), T([[0, 0, 10, 10]])]
GT_LABELS = [T([1]), T([1]), T([1])]
DETS = [det([[0, 0, 10, 10], [1, 1, 11, 11]], [0.9, 0.8], [1, 1]),
        det([[25, 25, 35, 35], [20, 20, 30, 30]], [0.7, 0.95], [1, 2]),
        det([[0, 0, 10, 9]], [0.6], [1])]


def test_matching_takes_each_ground_truth_once_in_score_order():
    d = DETS[0]
    assert match_detections(d.boxes, d.scores, d.labels, GT_BOXES[0], GT_LABELS[0]).tolist() == [True, False]
    d = DETS[1]    # the yield box sits exactly on the stop sign but is the wrong class
    assert match_detections(d.boxes, d.scores, d.labels, GT_BOXES[1], GT_LABELS[1]).tolist() == [False, False]
    # order of the input does not matter, scores do
    assert match_detections(d.boxes.flip(0), d.scores.flip(0), d.labels.flip(0), GT_BOXES[1],
                            GT_LABELS[1]).tolist() == [False, False]


def test_ap_matches_the_hand_computed_example():
    assert class_ap(DETS, GT_BOXES, GT_LABELS, label=1) == pytest.approx(0.5)
    assert class_ap(DETS, GT_BOXES, GT_LABELS, label=2) != class_ap(DETS, GT_BOXES, GT_LABELS, label=2)  # nan: no GT
    assert average_precision(T([0.9, 0.5]), T([True, True]), 2) == pytest.approx(1.0)
    assert average_precision(T([0.9, 0.5]), T([False, True]), 2) == pytest.approx(0.25)  # 1/2 recall at precision 1/2
    assert average_precision(torch.zeros(0), torch.zeros(0, dtype=torch.bool), 3) == 0.0
    assert math.isnan(average_precision(T([0.3]), T([False]), 0))


def test_best_scores_on_the_sign_box():
    gt = torch.stack([g[0] for g in GT_BOXES]).float()
    assert best_scores_on_boxes(DETS, gt, label=1).tolist() == pytest.approx([0.9, 0.0, 0.6])
    assert best_scores_on_boxes(DETS, gt).tolist() == pytest.approx([0.9, 0.95, 0.6])       # any class
    assert best_scores_on_boxes(DETS, gt, exclude=1).tolist() == pytest.approx([0.0, 0.95, 0.0])
    assert best_scores_on_boxes(DETS, torch.zeros(3, 4)).tolist() == [0.0, 0.0, 0.0]          # sign not in view


def test_rates_count_only_clean_detected_views():
    # four views at threshold 0.5: clean true-class scores, attacked true/target/any-class scores
    clean = T([0.9, 0.8, 0.3, 0.7])          # view 2 not detected clean: left out of the conditional rates
    adv = T([0.6, 0.1, 0.1, 0.2])            # views 1 and 3 disappear
    target = T([0.0, 0.7, 0.9, 0.1])         # view 1 is mislabelled; view 2 does not count (not clean-detected)
    any_class = T([0.6, 0.7, 0.9, 0.2])      # only view 3 vanishes altogether
    m = detection_metrics(clean, adv, target, any_class, 0.5, clean_ap=0.75, adv_ap=0.25)
    assert m["detection_rate_clean"]["rate"] == pytest.approx(3 / 4)
    assert m["detection_rate_attacked"]["rate"] == pytest.approx(1 / 4)
    assert (m["disappearance_rate"]["count"], m["disappearance_rate"]["n"]) == (2, 3)
    assert (m["mislabel_rate"]["count"], m["mislabel_rate"]["n"]) == (1, 3)
    assert (m["vanish_rate"]["count"], m["vanish_rate"]["n"]) == (1, 3)
    lo, hi = m["disappearance_rate"]["ci95"]
    assert lo < 2 / 3 < hi
    assert "mislabel_rate" not in detection_metrics(clean, adv, None, any_class, 0.5, 0.75, 0.25)


def test_boxes_are_drawn_with_opencv():
    img = torch.full((3, 40, 40), 0.5)
    d = det([[5, 5, 30, 30], [0, 0, 4, 4]], [0.9, 0.2], [1, 2])
    out = draw_detections(img, d, ("bg", "stop", "yield"), 0.5, gt_box=T([4.0, 4, 31, 31]), highlight=1)
    assert out.shape == (80, 80, 3) and out.dtype == np.uint8
    assert (out[10, 10:60] != 127).any(), "the detection box was not drawn"
    green = (out[..., 1] > 200) & (out[..., 0] < 100)
    assert green.any(), "the true-class box is green"
    gallery = detections_gallery((img[None].repeat(2, 1, 1, 1), img[None].repeat(2, 1, 1, 1)), ([d, d], [d, d]),
                                 T([[4.0, 4, 31, 31]] * 2), ("bg", "stop", "yield"), 0.5, 1, columns=2)
    assert gallery.shape[0] == 2 * 80 + 4 and gallery.shape[1] == 2 * (80 + 4)


def test_the_headline_names_the_detector_its_rates_belong_to():
    from physattack.evaluate.detection import headline

    rate = {"rate": 0.5, "ci95": [0.3, 0.7], "count": 1, "n": 2}
    metrics = {"attack": "hide", "true_label": "stop", "detection_rate_clean": rate, "detection_rate_attacked": rate,
               "attack_success_rate": rate, "score_threshold": 0.3, "ap50_clean": 1.0, "ap50_attacked": 0.5,
               "patch_area_fraction": 0.19}
    line = headline({**metrics, "victim_names": ["detnet"]})
    assert line.startswith("hide on detnet, fitted to it: held-out stop")
    assert "no held-out detector scored, so this is a white-box figure only" in line
    assert headline(metrics).startswith("hide: held-out stop")


def test_the_headline_says_what_the_patch_was_and_was_not_fitted_to():
    """A detector pool's headline names every attacked detector with its own attacked detection rate,
    whose rates the line quotes, and how the held-out detectors read the patch."""
    from physattack.evaluate.detection import headline

    def r(rate):
        return {"rate": rate, "ci95": [0.0, 1.0], "count": 0, "n": 120}

    def row(role, attacked):
        return {"role": role, "detection_rate_clean": r(1.0), "detection_rate_attacked": r(attacked)}

    table = {"members": {"detnet": row("attacked", 0.0), "det_fcos": row("attacked", 0.225),
                         "det_retinanet": row("held-out", 0.292)},
             "held_out_mean": {"victims": ["det_retinanet"], "detection_rate_clean": 0.983,
                               "detection_rate_attacked": 0.292}}
    metrics = {"attack": "hide", "true_label": "stop", "detection_rate_clean": r(1.0),
               "detection_rate_attacked": r(0.0), "attack_success_rate": r(1.0), "score_threshold": 0.3, "ap50_clean": 1.0, "ap50_attacked": 0.0,
               "patch_area_fraction": 0.19, "victim_names": ["detnet", "det_fcos"], "heldout": {"detectors": table}}
    line = headline(metrics)
    assert line.startswith("hide, fitted to detnet+det_fcos (attacked detection 0.0/22.5%; the rates that follow "
                           "are detnet's, the first;"), line
    assert "not fitted to: 1 held-out detector (det_retinanet) detects it 98.3% clean -> 29.2% attacked" in line
