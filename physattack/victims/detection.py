"""One interface over detectors: a frozen model that maps B×3×H×W images in [0, 1] to detections.

A detector returns a ``DetectorOutput``: the **candidates** every detection is chosen from, before
non-maximum suppression (differentiable; what objectives attack), and the **detections** after it
(per image, boxes in pixels of the input image, scores, label indices; detached). Attacking only the
boxes that survive NMS is the classic way a detector attack silently does nothing: a box whose score
falls below the threshold leaves the output and takes its gradient with it, while its neighbours
are still there to be detected. Candidates keep every box the model scored.

Normalization, resizing and box rescaling belong to the adapter, so every caller hands it plain
rendered images and gets boxes in the pixels of those images.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torchvision.ops import batched_nms, box_iou

from physattack.victims.base import VictimError

#: Label names that are placeholders rather than classes (torchvision's COCO list has both).
PLACEHOLDER_LABELS = frozenset({"__background__", "N/A"})


@dataclass(frozen=True)
class Detections:
    """Detections in one image.

    Shape:
        boxes: N×4 (x0, y0, x1, y1) in pixels of the input image. scores: N in [0, 1].
        labels: N label indices into the detector's ``labels``.
    """

    boxes: Tensor
    scores: Tensor
    labels: Tensor

    def __len__(self) -> int:
        return self.scores.shape[0]

    @classmethod
    def empty(cls) -> Detections:
        """No detection."""
        return cls(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.long))

    def above(self, threshold: float) -> "Detections":
        keep = self.scores >= threshold
        return Detections(self.boxes[keep], self.scores[keep], self.labels[keep])

    def named(self, labels: tuple[str, ...]) -> list[tuple[str, float, list[float]]]:
        """(label name, score, box) per detection, with ``labels`` the detector's label names."""
        return [(labels[int(k)], float(s), b) for k, s, b in zip(self.labels, self.scores, self.boxes.tolist())]


@dataclass(frozen=True)
class DetectorOutput:
    """What a detector says about B images.

    Shape:
        candidate_boxes: B×N×4 in pixels of the input image (class-agnostic: a two-stage model's
            proposals, a single-stage model's decoded anchors or points).
        candidate_scores: B×N×K per-class scores in [0, 1] before NMS, K = ``len(labels)``;
            differentiable with respect to the input images.
        candidate_valid: B×N, False on padding (two-stage models have a different N per image).
        detections: B ``Detections`` after NMS, down to the model's own low candidate threshold.
        score_threshold: the operating threshold above which a detection counts as made.
    """

    candidate_boxes: Tensor
    candidate_scores: Tensor
    candidate_valid: Tensor
    detections: list[Detections]
    score_threshold: float

    def __len__(self) -> int:
        return len(self.detections)


class Detector(nn.Module):
    """A detector victim. Subclasses set ``labels`` and ``input_size`` and implement ``detect``.

    ``aliases`` maps a scene's class name to the detector's own label (``stop`` -> ``stop sign`` for
    COCO), so that one scene works with every victim.
    """

    is_detector = True
    labels: tuple[str, ...] = ()
    aliases: dict[str, str] = {}
    input_size: int = 320
    score_threshold: float = 0.5

    def label_index(self, name: str) -> int:
        """Index of the label called ``name`` (or its alias); a clear error listing the labels when unknown."""
        name = self.aliases.get(name, name)
        if name in self.labels and name not in PLACEHOLDER_LABELS:
            return self.labels.index(name)
        names = [lab for lab in self.labels if lab not in PLACEHOLDER_LABELS]
        raise VictimError(f"The victim has no label '{name}'; its labels are: {', '.join(names)}.")

    def detect(self, images: Tensor) -> DetectorOutput:
        raise NotImplementedError

    def forward(self, images: Tensor) -> DetectorOutput:
        return self.detect(images)

    def freeze(self) -> "Detector":
        """Eval mode, no parameter gradients: the victim is never trained by an attack."""
        self.eval()
        for p in self.parameters():
            p.requires_grad_(False)
        return self


