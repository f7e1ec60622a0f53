"""Detector objectives: ``loss(output, label, views) -> loss per view`` and ``success(...) -> bool per view``
for a ``DetectorOutput`` and the rendered views (whose ``boxes`` are the sign's ground truth).

Losses act on the **candidates before NMS** on the sign (IoU ≥ ``min_iou`` with its box, or centred
inside it), so every box that could survive NMS onto the sign is pushed, not only the one that did. Each loss
averages the ``k`` worst candidates of a view: the top one decides the detection, and its neighbours
are next in line once it falls. Scores enter through log-likelihoods, so a confident candidate
(score near 1) still gets a full gradient.

- ``hide`` (vanishing): the sign's class score of every overlapping candidate below threshold.
- ``mislabel``: the target class above every other class on the sign's candidates, so that the
  boxes on the sign take the target's name.
- ``untargeted``: the sign's true class gone from its boxes, whether they vanish or read as any
  other class.
"""

from __future__ import annotations

import torch
from torch import Tensor

from physattack.errors import InputError
from physattack.victims.detection import DetectorOutput, best_scores_on_boxes


def candidate_iou(boxes: Tensor, gt: Tensor) -> Tensor:
    """IoU of each candidate B×N×4 with its view's box B×4 -> B×N (0 where the box is empty)."""
    gt = gt[:, None, :].to(boxes)
    lt = torch.maximum(boxes[..., :2], gt[..., :2])
    rb = torch.minimum(boxes[..., 2:], gt[..., 2:])
    inter = (rb - lt).clamp(min=0).prod(-1)
    area = lambda b: (b[..., 2:] - b[..., :2]).clamp(min=0).prod(-1)  # noqa: E731
    union = area(boxes) + area(gt) - inter
    return torch.where(union > 0, inter / union.clamp(min=1e-9), torch.zeros_like(inter))


def on_sign(output: DetectorOutput, views, min_iou: float) -> Tensor:
    """B×N: the valid candidates on the sign — overlapping its box by at least ``min_iou``, or centred
    inside it (a candidate there is one box-regression step away from a detection)."""
    with torch.no_grad():
        boxes, gt = output.candidate_boxes.detach(), views.boxes[:, None, :].to(output.candidate_boxes)
        centre = (boxes[..., :2] + boxes[..., 2:]) / 2
        inside = ((centre >= gt[..., :2]) & (centre <= gt[..., 2:])).all(-1) & (gt[..., 2:] > gt[..., :2]).all(-1)
        return output.candidate_valid & ((candidate_iou(boxes, views.boxes) >= min_iou) | inside)


def topk_mean(values: Tensor, mask: Tensor, k: int) -> Tensor:
    """Mean of the ``k`` largest of ``values`` (B×N) where ``mask``; 0 for a view with none."""
    masked = torch.where(mask, values, torch.full_like(values, float("-inf")))
    k = min(k, values.shape[1])
    top = masked.topk(k, dim=1).values
    ok = torch.isfinite(top)
    return torch.where(ok, top, torch.zeros_like(top)).sum(1) / ok.sum(1).clamp(min=1)


def _nll_absent(p: Tensor) -> Tensor:
    return -torch.log1p(-p.clamp(max=1 - 1e-6))


def hide(output: DetectorOutput, label: int, views, min_iou: float = 0.3, k: int = 3) -> Tensor:
    """Vanishing: −log(1 − p) of the sign's class on the overlapping candidates (the ``k`` highest)."""
    return topk_mean(_nll_absent(output.candidate_scores[..., label]), on_sign(output, views, min_iou), k)


def mislabel(output: DetectorOutput, target: int, views, min_iou: float = 0.5, k: int = 3) -> Tensor:
    """The sign's boxes read as ``target``: −log p(target) on the overlapping candidates where it is
    highest, plus −log(1 − p) of the strongest other class on those where that one is highest."""
    scores = output.candidate_scores
    mask = on_sign(output, views, min_iou)
    others = scores.clone()
    others[..., target] = 0
    toward = -torch.log(scores[..., target].clamp(min=1e-6))
    away = _nll_absent(others.amax(-1))
    # rank candidates by how close they are to counting as the target (lowest −log p first)
    return -topk_mean(-toward, mask, k) + topk_mean(away, mask, k)


