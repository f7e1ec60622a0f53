"""torchvision detectors as victims: Faster R-CNN (ResNet-50 and MobileNet-v3 FPN, the 320 variant
included), RetinaNet, FCOS and SSD/SSDlite, with COCO label names and weights from the local torch
cache or a given file. Nothing is downloaded.

The model runs unchanged (its own transform normalizes and resizes, its own postprocess makes the
detections); forward hooks read what it scored **before NMS**, which is what objectives attack:

- two-stage (Faster R-CNN): every proposal of the region proposal network, with the box head's
  softmax over classes (torchvision's ``roi_heads.box_predictor`` output);
- single-stage (RetinaNet, FCOS, SSD): every anchor or point, with the head's class scores (sigmoid;
  FCOS: geometric mean with centreness; SSD: softmax), boxes decoded by the model's own box coder.

With random weights these models return no detection above their thresholds, so an attack on the
final boxes would get no gradient at all; the candidates still carry one (NOTES.md).
"""

from __future__ import annotations


import torch
import torchvision
from torch import Tensor
from torchvision.models.detection import FCOS, FasterRCNN, RetinaNet
from torchvision.models.detection.ssd import SSD

from physattack.victims.torchvision import local_weights
from physattack.victims.base import VictimError, read_state_dict
from physattack.victims.detection import Detections, Detector, DetectorOutput, pad_candidates, scale_boxes

#: Scene class names that COCO spells differently.
COCO_ALIASES = {"stop": "stop sign"}
#: Legacy weights that torchvision loads with batch-norm eps 0 (as its own builders do).
_EPS0 = {"fasterrcnn_resnet50_fpn", "retinanet_resnet50_fpn", "maskrcnn_resnet50_fpn", "keypointrcnn_resnet50_fpn"}


class TorchvisionDetector(Detector):
    """A ``torchvision.models.detection`` model behind the Detector interface.

    Args:
        model: a FasterRCNN, RetinaNet, FCOS or SSD in any weights state.
        labels: class names in the model's label order (index 0 is the background for COCO).
        score_threshold: the operating threshold of a detection.
    """

    aliases = COCO_ALIASES

    def __init__(self, model: torch.nn.Module, labels: list[str], score_threshold: float = 0.5):
        super().__init__()
        if not isinstance(model, (FasterRCNN, RetinaNet, FCOS, SSD)):
            raise VictimError(f"{type(model).__name__} is not a torchvision FasterRCNN, RetinaNet, FCOS or SSD model.")
        self.model = model
        self.labels = tuple(labels)
        self.score_threshold = score_threshold
        t = model.transform
        self.input_size = int(t.fixed_size[0] if getattr(t, "fixed_size", None) else t.min_size[0])
        self._seen: dict = {}
        model.transform.register_forward_hook(lambda m, args, out: self._seen.update(sizes=list(out[0].image_sizes)))
        if isinstance(model, FasterRCNN):
            model.roi_heads.register_forward_pre_hook(lambda m, args: self._seen.update(proposals=args[1]))
            model.roi_heads.box_predictor.register_forward_hook(lambda m, args, out: self._seen.update(logits=out[0]))
        else:
            model.head.register_forward_hook(lambda m, args, out: self._seen.update(head=out))
            model.anchor_generator.register_forward_hook(lambda m, args, out: self._seen.update(anchors=out))

    def detect(self, images: Tensor) -> DetectorOutput:
        self._seen.clear()
        out = self.model(list(images))
        original = tuple(images.shape[-2:])
        boxes, scores = self._candidates()
        boxes = [scale_boxes(b, hw, original) for b, hw in zip(boxes, self._seen["sizes"])]
        cb, cs, valid = pad_candidates(boxes, scores)
        dets = [Detections(o["boxes"].detach(), o["scores"].detach(), o["labels"].detach()) for o in out]
        return DetectorOutput(cb, cs, valid, dets, self.score_threshold)

    def _candidates(self) -> tuple[list[Tensor], list[Tensor]]:
        """Per image: candidate boxes N×4 in resized-image pixels and per-class scores N×K."""
        m, seen = self.model, self._seen
        if isinstance(m, FasterRCNN):
            proposals = seen["proposals"]
            probs = torch.softmax(seen["logits"], -1).split([len(p) for p in proposals])
            return list(proposals), list(probs)
        head, anchors = seen["head"], seen["anchors"]
        reg, logits = head["bbox_regression"], head["cls_logits"]
        if isinstance(m, SSD):
            probs = torch.softmax(logits, -1)
            boxes = [m.box_coder.decode_single(r, a) for r, a in zip(reg, anchors)]
        elif isinstance(m, FCOS):
            probs = torch.sqrt(torch.sigmoid(logits) * torch.sigmoid(head["bbox_ctrness"]))
            boxes = [m.box_coder.decode(r, a) for r, a in zip(reg, anchors)]
        else:
            probs = torch.sigmoid(logits)
            boxes = [m.box_coder.decode_single(r, a) for r, a in zip(reg, anchors)]
        return boxes, list(probs)


