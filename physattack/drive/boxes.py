"""Joining one frame's boxes from a detector's overlapping search tiles (``StackSettings.merge``): non-maximum
suppression, or merging the boxes made into their union so that a tile's cut part of the sign joins the whole
sign's box (``physattack.drive.stacks.TiledDetector``)."""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.ops import batched_nms


def join_boxes(boxes: Tensor, scores: Tensor, labels: Tensor, merge: str, threshold: float
               ) -> tuple[Tensor, Tensor, Tensor]:
    """One frame's boxes from all its tiles, joined as ``StackSettings.merge`` says: ``nms`` suppresses at IoU 0.5;
    ``nmm`` merges the detections made (score >= ``threshold``, ``merge_boxes``) and suppresses the faint rest."""
    if merge == "nms":
        keep = batched_nms(boxes, scores, labels, 0.5)
        return boxes[keep], scores[keep], labels[keep]
    made = scores >= threshold
    faint = torch.nonzero(~made).flatten()
    faint = faint[batched_nms(boxes[faint], scores[faint], labels[faint], 0.5)]
    merged = merge_boxes(boxes[made], scores[made], labels[made])
    return tuple(torch.cat([m, x[faint]]) for m, x in zip(merged, (boxes, scores, labels)))


def merge_boxes(boxes: Tensor, scores: Tensor, labels: Tensor, ios: float = 0.5) -> tuple[Tensor, Tensor, Tensor]:
    """Greedy non-maximum merging (``StackSettings.merge='nmm'``): from the highest score down, each box not yet
    merged takes in every other such box of its label whose intersection with it is at least ``ios`` of the smaller
    one's area, and becomes their union with its own (the highest) score. Boxes N×4 (x0, y0, x1, y1), scores N,
    labels N; returns the merged boxes, scores and labels, highest score first. Written here (about fifteen lines)
    rather than installing ``sahi``, whose package would bring a second OpenCV build beside the project's."""
    order = scores.argsort(descending=True)
    b, s, lab = boxes[order].float(), scores[order], labels[order]
    area = (b[:, 2:] - b[:, :2]).clamp(min=0).prod(-1)
    lo, hi = torch.maximum(b[:, None, :2], b[None, :, :2]), torch.minimum(b[:, None, 2:], b[None, :, 2:])
    inter = (hi - lo).clamp(min=0).prod(-1)
    smaller = torch.minimum(area[:, None], area[None, :])
    joins = (inter >= ios * smaller) & (inter > 0) & (lab[:, None] == lab[None, :])
    free = torch.ones(len(b), dtype=torch.bool)
    kept = []
    for i in range(len(b)):
        if free[i]:
            group = joins[i] & free
            group[i] = True
            free &= ~group
            members = b[group]
            kept.append((torch.cat([members[:, :2].min(0).values, members[:, 2:].max(0).values]), i))
    if not kept:
        return boxes[:0], scores[:0], labels[:0]
    idx = torch.tensor([i for _, i in kept])
    return torch.stack([k for k, _ in kept]).to(boxes.dtype), s[idx], lab[idx]


__all__ = ["join_boxes", "merge_boxes"]
