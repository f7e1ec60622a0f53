"""Train the bundled detectors on physattack's own frames: ``python -m physattack.train detnet`` (DetNet)
and ``python -m physattack.train detector arch=fcos|ssdlite|retinanet name=<name>`` (a small torchvision
detector of another architecture, ``physattack.victims.torchvision_detection.sign_detector_model``).

Every bundled sign scene is placed into context frames (``physattack.eot.frames``): up to three signs
of any class, or none, at varied distance, angle, light and camera effects over procedural
backgrounds, composited by depth, with a ground-truth box for each visible sign. The set is rendered
once into memory (uint8) and the network trained on it as CenterNet is: a penalty-reduced focal loss on
Gaussian centre heatmaps, L1 on log box size and on the sub-cell offset.

The torchvision detectors see the same frames (the same draws, for the same seed and counts) and are
trained on their own losses (FCOS: focal loss, GIoU and centreness; RetinaNet: focal loss and smooth
L1 on anchors; SSDlite: hard-negative-mined cross-entropy and smooth L1), through the same loop
(AdamW, one-cycle schedule, the same colour casts), so that the architectures differ and the data
do not.

The held-out set uses a background bank made from another seed and the named lighting presets of the
evaluation grid, so its AP@0.5 is measured on backgrounds and lighting the network never saw. The
attack's own held-out grid (``FrameGrid``, the grid ``python -m physattack`` evaluates on) is also
scored, and both go into the weights' JSON (``detnet.json``, ``<name>.json``).

From Python::

    detector, meta = train_detector(DetectorTraining(arch="fcos", frames=3000, epochs=8))
    save_detector("assets/det_fcos.safetensors", detector, meta)
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
import torchvision
from safetensors.torch import save_file
from torch import Tensor, nn
from tqdm import tqdm

from physattack.atomic import save_json, save_with
from physattack.eot import LIGHTING_PRESETS, BackgroundBank, EvalGrid, ViewPipeline, ViewSampler
from physattack.eot.fog import FogDraw, fog_generator
from physattack.eot.frames import FrameGrid, FrameLayout, FrameSampler, render_frames
from physattack.eot.grid import preset_lights
from physattack.errors import InputError, check_choice, check_range
from physattack.victims.detection import class_ap
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.scene.signs import SIGNS
from physattack.victims.detection import Detector, best_scores_on_boxes
from physattack.victims.detnet import STRIDE, DetNet
from physattack.victims.torchvision_detection import SIGN_ARCHS, TorchvisionDetector, sign_detector

HELDOUT_BACKGROUND_SEED = 7777
STORAGE = {"float16": torch.float16, "float32": torch.float32}


@dataclass
class DetNetTraining:
    """DetNet's training budget and shape.

    Args:
        frames: training frames (up to three signs each, or none).
        test_frames: held-out frames.
        epochs: passes over the training frames.
        batch_size: frames per optimizer step.
        lr: peak learning rate of the one-cycle schedule (AdamW).
        width: channels of DetNet's first stage.
        neck: channels of its neck and head.
        image_size: side of the rendered frames and of the network's input (a multiple of 16).
        score_threshold: the operating threshold recorded with the weights.
        fog_share: the share of training frames seen through fog (``physattack.eot.fog``; 0: none).
        seed: seed of the renders, the initialization and the batch order.
    """

    frames: int = 6000
    test_frames: int = 900
    epochs: int = 12
    batch_size: int = 32
    lr: float = 4e-3
    width: int = 12
    neck: int = 32
    image_size: int = 160
    score_threshold: float = 0.3
    fog_share: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        FogDraw(share=self.fog_share)                   # one sentence naming fog_share when it is not in [0, 1]
        for name in ("frames", "test_frames", "epochs", "batch_size", "width", "neck"):
            check_range(name, getattr(self, name), 1, integer=True)
        if check_range("image_size", self.image_size, 16, integer=True, why="pixels") % 16:
            raise InputError(f"image_size must be a multiple of 16 pixels (DetNet's stride); got {self.image_size}.")
        check_range("lr", self.lr, 0, lo_open=True)
        check_range("score_threshold", self.score_threshold, 0, 1, lo_open=True, hi_open=True)
        if self.batch_size > self.frames:
            raise InputError(f"batch_size={self.batch_size} is more than the {self.frames} training frames; lower "
                             "batch_size or raise frames.")


@dataclass(frozen=True)
class FrameSet:
    """Rendered frames: uint8 images N×3×S×S, and per frame its boxes (M×4 pixels) and scene indices (M)."""

    images: Tensor
    boxes: list[Tensor]
    labels: list[Tensor]


@dataclass(frozen=True)
class FrameDraws:
    """Where a set of frames comes from: the layouts' sampler, the background bank it draws from, and
    whether the lights are the evaluation grid's named presets instead of the sampler's."""

    sampler: FrameSampler
    bank: BackgroundBank
    presets: bool = False


@torch.no_grad()
def render_set(scenes, draws: FrameDraws, count: int, generator: torch.Generator, image_size: int,
               desc: str = "render", chunk: int = 64) -> FrameSet:
    """``count`` frames of ``scenes`` at ``image_size`` pixels, drawn as ``draws`` says."""
    sampler, bank, presets = draws.sampler, draws.bank, draws.presets
    renderer = Renderer()
    widths = [max(s.texture_size_m) for s in scenes]
    foggy = fog_generator(generator) if sampler.fog.share > 0 else None
    images, boxes, labels = [], [], []
    bar = tqdm(total=count, desc=desc, unit="frame")
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        layout = sampler.sample_layout(n, widths, generator)
        if presets:
            layout = with_presets(layout, generator)
        if foggy is not None:
            layout = sampler.sample_fog(layout, foggy)
        frames = render_frames(renderer, bank, scenes, layout, (image_size, image_size))
        images.append((frames.images * 255).round().to(torch.uint8))
        boxes += frames.boxes
        labels += frames.scene_index
        bar.update(n)
    bar.close()
    return FrameSet(torch.cat(images), boxes, labels)


def with_presets(layout: FrameLayout, generator: torch.Generator) -> FrameLayout:
    """The same frames under the evaluation grid's named lighting presets (one per frame)."""
    k = layout.scene_index.shape[1]
    fields = {f: v.repeat_interleave(k) for f, v in preset_lights(len(layout), generator).items()}
    return replace(layout, params=replace(layout.params, **fields))


