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


def whole_reading(output, boxes: Tensor) -> Tensor:
    """B in (0, 1): the odds of the detector's best candidate that boxes the whole sign (IoU with its box ``boxes`` at
    least ``WHOLE_IOU``), of any of its classes, over its operating threshold's, as a probability (½ at the
    threshold). Any class: the two-stage stack crops every box on the sign whatever the detector calls it, and the
    classifiers are attacked to read it as the target, so a box that reads *yield* is as good as one that reads
    *stop* (asking for *stop* fights the classifiers' objective: on seed 3 of the red team's preset at weight 4 the
    members' per-view success fell to 30-96 %)."""
    iou = candidate_iou(output.candidate_boxes.detach(), boxes)
    whole = output.candidate_valid & (iou >= WHOLE_IOU)
    return odds_over(topk_mean(output.candidate_scores.amax(-1), whole, 1), output.score_threshold)


class SeenTerm:
    """The term itself: ``(scene, texture, rows) -> (loss, share of the drawn frames the detector reads)``: the
    hinge on each drawn frame's best reading over its tiles (``SeenRows``), averaged over the frames.

    Args:
        settings: ``SeenSettings``.
        detector: the stack's detector (a ``Detector``; frozen, its gradient to the images used).
        pipeline: renders the rows at the detector's input size (a ``ViewPipeline``, or the photographed one).
    """

    def __init__(self, settings: SeenSettings, detector, pipeline):
        self.settings, self.detector, self.pipeline = settings, detector, pipeline

    def __call__(self, scene, texture: Tensor, rows: SeenRows) -> tuple[Tensor, float]:
        views = self.pipeline(scene, texture, rows.params)
        output = self.detector(views.images)
        _, frame = torch.unique(rows.frame.to(texture.device), return_inverse=True)     # the frames with a tile
        frames = int(frame.max()) + 1
        reading = whole_reading(output, views.boxes).clamp(min=1e-4)
        best = reading.new_zeros(frames).scatter_reduce(0, frame, reading, "amax", include_self=False)
        target = torch.tensor(self.settings.reading, device=best.device).log()
        loss = (target - best.clamp(min=1e-4).log()).clamp(min=0).mean()
        with torch.no_grad():
            found = (best_scores_on_boxes(output.detections, views.boxes, iou=WHOLE_IOU)
                     >= output.score_threshold).float().to(frame.device)
            seen = float(found.new_zeros(frames).scatter_reduce(0, frame, found, "amax", include_self=False).mean())
        return self.settings.weight * loss, seen


__all__ = ["WHOLE_IOU", "SeenRows", "SeenSettings", "SeenTerm", "whole_reading"]
