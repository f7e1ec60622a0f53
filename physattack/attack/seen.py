"""The stack detector's term of a classifier's approach windows (``eot.sampler.seen``; what it is for, and the rows
it reads: ``physattack.drive.seen``): the detector's reading of the whole sign on those rows, kept by a hinge."""

from __future__ import annotations

import torch
from torch import Tensor

from physattack.attack.detection_objectives import hidden, sign_reading
from physattack.drive.seen import SeenSettings


class SeenTerm:
    """The term itself: ``(scene, texture, rows) -> (loss, share of rows the detector reads)``.

    Args:
        settings: ``SeenSettings``.
        detector: the stack's detector (a ``Detector``; frozen, its gradient to the images used).
        pipeline: renders the rows at the detector's input size (a ``ViewPipeline``, or the photographed one).
        label: the detector's label of the sign.
    """

    def __init__(self, settings: SeenSettings, detector, pipeline, label: int):
        self.settings, self.detector, self.pipeline, self.label = settings, detector, pipeline, int(label)

    def __call__(self, scene, texture: Tensor, rows) -> tuple[Tensor, float]:
        views = self.pipeline(scene, texture, rows)
        output = self.detector(views.images)
        reading = sign_reading(output, self.label, views)
        target = torch.tensor(self.settings.reading, device=reading.device).log()
        loss = (target - reading.clamp(min=1e-6).log()).clamp(min=0).mean()
        with torch.no_grad():
            seen = float((~hidden(output, self.label, views)).float().mean())
        return self.settings.weight * loss, seen


__all__ = ["SeenSettings", "SeenTerm"]