def centernet_targets(boxes: list[torch.Tensor], labels: list[torch.Tensor], classes: int, grid: int):
    """Heatmaps B×K×G×G (a Gaussian peak of 1 at each box centre's cell), and at those cells the
    log size (in cells) and the sub-cell offset targets, as (batch, y, x) indices with values."""
    b = len(boxes)
    heat = torch.zeros(b, classes, grid, grid)
    ys, xs = torch.meshgrid(torch.arange(grid, dtype=torch.float32), torch.arange(grid, dtype=torch.float32),
                            indexing="ij")
    idx, size_t, off_t = [], [], []
    for i, (bx, lab) in enumerate(zip(boxes, labels)):
        for box, k in zip(bx.tolist(), lab.tolist()):
            cx, cy = (box[0] + box[2]) / 2 / STRIDE, (box[1] + box[3]) / 2 / STRIDE
            w, h = (box[2] - box[0]) / STRIDE, (box[3] - box[1]) / STRIDE
            ix, iy = min(grid - 1, max(0, int(cx))), min(grid - 1, max(0, int(cy)))
            sx, sy = max(0.5, w / 6), max(0.5, h / 6)
            g = torch.exp(-((xs - ix) ** 2 / (2 * sx * sx) + (ys - iy) ** 2 / (2 * sy * sy)))
            heat[i, k] = torch.maximum(heat[i, k], g)
            idx.append((i, iy, ix))
            size_t.append((math.log(max(w, 0.25)), math.log(max(h, 0.25))))
            off_t.append((cx - ix, cy - iy))
    return heat, torch.tensor(idx, dtype=torch.long).view(-1, 3), torch.tensor(size_t).view(-1, 2), \
        torch.tensor(off_t).view(-1, 2)


