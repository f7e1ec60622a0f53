"""A car's two-stage stack as one model: a detector proposes boxes, a classifier labels a square crop around each.

The drive judge (``physattack.drive.stacks.TwoStageStack``) reads drives through such a stack, with the red team's
patch fitted to its parts. A red team that can only *run* the car's perception (on a bench, in a simulator, on a
closed track) sees the stack as one box: frames in, what it read out. ``StackVictim`` is that box: for B frames it
answers, per box the detector makes at its operating threshold, one detection per class the classifier gives at
least ``min_score`` of its probability (box: the detector's; label and score: the classifier's). With a
``physattack.victims.query.QueryVictim`` around it, ``answers=scores`` returns those, ``answers=labels`` only the
label the classifier gives at least half its probability (``score_threshold`` 0.5), every score 1; a query attack
with ``attack=hide`` then makes the stack stop reading the sign as a stop sign, which is what running it takes.

The stack answers through queries only: asked about images that carry a gradient it refuses in one sentence (its
crops follow the detector's boxes, which no gradient goes through).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.ops import roi_align

from physattack.victims.base import VictimError
from physattack.victims.detection import Detections, Detector, DetectorOutput


def square_crops(images: Tensor, boxes: Tensor, crop_frame: float, crop_px: int,
                 origin: tuple[float, float] = (0.0, 0.0)) -> Tensor:
    """B square crops (B×3×crop_px×crop_px) of ``images`` (B×3×H×W, row i cut from image i) centred on each box
    (B×4 pixels; ``origin``: the images' top-left corner in the boxes' coordinates), the box's longer side
    ``crop_frame`` of the crop's: the framing a two-stage stack gives its classifier."""
    c = (boxes[:, :2] + boxes[:, 2:]) / 2 - torch.tensor(origin, dtype=boxes.dtype, device=boxes.device)
    half = (boxes[:, 2:] - boxes[:, :2]).amax(1, keepdim=True) / crop_frame / 2
    rois = torch.cat([torch.arange(len(boxes), dtype=boxes.dtype, device=boxes.device)[:, None], c - half, c + half], 1)
    return roi_align(images, rois.to(images.dtype), crop_px, 1.0, sampling_ratio=2, aligned=True)


class StackVictim(Detector):
    """``detector`` -> square crop around each box it makes -> ``classifier``, as one detector-like model.

    Args:
        detector: a ``physattack.victims.detection.Detector``.
        classifier: a classifier victim (B×3×S×S in [0, 1] -> logits, with ``labels``).
        crop_frame: the box's longer side as a share of the crop's (the classifier's training framing).
        crop_px: the crops' side in pixels (the classifier resizes as it always does).
        min_score: the least probability a class needs to be answered for a box.
        name: what reports call it; default ``stack_<detector_name>_<classifier_name>`` (so a config whose parts
            are swapped on the command line is never reported under another pair's name).
        detector_name, classifier_name: what reports call the two parts (the drives' stack, the detectors table).
    """

    is_stack = True
    score_threshold = 0.5

    def __init__(self, detector, classifier, crop_frame: float = 0.62, crop_px: int = 96, min_score: float = 0.01,
                 name: str | None = None, detector_name: str = "detector", classifier_name: str = "classifier"):
        super().__init__()
        if not getattr(detector, "is_detector", False):
            raise VictimError("victim.detector must be a detector (e.g. {_target_: physattack.victims.load_detnet}).")
        if getattr(classifier, "is_detector", False) or getattr(classifier, "members", None) is not None:
            raise VictimError("victim.classifier must be one classifier (e.g. a zoo member), not a detector or an "
                              "ensemble.")
        self.detector, self.classifier = detector, classifier
        self.crop_frame = VictimError.check_range("victim.crop_frame", crop_frame, 0.0, 1.0, lo_open=True,
                                                  why="the box's share of the classifier's crop")
        self.crop_px = VictimError.check_range("victim.crop_px", crop_px, 8, integer=True, why="the crops' side")
        self.min_score = VictimError.check_range("victim.min_score", min_score, 0.0, 0.5, lo_open=True)
        self.labels = tuple(classifier.labels)
        self.input_size = int(getattr(detector, "input_size", 160))
        self.detector_name, self.classifier_name = detector_name, classifier_name
        self.display_name = name or f"stack_{detector_name}_{classifier_name}"

    def label_index(self, name: str) -> int:
        return self.classifier.label_index(name)

    def label_set(self, name: str) -> tuple[int, ...]:
        return self.classifier.label_set(name)

    @torch.no_grad()
    def detect(self, images: Tensor) -> DetectorOutput:
        if images.requires_grad:
            raise VictimError(f"The stack {self.display_name} answers through queries only (attack.method=query): its "
                              "crops follow the detector's boxes, which no gradient goes through.")
        found = [d.above(self.detector.score_threshold) for d in self.detector(images).detections]
        counts = [len(d) for d in found]
        out = [Detections.empty() for _ in found]
        if sum(counts):
            rows = torch.cat([torch.full((n,), i, dtype=torch.long) for i, n in enumerate(counts)])
            boxes = torch.cat([d.boxes for d in found]).float()
            crops = square_crops(images[rows.to(images.device)], boxes.to(images.device), self.crop_frame,
                                 self.crop_px)
            probs = torch.softmax(self.classifier(crops).float(), -1).cpu()
            for i in range(len(found)):
                mine = rows == i
                p, b = probs[mine], boxes[mine].cpu()
                keep = torch.nonzero(p >= self.min_score)              # (box, class) pairs
                out[i] = Detections(b[keep[:, 0]], p[keep[:, 0], keep[:, 1]], keep[:, 1])
        k = len(self.labels)
        empty = images.new_zeros(len(found), 0)
        return DetectorOutput(empty[..., None].expand(-1, -1, 4), empty[..., None].expand(-1, -1, k),
                              empty.bool(), out, self.score_threshold)


def load_stack(detector, classifier, crop_frame: float = 0.62, crop_px: int = 96, min_score: float = 0.01,
               name: str | None = None, detector_name: str = "detector", classifier_name: str = "classifier"
               ) -> StackVictim:
    """A ``StackVictim`` from built parts (Hydra instantiates ``detector`` and ``classifier`` first)."""
    return StackVictim(detector.eval(), classifier.eval(), crop_frame, crop_px, min_score, name, detector_name,
                       classifier_name)


__all__ = ["StackVictim", "load_stack", "square_crops"]