def pad_candidates(boxes: list[Tensor], scores: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
    """Per-image candidates (N_i×4 boxes, N_i×K scores) to padded B×N×4, B×N×K and a B×N valid mask."""
    n = max(1, max(b.shape[0] for b in boxes))
    k = scores[0].shape[-1]
    valid = torch.zeros(len(boxes), n, dtype=torch.bool, device=boxes[0].device)
    for i, b in enumerate(boxes):
        valid[i, :b.shape[0]] = True
    # torch.cat/stack keep the graph to the input; no in-place writes into a preallocated tensor
    out_b = torch.stack([torch.cat([b, b.new_zeros(n - b.shape[0], 4)]) for b in boxes])
    out_s = torch.stack([torch.cat([s, s.new_zeros(n - s.shape[0], k)]) for s in scores])
    return out_b, out_s, valid


@torch.no_grad()
def nms_detections(boxes: Tensor, scores: Tensor, valid: Tensor | None = None, min_score: float = 0.05,
                   iou: float = 0.5, max_detections: int = 50, skip_labels: tuple[int, ...] = ()) -> list[Detections]:
    """Class-wise NMS over candidates: B×N×4 boxes, B×N×K scores -> B ``Detections``.

    Each candidate is kept under its best class (``skip_labels``, e.g. a background column, never win).
    """
    scores = scores.detach().clone()
    if skip_labels:
        scores[..., list(skip_labels)] = -1
    best, label = scores.max(-1)
    out = []
    for i in range(boxes.shape[0]):
        keep = best[i] >= min_score
        if valid is not None:
            keep &= valid[i]
        b, s, lab = boxes[i][keep].detach(), best[i][keep], label[i][keep]
        if s.numel() > 20 * max_detections:              # NMS cost grows with the square of the count
            top = s.topk(20 * max_detections).indices
            b, s, lab = b[top], s[top], lab[top]
        k = batched_nms(b, s, lab, iou)[:max_detections]
        out.append(Detections(b[k], s[k], lab[k]))
    return out


@torch.no_grad()
def best_scores_on_boxes(detections: list[Detections], boxes: Tensor, label: int | None = None,
                         exclude: int | None = None, iou: float = 0.5) -> Tensor:
    """B: per image, the highest score of a detection of class ``label`` (any class if None; never
    ``exclude``) whose IoU with that image's box (B×4) is at least ``iou``; 0 when there is none."""
    best = []
    for det, box in zip(detections, boxes):
        if len(det) == 0 or float((box[2:] - box[:2]).min()) <= 0:
            best.append(0.0)
            continue
        keep = box_iou(det.boxes.float(), box[None].float().to(det.boxes.device))[:, 0] >= iou
        if label is not None:
            keep &= det.labels == label
        if exclude is not None:
            keep &= det.labels != exclude
        best.append(float(det.scores[keep].max()) if keep.any() else 0.0)
    return torch.tensor(best)


def resize_square(images: Tensor, size: int) -> Tensor:
    """Resize B×3×H×W images to size×size (bilinear, antialiased when shrinking)."""
    if images.shape[-2:] == (size, size):
        return images
    return nn.functional.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False)


def scale_boxes(boxes: Tensor, from_hw: tuple[int, int], to_hw: tuple[int, int]) -> Tensor:
    """Boxes (…×4, x0 y0 x1 y1) in pixels of an image ``from_hw`` to pixels of an image ``to_hw``."""
    sy, sx = to_hw[0] / from_hw[0], to_hw[1] / from_hw[1]
    return boxes * boxes.new_tensor([sx, sy, sx, sy])


# -- matching and AP: pure functions ---------------------------------------------------------------
def match_detections(boxes: Tensor, scores: Tensor, labels: Tensor, gt_boxes: Tensor, gt_labels: Tensor,
                     iou: float = 0.5) -> Tensor:
    """Which detections are true positives: greedy in descending score, each ground-truth box of the
    same class taken by at most one detection with IoU ≥ ``iou``. Returns a bool N in input order."""
    tp = torch.zeros(len(scores), dtype=torch.bool)
    if len(scores) == 0 or len(gt_boxes) == 0:
        return tp
    overlaps = box_iou(boxes.float().cpu(), gt_boxes.float().cpu())
    same = labels.cpu()[:, None] == gt_labels.cpu()[None, :]
    overlaps = torch.where(same, overlaps, torch.full_like(overlaps, -1.0))
    taken = torch.zeros(len(gt_boxes), dtype=torch.bool)
    for i in scores.cpu().argsort(descending=True, stable=True).tolist():
        cand = torch.where(taken, torch.full_like(overlaps[i], -1.0), overlaps[i])
        j = int(cand.argmax())
        if cand[j] >= iou:
            tp[i], taken[j] = True, True
    return tp


def average_precision(scores: Tensor, tp: Tensor, n_gt: int) -> float:
    """All-point interpolated AP: the area under the precision-recall curve made monotone from the
    right; ``nan`` when there is no ground truth."""
    if n_gt == 0:
        return float("nan")
    if len(scores) == 0:
        return 0.0
    order = scores.argsort(descending=True, stable=True)
    hits = tp[order].float()
    cum_tp = hits.cumsum(0)
    precision = cum_tp / torch.arange(1, len(hits) + 1)
    recall = cum_tp / n_gt
    precision = torch.cat([torch.zeros(1), precision, torch.zeros(1)])
    recall = torch.cat([torch.zeros(1), recall, torch.ones(1) * float(recall[-1])])
    precision = precision.flip(0).cummax(0).values.flip(0)
    return float(((recall[1:] - recall[:-1]) * precision[1:]).sum())


def class_ap(detections: list[Detections], gt_boxes: list[Tensor], gt_labels: list[Tensor], label: int,
             iou: float = 0.5) -> float:
    """AP@``iou`` of one class over a set of images."""
    scores, tps, n_gt = [], [], 0
    for det, gb, gl in zip(detections, gt_boxes, gt_labels):
        n_gt += int((gl == label).sum())
        mine = det.labels.cpu() == label
        tp = match_detections(det.boxes[mine], det.scores[mine], det.labels[mine], gb, gl, iou)
        scores.append(det.scores[mine].cpu())
        tps.append(tp)
    return average_precision(torch.cat(scores) if scores else torch.zeros(0),
                             torch.cat(tps) if tps else torch.zeros(0, dtype=torch.bool), n_gt)