def centernet_loss(model: DetNet, images: torch.Tensor, boxes, labels) -> tuple[torch.Tensor, dict]:
    heat_logits, log_size, offset = model.raw(images)
    grid = heat_logits.shape[-1]
    target, idx, size_t, off_t = centernet_targets(boxes, labels, heat_logits.shape[1], grid)
    p = torch.sigmoid(heat_logits).clamp(1e-4, 1 - 1e-4)
    pos = target.eq(1).float()
    focal = -(pos * (1 - p) ** 2 * torch.log(p) + (1 - pos) * (1 - target) ** 4 * p ** 2 * torch.log(1 - p)).sum()
    n = max(1.0, float(pos.sum()))
    loss = focal / n
    parts = {"heat": focal.item() / n}
    if len(idx):
        b, y, x = idx.unbind(1)
        size_l = F.l1_loss(log_size[b, :, y, x], size_t, reduction="sum") / n
        off_l = F.l1_loss(offset[b, :, y, x], off_t, reduction="sum") / n
        loss = loss + size_l + off_l
        parts.update(size=size_l.item(), offset=off_l.item())
    return loss, parts


@torch.no_grad()
def detect_all(model: Detector, images: torch.Tensor, batch: int = 128):
    model.eval()
    out = []
    for i in range(0, len(images), batch):
        out += model(images[i:i + batch].float() / 255).detections
    return out


@torch.no_grad()
def grid_detection_rate(model: Detector, scene, image_size: int) -> float:
    """Clean detection rate of ``scene``'s class on the attack's held-out frame grid."""
    grid = FrameGrid(EvalGrid())
    pipe = ViewPipeline(Renderer(), BackgroundBank(24, seed=1000), (image_size, image_size))
    views = pipe(scene, scene.texture, grid.params())
    label = model.label_index(scene.class_name)
    dets = model(views.images).detections
    return float((best_scores_on_boxes(dets, views.boxes, label) >= model.score_threshold).float().mean())


@dataclass
class ContextFrames:
    """The training and held-out frames of every bundled detector (their scene indices index ``names``);
    ``test_fog`` is the held-out set again, every frame seen through fog."""

    names: list[str]
    scenes: list
    sampler: FrameSampler
    train: FrameSet
    test: FrameSet
    test_fog: FrameSet
    render_minutes: float


def context_frames(frames: int, test_frames: int, image_size: int, seed: int, fog_share: float = 0.0) -> ContextFrames:
    """Render the training frames (background bank seed 0; ``fog_share`` of them through fog) and the
    held-out frames (seed 7777, the grid's lighting presets), clear and, the same draws, all through fog;
    the same draws for the same counts, size and seed, whichever network."""
    t0 = time.time()
    names = list(SIGNS)
    scenes = [load_scene(n) for n in names]
    sampler = FrameSampler(ViewSampler(), fog=FogDraw(share=fog_share))
    train = render_set(scenes, FrameDraws(sampler, BackgroundBank(sampler.background_count, seed=0)), frames,
                       torch.Generator().manual_seed(seed), image_size, desc="train frames")
    test_bank = BackgroundBank(24, seed=HELDOUT_BACKGROUND_SEED)
    test_sampler = replace(sampler, view=replace(sampler.view, background_count=len(test_bank)), fog=FogDraw())
    tests = [render_set(scenes, FrameDraws(s, test_bank, presets=True), test_frames,
                        torch.Generator().manual_seed(seed + 10_000), image_size, desc=desc)
             for s, desc in ((test_sampler, "held-out frames"),
                             (replace(test_sampler, fog=FogDraw(share=1.0)), "held-out frames in fog"))]
    return ContextFrames(names, scenes, sampler, train, tests[0], tests[1], (time.time() - t0) / 60)


Loss = Callable[[nn.Module, Tensor, list[Tensor], list[Tensor]], tuple[Tensor, dict]]


@dataclass(frozen=True)
class FitSettings:
    """The optimizer's budget: ``epochs`` passes in batches of ``batch_size`` frames drawn by ``seed``,
    AdamW at a one-cycle peak of ``lr`` with ``weight_decay``, the gradient norm clipped at ``clip``
    (None: not clipped)."""

    epochs: int
    batch_size: int
    lr: float
    seed: int
    weight_decay: float = 1e-4
    clip: float | None = None