def untargeted(output: DetectorOutput, true_label: int, views, min_iou: float = 0.3, k: int = 3,
               margin: float = 3.0) -> Tensor:
    """The true class leaves the sign's boxes: ``hide`` plus a floored log-margin of the true class
    over the best other class (nothing at all counts as another class)."""
    scores = output.candidate_scores
    mask = on_sign(output, views, min_iou)
    others = scores.clone()
    others[..., true_label] = 0
    log_margin = (torch.log(scores[..., true_label].clamp(min=1e-6)) - torch.log(others.amax(-1).clamp(min=1e-6)))
    return hide(output, true_label, views, min_iou, k) + 0.5 * topk_mean(log_margin.clamp(min=-margin), mask, k)


def sign_reading(output: DetectorOutput, label: int, views, min_iou: float = 0.3,
                 threshold_scale: float = 1.0) -> Tensor:
    """B in (0, 1): how surely each view's detector reads the sign, for objectives over drives: the odds of its
    best candidate of ``label`` on the sign (``on_sign``) over the operating threshold's odds, as a probability
    (½ at the threshold; a view with no candidate on the sign reads ~0). ``threshold_scale`` < 1 reads against a
    stricter threshold (the operating one times it): a score just under the real threshold still reads ½ or more."""
    best = topk_mean(output.candidate_scores[..., label], on_sign(output, views, min_iou), 1)
    return odds_over(best, output.score_threshold * threshold_scale)


def odds_over(scores: Tensor, threshold: float) -> Tensor:
    """Scores' odds over a threshold's, as a probability: ½ at the threshold, toward 1 above it and 0 below."""
    s = scores.clamp(1e-6, 1 - 1e-6)
    return s * (1 - threshold) / (s * (1 - threshold) + (1 - s) * threshold)


def hidden(output: DetectorOutput, label: int, views) -> Tensor:
    """B bools: no detection of ``label`` with IoU ≥ 0.5 on the sign scores the threshold."""
    return best_scores_on_boxes(output.detections, views.boxes, label) < output.score_threshold


def mislabelled(output: DetectorOutput, target: int, views) -> Tensor:
    """B bools: the sign's box is detected as ``target`` and as no other class."""
    t = output.score_threshold
    as_target = best_scores_on_boxes(output.detections, views.boxes, target) >= t
    as_other = best_scores_on_boxes(output.detections, views.boxes, exclude=target) >= t
    return as_target & ~as_other


# -- what a frame of an approach window reads (physattack.drive.approach) -------------------------------------
def sign_labels(victim, scene) -> tuple[int, ...]:
    """The victim's labels that read as the scene's class (a classifier's label set; a detector's class)."""
    if getattr(victim, "is_detector", False):
        return (victim.label_index(scene.class_name),)
    return tuple(victim.label_set(scene.class_name))


def check_threshold_scale(threshold_scale: float, is_detector: bool) -> None:
    """Refuse a stricter reading threshold (``eot.sampler.decision.threshold_scale``) for a classifier: it reads the
    sign by its top label and has no score threshold to scale."""
    if threshold_scale != 1.0 and not is_detector:
        raise InputError(f"eot.sampler.decision.threshold_scale={threshold_scale:g} applies to a detector's score "
                         "threshold (attack=hide); a classifier reads the sign by its top label: leave it at 1.")


def sign_probability(output, signs: tuple[int, ...], views, threshold_scale: float = 1.0) -> Tensor:
    """B: how surely each view reads the sign: a classifier's probability of its labels, a detector's odds
    over its threshold (``sign_reading``; ``threshold_scale`` times it)."""
    if isinstance(output, DetectorOutput):
        return sign_reading(output, signs[0], views, threshold_scale=threshold_scale)
    check_threshold_scale(threshold_scale, is_detector=False)
    return torch.softmax(output.float(), -1)[:, list(signs)].sum(-1)


def reads_sign(output, signs: tuple[int, ...], views) -> Tensor:
    """B bool: the view reads as the sign (a classifier's top label among ``signs``; a detector's box on it)."""
    if isinstance(output, DetectorOutput):
        return ~hidden(output, signs[0], views)
    return torch.isin(output.argmax(-1), torch.tensor(list(signs), device=output.device))
