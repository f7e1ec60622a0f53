"""Ultralytics YOLO detectors as victims — an optional extra (``pip install 'physattack[yolo]'``).

Ultralytics is AGPL-3.0 and pulls in ``opencv-python`` beside our headless build, so it is never a
core dependency; without it, asking for a YOLO victim fails with one sentence saying what to install.
Nothing is downloaded: the model is built from its YAML (random weights, for tests) or loaded from a
local ``.pt`` file, with ``YOLO_OFFLINE=1`` set before ultralytics is imported.

Gradients go through ``YOLO(...).model`` (the ``DetectionModel``), not ``predict`` (which
preprocesses with numpy). In eval mode its head returns, for every anchor point, a box (centre,
width, height in input pixels) and per-class sigmoid scores: the candidates before NMS.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import torch
from torch import Tensor

from physattack.victims.base import VictimError
from physattack.victims.detection import Detector, DetectorOutput, nms_detections, resize_square, scale_boxes
from physattack.victims.torchvision_detection import COCO_ALIASES


def _ultralytics():
    os.environ.setdefault("YOLO_OFFLINE", "1")
    os.environ.setdefault("YOLO_CONFIG_DIR", str(Path(tempfile.gettempdir()) / "physattack-ultralytics"))
    try:
        import ultralytics
    except ImportError:
        raise VictimError("YOLO victims need Ultralytics, which is not installed; install the optional extra with "
                          "pip install 'physattack[yolo]' (Ultralytics is AGPL-3.0).") from None
    return ultralytics


class YOLODetector(Detector):
    """An Ultralytics ``DetectionModel``; images are resized to ``input_size`` (a multiple of 32).

    Args:
        model: the ``DetectionModel`` (``YOLO(...).model``).
        labels: class names in the model's order.
        input_size: side of the square input.
        score_threshold: the operating threshold of a detection.
    """

    aliases = COCO_ALIASES

    def __init__(self, model: torch.nn.Module, labels: list[str], input_size: int = 320,
                 score_threshold: float = 0.25):
        super().__init__()
        if input_size % 32:
            raise VictimError(f"victim.input_size must be a multiple of 32 for YOLO, got {input_size}.")
        self.model = model
        self.labels = tuple(labels)
        self.input_size = input_size
        self.score_threshold = score_threshold

    def detect(self, images: Tensor) -> DetectorOutput:
        out = self.model(resize_square(images, self.input_size))
        pred = out[0] if isinstance(out, (list, tuple)) else out
        k = len(self.labels)
        if pred.dim() != 3 or pred.shape[1] != 4 + k:
            raise VictimError(f"This YOLO head returns {tuple(pred.shape)}, not B×(4+{k})×anchors; only "
                              "Detect heads with NMS-based output (YOLOv5u/v8/11 style) are supported.")
        xywh, scores = pred[:, :4].transpose(1, 2), pred[:, 4:].transpose(1, 2)
        boxes = torch.cat([xywh[..., :2] - xywh[..., 2:] / 2, xywh[..., :2] + xywh[..., 2:] / 2], -1)
        boxes = scale_boxes(boxes, (self.input_size, self.input_size), tuple(images.shape[-2:]))
        valid = torch.ones(boxes.shape[:2], dtype=torch.bool, device=boxes.device)
        dets = nms_detections(boxes, scores, min_score=0.01, iou=0.7, max_detections=100)
        return DetectorOutput(boxes, scores, valid, dets, self.score_threshold)


def load_yolo(model: str = "yolov8n.yaml", weights: str | None = None, input_size: int = 320,
              score_threshold: float = 0.25, random_init: bool = False) -> YOLODetector:
    """Build a YOLO victim from a local ``.pt`` file (``weights``) or, with ``random_init``, from the
    architecture YAML ``model`` that ships with Ultralytics (e.g. ``yolov8n.yaml``, ``yolo11n.yaml``)."""
    ultralytics = _ultralytics()
    if random_init:
        try:
            yolo = ultralytics.YOLO(model)
        except (Exception, SystemExit) as e:   # ultralytics raises many kinds here, SystemExit included
            raise VictimError(f"Ultralytics cannot build '{model}' ({str(e).splitlines()[0][:120]}); give "
                              "victim.model an architecture YAML it ships, e.g. yolov8n.yaml.") from None
    else:
        path = Path(weights) if weights else None
        if path is None or not path.is_file():
            raise VictimError(f"The YOLO weights are not on this machine (looked for {weights}); set victim.weights "
                              "to a local .pt file (nothing is downloaded), or victim.random_init=true for tests.")
        yolo = ultralytics.YOLO(str(path.resolve()))
    net = yolo.model
    names = net.names if isinstance(net.names, dict) else dict(enumerate(net.names))
    labels = [str(names[i]) for i in range(len(names))]
    if all(lab == str(i) for i, lab in enumerate(labels)) and len(labels) == 80:   # a YAML-built COCO model
        from ultralytics.utils import ROOT, YAML
        labels = [str(n) for n in YAML.load(ROOT / "cfg" / "datasets" / "coco.yaml")["names"].values()]
    victim = YOLODetector(net, labels, input_size, score_threshold)
    return victim.freeze()