def fit(model: nn.Module, loss: Loss, frames: FrameSet, settings: FitSettings) -> None:
    """Train ``model`` on the uint8 frames with ``loss(model, x, boxes, labels)``: AdamW under a one-cycle
    schedule, batches drawn by ``settings.seed``, each frame under a random colour cast of up to ±12 % per
    channel."""
    images, boxes, labels = frames.images, frames.boxes, frames.labels
    epochs, batch_size, lr, clip = settings.epochs, settings.batch_size, settings.lr, settings.clip
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=settings.weight_decay)
    per_epoch = len(images) // batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=epochs * per_epoch, pct_start=0.15)
    g = torch.Generator().manual_seed(settings.seed)
    bar = tqdm(total=epochs * per_epoch, desc="train", unit="step")
    for epoch in range(epochs):
        model.train()
        order = torch.randperm(len(images), generator=g)
        for i in range(per_epoch):
            idx = order[i * batch_size:(i + 1) * batch_size]
            x = images[idx].float() / 255
            gain = 1 + 0.12 * (2 * torch.rand(len(idx), 3, 1, 1, generator=g) - 1)   # colour cast the renders lack
            x = (x * gain).clamp(0, 1)
            picked = idx.tolist()
            value, parts = loss(model, x, [boxes[j] for j in picked], [labels[j] for j in picked])
            opt.zero_grad()
            value.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(params, clip)
            opt.step()
            sched.step()
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{value.item():.3f}", **{k: f"{v:.2f}" for k, v in parts.items()})
    bar.close()
    model.eval()


def held_out_ap(model: Detector, data: ContextFrames, frames: FrameSet) -> tuple[dict, float]:
    """AP@0.5 per class on ``frames`` (labels looked up by name, so any label order works) and its mean."""
    classes = [s.class_name for s in data.scenes]
    index = torch.tensor([model.label_index(c) for c in classes])
    dets = detect_all(model, frames.images)
    ap = {c: class_ap(dets, frames.boxes, [index[lab] for lab in frames.labels], int(index[k]))
          for k, c in enumerate(classes)}
    finite = [v for v in ap.values() if not math.isnan(v)]
    return ap, sum(finite) / len(finite) if finite else float("nan")


def measure(model: Detector, data: ContextFrames, image_size: int) -> dict:
    """Held-out AP@0.5 per class and its mean, clear and in fog, and the stop sign's detection rate on the
    attack's frame grid."""
    ap, mean = held_out_ap(model, data, data.test)
    fog_ap, fog_mean = held_out_ap(model, data, data.test_fog)
    return {
        "heldout_ap50": ap, "heldout_map50": mean,
        "heldout_frames": len(data.test.images), "heldout_signs": sum(len(b) for b in data.test.boxes),
        "heldout": f"frames over background bank seed {HELDOUT_BACKGROUND_SEED} (24 images), lighting presets "
                   + ", ".join(LIGHTING_PRESETS),
        "heldout_fog_ap50": fog_ap, "heldout_fog_map50": fog_mean,
        "heldout_fog": "the same frames, each through fog (the farthest sign's transmission 0.1-0.9, "
                       "physattack.eot.fog)",
        "grid_detection_rate_stop": grid_detection_rate(model, data.scenes[data.names.index("stop_sign")], image_size),
        "grid": "FrameGrid(EvalGrid()) over background bank seed 1000: the frames python -m physattack evaluates on",
    }


