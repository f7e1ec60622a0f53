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

The project also trains small detectors of these kinds on its own context frames, as it trains DetNet
(``python -m physattack.train detector arch=fcos|ssdlite|retinanet name=<name>``): ``sign_detector_model``
builds the network (FCOS or RetinaNet on a timm trunk with a small FPN, or SSDlite on MobileNetV3, from
random init, sized to train on a CPU), and ``bundled_sign_detector`` / ``load_sign_detector`` load it
from ``assets/<name>.safetensors`` and the JSON beside it, labelled with the scene classes' own names.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from importlib import resources
from pathlib import Path

import torch
import torchvision
from torch import Tensor, nn
from torchvision.models.detection import FCOS, FasterRCNN, RetinaNet
from torchvision.models.detection.ssd import SSD

from physattack.victims.torchvision import local_weights
from physattack.victims.base import VictimError, build_from_weights, read_bundled_weights, read_state_dict
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
        aliases: scene class name -> the model's label (default ``COCO_ALIASES``; ``{}`` for a model
            labelled with the scenes' own names).
    """

    aliases = COCO_ALIASES

    def __init__(self, model: torch.nn.Module, labels: list[str], score_threshold: float = 0.5,
                 aliases: dict[str, str] | None = None):
        super().__init__()
        if not isinstance(model, (FasterRCNN, RetinaNet, FCOS, SSD)):
            raise VictimError(f"{type(model).__name__} is not a torchvision FasterRCNN, RetinaNet, FCOS or SSD model.")
        self.model = model
        self.labels = tuple(labels)
        self.score_threshold = score_threshold
        if aliases is not None:           # a model labelled with the scenes' own names needs none
            self.aliases = dict(aliases)
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


# -- the project's own small detectors of these kinds -----------------------------------------------

#: Architectures ``sign_detector_model`` builds (``python -m physattack.train detector arch=...``).
SIGN_ARCHS = ("fcos", "retinanet", "ssdlite")
#: Label 0 of a torchvision detector is the background (SSD's softmax column; unused by FCOS and RetinaNet).
BACKGROUND = "__background__"


class TimmFPN(nn.Module):
    """A timm trunk's stride-8, -16 and -32 features through a feature pyramid (torchvision's), as
    FCOS and RetinaNet take a backbone: ``out_channels`` channels at each level, named ``"0"``-``"2"``."""

    def __init__(self, trunk: str, out_channels: int = 64):
        super().__init__()
        import timm
        from torchvision.ops import FeaturePyramidNetwork

        try:
            self.body = timm.create_model(trunk, pretrained=False, features_only=True, out_indices=(2, 3, 4))
        except (RuntimeError, ValueError) as e:
            raise VictimError(f"timm cannot build the trunk '{trunk}' ({str(e).splitlines()[0]}); choose a timm "
                              "architecture with five feature stages, e.g. regnetx_002 or resnet10t.") from None
        if self.body.feature_info.reduction() != [8, 16, 32]:
            raise VictimError(f"The trunk '{trunk}' gives features at strides {self.body.feature_info.reduction()}, "
                              "not 8, 16 and 32; choose a convolutional timm trunk, e.g. regnetx_002 or resnet10t.")
        self.fpn = FeaturePyramidNetwork(self.body.feature_info.channels(), out_channels)
        self.out_channels = out_channels

    def forward(self, x: Tensor) -> "OrderedDict[str, Tensor]":
        return self.fpn(OrderedDict((str(i), f) for i, f in enumerate(self.body(x))))


def sign_detector_model(arch: str, num_classes: int, input_size: int = 160, trunk: str = "regnetx_002",
                        fpn_channels: int = 64, head_convs: int = 2, width_mult: float = 1.0) -> nn.Module:
    """A small torchvision detector from random init, sized to train and attack on a CPU.

    Args:
        arch: ``fcos`` (FCOS, Tian et al. 2019: anchor-free points with centreness), ``retinanet``
            (RetinaNet, Lin et al. 2017: 9 anchors per point, focal loss) — both on ``trunk`` with a
            three-level FPN (strides 8, 16, 32) — or ``ssdlite`` (SSDlite, Sandler et al. 2018:
            MobileNetV3-Large with ``width_mult``, six levels, softmax over classes with a background).
        num_classes: labels including the background at index 0.
        input_size: the square side every image is resized to (a multiple of 32).
        trunk: the timm trunk of FCOS and RetinaNet.
        fpn_channels: channels of their pyramid and head (a multiple of 32: the FCOS head's GroupNorm).
        head_convs: FCOS's convolutions per head branch (RetinaNet's head has four).
        width_mult: SSDlite's MobileNetV3 width.

    The candidate threshold (below which the model keeps no detection) is low, 0.05 (SSD 0.01), so
    AP sees the whole precision-recall curve; the victim's ``score_threshold`` is the operating one.
    """
    from torchvision.models.detection.anchor_utils import AnchorGenerator, DefaultBoxGenerator
    from torchvision.models.detection.fcos import FCOSHead
    from torchvision.models.detection.retinanet import RetinaNetHead

    VictimError.check_choice("arch", arch, SIGN_ARCHS)
    VictimError.check_range("num_classes", num_classes, 2, integer=True)
    if VictimError.check_range("input_size", input_size, 32, integer=True) % 32:
        raise VictimError(f"input_size must be a multiple of 32 pixels (the trunk's stride); got {input_size}.")
    if VictimError.check_range("fpn_channels", fpn_channels, 32, integer=True) % 32:
        raise VictimError(f"fpn_channels must be a multiple of 32 (GroupNorm's 32 groups); got {fpn_channels}.")
    VictimError.check_range("head_convs", head_convs, 1, integer=True)
    VictimError.check_range("width_mult", width_mult, 0.0, 2.0, lo_open=True)
    size = {"min_size": input_size, "max_size": input_size}
    if arch == "fcos":
        # a point is responsible for boxes up to 8x its size: sizes of half the stride spread the
        # 16-100 px signs of a 160-px frame over all three levels (stride-sized points put them all on one)
        anchors = AnchorGenerator(((4,), (8,), (16,)), ((1.0,),) * 3)
        return FCOS(TimmFPN(trunk, fpn_channels), num_classes, anchor_generator=anchors,
                    head=FCOSHead(fpn_channels, 1, num_classes, head_convs), score_thresh=0.05,
                    detections_per_img=50, topk_candidates=200, **size)
    if arch == "retinanet":
        sizes = tuple((s, int(s * 2 ** (1 / 3)), int(s * 2 ** (2 / 3))) for s in (12, 24, 48))
        anchors = AnchorGenerator(sizes, ((0.5, 1.0, 2.0),) * 3)
        head = RetinaNetHead(fpn_channels, anchors.num_anchors_per_location()[0], num_classes,
                             norm_layer=partial(nn.GroupNorm, 32))
        return RetinaNet(TimmFPN(trunk, fpn_channels), num_classes, anchor_generator=anchors, head=head,
                         score_thresh=0.05, detections_per_img=50, topk_candidates=200, **size)
    from torchvision.models import mobilenet_v3_large
    from torchvision.models.detection import _utils as det_utils
    from torchvision.models.detection.ssdlite import SSDLiteFeatureExtractorMobileNet, SSDLiteHead

    norm = partial(nn.BatchNorm2d, eps=0.001, momentum=0.03)        # as torchvision's ssdlite320 builder
    features = mobilenet_v3_large(weights=None, norm_layer=norm, reduced_tail=True, width_mult=width_mult).features
    c4 = [i for i, b in enumerate(features) if getattr(b, "_is_cn", False)][-1]     # the last stride-16 block
    backbone = SSDLiteFeatureExtractorMobileNet(features, c4, norm, width_mult=width_mult)
    # smaller default boxes than ssdlite320's (0.2-0.95): a far sign fills a tenth of the frame
    anchors = DefaultBoxGenerator([[2, 3]] * 6, scales=[0.08, 0.16, 0.32, 0.5, 0.68, 0.86, 1.04])
    channels = det_utils.retrieve_out_channels(backbone, (input_size, input_size))
    return SSD(backbone, anchors, (input_size, input_size), num_classes, image_mean=[0.5] * 3, image_std=[0.5] * 3,
               head=SSDLiteHead(channels, anchors.num_anchors_per_location(), num_classes, norm),
               score_thresh=0.01, nms_thresh=0.5, detections_per_img=50, topk_candidates=200)


def sign_detector(meta: dict, score_threshold: float | None = None) -> TorchvisionDetector:
    """The detector ``meta`` describes (a training JSON: ``arch``, ``labels``, ``input_size``, ``trunk``,
    ``fpn_channels``, ``head_convs``, ``width_mult``, ``score_threshold``), with random weights."""
    try:
        labels = [BACKGROUND, *meta["labels"]]
        model = sign_detector_model(meta["arch"], len(labels), meta["input_size"], meta.get("trunk", "regnetx_002"),
                                    meta.get("fpn_channels", 64), meta.get("head_convs", 2),
                                    meta.get("width_mult", 1.0))
        threshold = meta["score_threshold"] if score_threshold is None else score_threshold
    except (KeyError, TypeError) as e:
        raise VictimError(f"The detector's metadata lacks {e}; it should be the JSON 'python -m physattack.train "
                          "detector' wrote.") from None
    VictimError.check_range("score_threshold", threshold, 0.0, 1.0, lo_open=True, hi_open=True)
    return TorchvisionDetector(model, labels, threshold, aliases={})


def load_sign_detector(weights: str | Path, score_threshold: float | None = None) -> TorchvisionDetector:
    """A detector ``python -m physattack.train detector`` trained: ``weights`` (.safetensors) with its
    JSON beside it; ``score_threshold`` None keeps the one the JSON records."""
    path = Path(weights)
    state, meta = read_bundled_weights(path, f"Detector {path.stem}", f"python -m physattack.train detector "
                                       f"name={path.stem} arch=<{'|'.join(SIGN_ARCHS)}>")
    model = build_from_weights(path, lambda: sign_detector(meta, score_threshold), state)
    model.meta = meta
    return model.freeze()


def bundled_sign_detector(name: str, weights: str | None = None,
                          score_threshold: float | None = None) -> TorchvisionDetector:
    """A detector the project trained and ships: ``assets/<name>.safetensors`` (or ``weights``)."""
    path = Path(weights) if weights else Path(str(resources.files("physattack.assets"))) / f"{name}.safetensors"
    return load_sign_detector(path, score_threshold)
