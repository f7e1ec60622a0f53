"""DetNet: the bundled traffic-sign detector, trained by ``python -m physattack.train detnet``.

A small centre-point detector (CenterNet, Zhou et al. 2019, "Objects as Points"): a four-stage CNN
with a two-level top-down neck predicts, on a stride-4 grid, one heatmap per class (a peak at each
sign's centre), the box size and the sub-cell offset. Every grid cell is a candidate: its box is
decoded from its size and offset, its per-class scores are the heatmap's sigmoid. It sees context
frames (``physattack.eot.frames``) resized to ``input_size``. Weights ship in
``assets/detnet.safetensors`` beside ``detnet.json`` (labels, threshold, training configuration and
held-out AP@0.5).
"""

from __future__ import annotations

import math
from importlib import resources
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from physattack.victims.base import build_from_weights, normalize, read_bundled_weights
from physattack.victims.detection import Detector, DetectorOutput, nms_detections, resize_square, scale_boxes

MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)
STRIDE = 4


def _cbr(cin: int, cout: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class DetNet(Detector):
    """Centre-point detector over ``labels``.

    Args:
        labels: class names, in heatmap channel order.
        width: channels of the first stage (then 2w, 4w, 8w at strides 4, 8, 16).
        neck: channels of the top-down neck and the head.
        input_size: side of the square the input is resized to (a multiple of 16).
        score_threshold: the operating threshold of a detection.

    Shape:
        raw: images B×3×S×S -> heat logits B×K×S/4×S/4, log-size B×2×…, offset B×2×….
    """

    def __init__(self, labels: list[str] | tuple[str, ...], width: int = 12, neck: int = 32, input_size: int = 160,
                 score_threshold: float = 0.3):
        super().__init__()
        self.labels = tuple(labels)
        self.width, self.neck, self.input_size, self.score_threshold = width, neck, input_size, score_threshold
        w, n, k = width, neck, len(self.labels)
        self.stem = _cbr(3, w, 2)
        self.stage4 = nn.Sequential(_cbr(w, 2 * w, 2), _cbr(2 * w, 2 * w))
        self.stage8 = nn.Sequential(_cbr(2 * w, 4 * w, 2), _cbr(4 * w, 4 * w))
        self.stage16 = nn.Sequential(_cbr(4 * w, 8 * w, 2), _cbr(8 * w, 8 * w), _cbr(8 * w, 8 * w))
        self.lateral16, self.lateral8 = nn.Conv2d(8 * w, n, 1), nn.Conv2d(4 * w, n, 1)
        self.lateral4 = nn.Conv2d(2 * w, n, 1)
        self.merge8, self.merge4 = _cbr(n, n), _cbr(n, n)
        self.head = nn.Sequential(_cbr(n, n), nn.Conv2d(n, k + 4, 1))
        with torch.no_grad():   # heatmap prior 0.1, as CenterNet: training starts from "nothing here"
            self.head[-1].bias[:k].fill_(-math.log((1 - 0.1) / 0.1))

    def raw(self, images: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = normalize(resize_square(images, self.input_size), MEAN, STD)
        c4 = self.stage4(self.stem(x))
        c8 = self.stage8(c4)
        c16 = self.stage16(c8)
        p8 = self.merge8(self.lateral8(c8) + F.interpolate(self.lateral16(c16), scale_factor=2, mode="nearest"))
        p4 = self.merge4(self.lateral4(c4) + F.interpolate(p8, scale_factor=2, mode="nearest"))
        out = self.head(p4)
        k = len(self.labels)
        return out[:, :k], out[:, k:k + 2], out[:, k + 2:]

    def decode(self, heat: Tensor, log_size: Tensor, offset: Tensor) -> tuple[Tensor, Tensor]:
        """Raw maps to candidates: boxes B×N×4 in input-size pixels, scores B×N×K (N = grid cells)."""
        b, k, h, w = heat.shape
        ys, xs = torch.meshgrid(torch.arange(h, device=heat.device, dtype=heat.dtype),
                                torch.arange(w, device=heat.device, dtype=heat.dtype), indexing="ij")
        cx = (xs + offset[:, 0]) * STRIDE
        cy = (ys + offset[:, 1]) * STRIDE
        size = log_size.clamp(-4, 6).exp() * STRIDE
        boxes = torch.stack([cx - size[:, 0] / 2, cy - size[:, 1] / 2, cx + size[:, 0] / 2, cy + size[:, 1] / 2], -1)
        return boxes.flatten(1, 2), torch.sigmoid(heat).flatten(2).transpose(1, 2)

    def detect(self, images: Tensor) -> DetectorOutput:
        boxes, scores = self.decode(*self.raw(images))
        boxes = scale_boxes(boxes, (self.input_size, self.input_size), tuple(images.shape[-2:]))
        valid = torch.ones(boxes.shape[:2], dtype=torch.bool, device=boxes.device)
        return DetectorOutput(boxes, scores, valid, nms_detections(boxes, scores, min_score=0.05, iou=0.45),
                              self.score_threshold)


def default_detnet_weights() -> Path:
    return Path(str(resources.files("physattack.assets"))) / "detnet.safetensors"


def load_detnet(weights: str | Path | None = None, score_threshold: float | None = None) -> DetNet:
    """Load DetNet from ``weights`` (a .safetensors file with a .json beside it), default the bundled one."""
    path = Path(weights) if weights else default_detnet_weights()
    state, meta = read_bundled_weights(path, "DetNet", "python -m physattack.train detnet")
    model = build_from_weights(path, lambda: DetNet(
        meta["labels"], width=meta["width"], neck=meta["neck"], input_size=meta["input_size"],
        score_threshold=score_threshold if score_threshold is not None else meta["score_threshold"]), state)
    model.meta = meta
    return model.freeze()