def train_detnet(options: DetNetTraining | None = None) -> tuple[DetNet, dict]:
    """Render the training and held-out frames, train DetNet as CenterNet, and measure it.

    Returns the trained network (eval mode) and its metadata: labels, shape, threshold, held-out
    AP@0.5 per class and its mean, the stop sign's detection rate on the attack's frame grid, and the
    training configuration, as ``detnet.json`` holds.
    """
    cfg = options or DetNetTraining()
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    data = context_frames(cfg.frames, cfg.test_frames, cfg.image_size, cfg.seed, cfg.fog_share)
    labels = [s.class_name for s in data.scenes]
    model = DetNet(labels, width=cfg.width, neck=cfg.neck, input_size=cfg.image_size,
                   score_threshold=cfg.score_threshold)
    fit(model, centernet_loss, data.train, FitSettings(cfg.epochs, cfg.batch_size, cfg.lr, cfg.seed))
    meta = {
        "labels": labels, "scenes": data.names, "width": cfg.width, "neck": cfg.neck, "input_size": cfg.image_size,
        "score_threshold": cfg.score_threshold, "stride": STRIDE, **measure(model, data, cfg.image_size),
        "train": {**{f.name: getattr(cfg, f.name) for f in fields(DetNetTraining)},
                  "sampler": asdict(data.sampler), "background_seed": 0,
                  "render_minutes": round(data.render_minutes, 1), "minutes": round((time.time() - t0) / 60, 1)},
        "torch": torch.__version__,
    }
    return model, meta


# -- torchvision detectors of other architectures ----------------------------------------------------

@dataclass
class DetectorTraining:
    """A small torchvision detector's architecture, training budget and shape, on DetNet's frames.

    Args:
        arch: fcos (anchor-free points), retinanet (anchors, focal loss) or ssdlite (MobileNetV3, softmax).
        trunk: the timm trunk of fcos and retinanet (random init), features at strides 8, 16 and 32.
        fpn_channels: channels of their feature pyramid and head (a multiple of 32).
        head_convs: convolutions per FCOS head branch.
        width_mult: width of SSDlite's MobileNetV3-Large.
        frames: training frames (up to three signs each, or none).
        test_frames: held-out frames.
        epochs: passes over the training frames.
        batch_size: frames per optimizer step.
        lr: peak learning rate of the one-cycle schedule (AdamW).
        weight_decay: AdamW's weight decay.
        clip: gradient norm clip (detectors from random init spike early).
        image_size: side of the rendered frames and of the network's input (a multiple of 32).
        score_threshold: the operating threshold recorded with the weights.
        storage: dtype of the written weights (float16 halves the file; the figures are measured on them).
        fog_share: the share of training frames seen through fog (``physattack.eot.fog``; 0: none).
        seed: seed of the renders, the initialization and the batch order.
    """

    arch: str = "fcos"
    trunk: str = "regnetx_002"
    fpn_channels: int = 64
    head_convs: int = 2
    width_mult: float = 1.0
    frames: int = 3000
    test_frames: int = 900
    epochs: int = 8
    batch_size: int = 16
    lr: float = 2e-3
    weight_decay: float = 1e-4
    clip: float = 10.0
    image_size: int = 160
    score_threshold: float = 0.3
    storage: str = "float16"
    fog_share: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        FogDraw(share=self.fog_share)                   # one sentence naming fog_share when it is not in [0, 1]
        check_choice("arch", self.arch, SIGN_ARCHS)
        check_choice("storage", self.storage, tuple(STORAGE))
        for name in ("frames", "test_frames", "epochs", "batch_size", "head_convs"):
            check_range(name, getattr(self, name), 1, integer=True)
        if check_range("image_size", self.image_size, 32, integer=True, why="pixels") % 32:
            raise InputError(f"image_size must be a multiple of 32 pixels (the detector's largest stride); got "
                             f"{self.image_size}.")
        if check_range("fpn_channels", self.fpn_channels, 32, integer=True) % 32:
            raise InputError(f"fpn_channels must be a multiple of 32 (the head's GroupNorm); got {self.fpn_channels}.")
        check_range("width_mult", self.width_mult, 0, 2, lo_open=True)
        check_range("lr", self.lr, 0, lo_open=True)
        check_range("weight_decay", self.weight_decay, 0)
        check_range("clip", self.clip, 0, lo_open=True)
        check_range("score_threshold", self.score_threshold, 0, 1, lo_open=True, hi_open=True)
        if self.batch_size > self.frames:
            raise InputError(f"batch_size={self.batch_size} is more than the {self.frames} training frames; lower "
                             "batch_size or raise frames.")

    def architecture(self, labels: list[str]) -> dict:
        """What ``sign_detector`` builds the network from (the JSON records it)."""
        return {"arch": self.arch, "labels": list(labels), "input_size": self.image_size, "trunk": self.trunk,
                "fpn_channels": self.fpn_channels, "head_convs": self.head_convs, "width_mult": self.width_mult,
                "score_threshold": self.score_threshold}


