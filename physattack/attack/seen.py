"""The stack detector's term of a classifier's approach windows (``eot.sampler.seen``; what it is for, and the rows
it reads: ``physattack.drive.seen``): the detector's reading of the whole sign on those rows, kept by a hinge."""

from __future__ import annotations

import torch
from torch import Tensor

from physattack.attack.detection_objectives import candidate_iou, odds_over, topk_mean
from physattack.drive.seen import SeenRows, SeenSettings
from physattack.victims.detection import best_scores_on_boxes


#: a candidate boxes the whole sign when its IoU with the sign's box is at least this (a part a tile's edge leaves,
#: which the stack also takes at its IoU of 0.3, frames a crop the classifiers were not attacked through)
WHOLE_IOU = 0.5


def whole_reading(output, boxes: Tensor, label: int | None = None) -> Tensor:
    """B in (0, 1): the odds of the detector's best candidate that boxes the whole sign (IoU with its box ``boxes`` at
    least ``WHOLE_IOU``), of any of its classes (or of class ``label`` alone), over its operating threshold's, as a
    probability (½ at the threshold). Any class: the two-stage stack crops every box on the sign whatever the
    detector calls it, and the classifiers are attacked to read it as the target, so a box that reads *yield* is as
    good as one that reads *stop* (asking for *stop* fights the classifiers' objective: on seed 3 of the red team's
    preset at weight 4 the members' per-view success fell to 30-96 %); ``label`` the target asks for the box the
    classifiers are attacked towards (``SeenSettings.label``)."""
    iou = candidate_iou(output.candidate_boxes.detach(), boxes)
    whole = output.candidate_valid & (iou >= WHOLE_IOU)
    scores = output.candidate_scores.amax(-1) if label is None else output.candidate_scores[..., label]
    return odds_over(topk_mean(scores, whole, 1), output.score_threshold)


class SeenTerm:
    """The term itself: ``(scene, texture, rows) -> (loss, share of the drawn frames the detector reads)``: the
    hinge on each drawn frame's best reading over its tiles (``SeenRows``), averaged over the frames.

    Args:
        settings: ``SeenSettings``.
        detector: the stack's detector (a ``Detector``; frozen, its gradient to the images used).
        pipeline: renders the rows at the detector's input size (a ``ViewPipeline``, or the photographed one).
        label: the detector's index of the class a box must read (``SeenSettings.label=target``: the attack's
            target), or None for any class.
    """

    def __init__(self, settings: SeenSettings, detector, pipeline, label: int | None = None):
        self.settings, self.detector, self.pipeline, self.label = settings, detector, pipeline, label

    @property
    def project(self) -> bool:
        """Whether the loop takes the term's gradient projected off the attack's (``SeenSettings.project``)."""
        return self.settings.project

    def read(self, scene, texture: Tensor, rows: SeenRows):
        """The rows rendered (``RenderedViews``) and what the detector says of them (``DetectorOutput``)."""
        views = self.pipeline(scene, texture, rows.params)
        return views, self.detector(views.images)

    def __call__(self, scene, texture: Tensor, rows: SeenRows) -> tuple[Tensor, float]:
        return self.score(*self.read(scene, texture, rows), rows)

    def score(self, views, output, rows: SeenRows) -> tuple[Tensor, float]:
        """The weighted hinge and the share of frames boxed whole, from ``read``'s views and detector output."""
        best = per_frame_max(whole_reading(output, views.boxes, self.label).clamp(min=1e-4), rows.frame)
        target = torch.tensor(self.settings.reading, device=best.device).log()
        loss = (target - best.log()).clamp(min=0).mean()
        return self.settings.weight * loss, boxed_whole(output, views.boxes, rows.frame, self.label)


def per_frame_max(values: Tensor, frame: Tensor) -> Tensor:
    """F: the largest of ``values`` (one per row) over each drawn frame's rows (``frame``: each row's frame; the
    frames that have rows, in order)."""
    _, index = torch.unique(frame.to(values.device), return_inverse=True)
    return values.new_zeros(int(index.max()) + 1).scatter_reduce(0, index, values, "amax", include_self=False)


@torch.no_grad()
def boxed_whole(output, boxes: Tensor, frame: Tensor, label: int | None = None) -> float:
    """The share of drawn frames whose best tile has a detection on the whole sign (IoU >= ``WHOLE_IOU`` with its
    box ``boxes``) at the detector's threshold: of any class, or of ``label``."""
    found = best_scores_on_boxes(output.detections, boxes, label, iou=WHOLE_IOU) >= output.score_threshold
    return float(per_frame_max(found.float(), frame).mean())


def add_projected(params: list[Tensor], side: tuple[Tensor | None, ...]) -> float:
    """Add the term's gradient ``side`` (one per parameter, None where it has none) to ``params``' gradients, less
    its component along them where the two point against each other (their dot product is negative), so the step
    does not undo the attack's descent to first order (``SeenSettings.project``). Returns the cosine of the two
    before the projection (0 where either is zero). Written here rather than taken from torchjd or LibMTL: their
    PCGrad projects both gradients symmetrically, and the attack's must keep priority (its gradient reaches the
    patch through an ensemble's image gradient, outside their backward)."""
    main = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    side = [g if g is not None else torch.zeros_like(p) for g, p in zip(side, params)]
    dot = sum((m * g).sum() for m, g in zip(main, side))
    main_sq, side_sq = sum((m * m).sum() for m in main), sum((g * g).sum() for g in side)
    if dot < 0 and main_sq > 0:
        side = [g - (dot / main_sq) * m for g, m in zip(side, main)]
    for p, m, g in zip(params, main, side):
        p.grad = m + g
    norm = float((main_sq * side_sq).sqrt())
    return float(dot) / norm if norm > 0 else 0.0


__all__ = ["WHOLE_IOU", "SeenRows", "SeenSettings", "SeenTerm", "add_projected", "boxed_whole", "per_frame_max",
           "whole_reading"]