def load_torchvision_detector(arch: str, weights: str | None = None, weights_enum: str = "DEFAULT",
                              input_size: int | None = 320, score_threshold: float = 0.5,
                              random_init: bool = False) -> TorchvisionDetector:
    """Build ``torchvision.models.detection.<arch>`` and load its weights without touching the network.

    Args:
        arch: e.g. ``fasterrcnn_mobilenet_v3_large_320_fpn``, ``fasterrcnn_resnet50_fpn``,
            ``retinanet_resnet50_fpn``, ``fcos_resnet50_fpn``, ``ssdlite320_mobilenet_v3_large``.
        weights: a state-dict file; default: torchvision's cached file for ``weights_enum``.
        input_size: the shorter side the model resizes images to (its transform's ``min_size``); None
            keeps the model's own (800 for the ResNet-50 models: about 10× slower on CPU). SSD models
            have a fixed size and ignore it.
        score_threshold: the operating threshold of a detection (the model keeps lower-scoring ones
            for AP).
        random_init: random weights, nothing loaded (for tests of shapes and gradients only).
    """
    try:
        builder = torchvision.models.get_model_builder(arch)
        enums = torchvision.models.get_model_weights(arch)
        enum = enums.DEFAULT if weights_enum == "DEFAULT" else enums[weights_enum]
    except (ValueError, KeyError):
        raise VictimError(f"torchvision has no detector '{arch}' with weights '{weights_enum}'; see "
                          "torchvision.models.list_models(module=torchvision.models.detection).") from None
    labels = list(enum.meta["categories"])
    kwargs = {"weights": None, "weights_backbone": None, "num_classes": len(labels)}
    if input_size and "ssd" not in arch:
        kwargs.update(min_size=input_size, max_size=max(input_size, 1333 * input_size // 800))
    try:
        model = builder(**kwargs)
    except TypeError:
        raise VictimError(f"torchvision's '{arch}' is not a detector this adapter knows; use a Faster R-CNN, "
                          "RetinaNet, FCOS or SSD model.") from None
    if not random_init:
        path = local_weights(arch, enum, weights)
        state = read_state_dict(path, f"{arch} weights")
        # Built without weights, the backbone has BatchNorm2d where the trained model has
        # FrozenBatchNorm2d: the same numbers in eval mode, less the num_batches_tracked counters.
        missing, unexpected = model.load_state_dict(state, strict=False)
        missing = [k for k in missing if not k.endswith("num_batches_tracked")]
        if missing or unexpected:
            raise VictimError(f"{path} does not hold {arch} weights ({len(missing)} missing and "
                              f"{len(unexpected)} unexpected entries, e.g. {(missing + unexpected)[0]}); give "
                              "victim.weights the state dict of this architecture.")
        if arch in _EPS0 and weights_enum in ("DEFAULT", "COCO_V1"):
            for module in model.backbone.modules():       # what torchvision's overwrite_eps does to its frozen BN
                if isinstance(module, torch.nn.BatchNorm2d):
                    module.eps = 0.0
    return TorchvisionDetector(model, labels, score_threshold).freeze()