def torchvision_loss(model: nn.Module, images: Tensor, boxes: list[Tensor], labels: list[Tensor]) -> tuple[Tensor, dict]:
    """A torchvision detector's own training losses (train mode); scene index k is its label k + 1."""
    targets = [{"boxes": b.float(), "labels": lab.long() + 1} for b, lab in zip(boxes, labels)]
    parts = model(list(images), targets)
    return sum(parts.values()), {k.removeprefix("bbox_").removesuffix("ression"): v.item() for k, v in parts.items()}


def stored_state(model: nn.Module, storage: str) -> dict[str, Tensor]:
    """``model``'s state dict as written: floating tensors in ``storage`` (one that would overflow
    float16 stays float32), integer buffers as they are."""
    dtype = STORAGE[storage]
    state = {}
    for k, v in model.state_dict().items():
        v = v.detach().contiguous().cpu()
        if v.is_floating_point() and dtype != v.dtype and torch.isfinite(v.to(dtype)).all():
            v = v.to(dtype)
        state[k] = v
    return state


def train_detector(options: DetectorTraining | None = None) -> tuple[TorchvisionDetector, dict]:
    """Render DetNet's training and held-out frames, train a torchvision detector of ``options.arch`` on
    them from random init, and measure it as DetNet is.

    Returns the detector (frozen; its weights rounded to ``storage``, so the figures are those of the
    file) and its metadata: the architecture, held-out AP@0.5 per class and its mean, the stop sign's
    detection rate on the attack's frame grid, size, and the training configuration.
    """
    cfg = options or DetectorTraining()
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    data = context_frames(cfg.frames, cfg.test_frames, cfg.image_size, cfg.seed, cfg.fog_share)
    arch = cfg.architecture([s.class_name for s in data.scenes])
    detector = sign_detector(arch)
    # channels-last convolutions: 1.3-1.7x faster training steps on a CPU (benchmarks/detector_train_step.py);
    # the figures are measured back in the default layout, as a loaded detector runs
    detector.model.to(memory_format=torch.channels_last)
    fit(detector.model, torchvision_loss, data.train,
        FitSettings(cfg.epochs, cfg.batch_size, cfg.lr, cfg.seed, weight_decay=cfg.weight_decay, clip=cfg.clip))
    detector.model.to(memory_format=torch.contiguous_format)
    detector.freeze()
    state = stored_state(detector, cfg.storage)
    detector.load_state_dict(state)                 # measure, and hand back, the weights as stored
    meta = {
        **arch, "scenes": data.names, "model": type(detector.model).__name__,
        "parameters": sum(v.numel() for v in state.values() if v.is_floating_point()),
        "weights_bytes": sum(v.numel() * v.element_size() for v in state.values()), "storage": cfg.storage,
        **measure(detector, data, cfg.image_size),
        "train": {**{f.name: getattr(cfg, f.name) for f in fields(DetectorTraining)},
                  "sampler": asdict(data.sampler), "background_seed": 0,
                  "render_minutes": round(data.render_minutes, 1), "minutes": round((time.time() - t0) / 60, 1)},
        "torch": torch.__version__, "torchvision": torchvision.__version__,
    }
    return detector, meta


def save_detector(out: str | Path, detector: TorchvisionDetector, meta: dict) -> tuple[Path, Path]:
    """Write the detector's state dict (in ``meta['storage']``) to ``out`` (.safetensors) and ``meta`` to
    the .json beside it; ``physattack.victims.torchvision_detection.load_sign_detector(out)`` reads them back."""
    out = Path(out)
    state = stored_state(detector, meta.get("storage", "float32"))
    save_with(out, lambda p: save_file(state, str(p)))
    return out, save_json(out.with_suffix(".json"), meta)
