"""Train a member of the victim zoo: ``python -m physattack.train zoo arch=<timm arch> name=<name>``.

A member is a timm architecture with random initialization, trained on the project's own renders as
SignNet is (``physattack.train.classifier``), and loaded back as a plain timm victim
(``victim=timm victim.arch=... victim.weights=...``, or the ``conf/victim/<name>.yaml`` written for it):
its preprocessing (input size, normalization, interpolation) is the ``TimmClassifier``'s, so training
and attack see the model through the same ``forward``.

Members differ in architecture, input size, normalization, augmentation and seed, so that an attack on
some of them can be measured on others it never saw (issue 14). With ``hard=true`` part of the
training views are *hard*: backgrounds cluttered with blobs and strips in the sign's own colours (red,
orange, brown) and textured surfaces (brick, wood, rust, gravel), and signs as small and far as a
dashcam sees them. Every member is measured on the normal held-out views (backgrounds of seed 7777
and the lighting presets, as SignNet) and on hard held-out views, whatever it was trained on.

From Python::

    victim, meta = train_member(ZooTraining(arch="resnet10t", per_class=600, epochs=6), training_world())   # physattack.cli.train.training_world
    save_member("assets/zoo_resnet10t.safetensors", victim, meta)
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import Tensor
from tqdm import tqdm

from physattack.atomic import save_json, save_text, save_with
from physattack.eot import LIGHTING_PRESETS, BackgroundBank, ViewSampler
from physattack.errors import InputError, check_choice, check_interval, check_range
from physattack.scene.signs import SIGNS
from physattack.train.classifier import HELDOUT_BACKGROUND_SEED, check_batch_fits, render_set
from physattack.train.warp import TEST_PHOTOS, WARP_RECIPE, warp_augmentation, warp_set
from physattack.train.world import TrainingWorld, ViewSource
from physattack.victims.timm import PREPROCESSING_KEYS, Preprocessing, TimmClassifier, load_timm_classifier

#: Normalizations a member may use: timm's ImageNet statistics, or a plain shift to [-1, 1].
NORMALIZATIONS = {
    "imagenet": ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
    "half": ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5)),
}
#: Batch augmentations on top of the views' own randomization. No flips: arrows and text have a side.
#: ``v2``: torchvision's ``transforms.v2`` pipeline of ``physattack.train.warp`` (another library's code).
AUGMENTATIONS = ("none", "shift", "erase", "shift_erase", "v2")
#: Where the training views come from: this pipeline's renders, or ``physattack.train.warp``'s OpenCV
#: warps of the flat face onto photographs (a victim that never saw a render).
SOURCES = ("render", "warp")
STORAGE = {"float16": torch.float16, "float32": torch.float32}
#: The hard backgrounds are drawn from their own seeds, apart from the plain banks' (0 and 7777).
HARD_BACKGROUND_SEED = 1
HELDOUT_HARD_BACKGROUND_SEED = HELDOUT_BACKGROUND_SEED + 1


# ----------------------------------------------------------------------------- hard backgrounds
#: Clutter colours (RGB in [0, 1]) near the signs' own: sign red, construction orange, wood/rust brown.
CLUTTER_COLOURS = {
    "red": (0.72, 0.08, 0.09),
    "orange": (0.93, 0.45, 0.06),
    "brown": (0.42, 0.24, 0.11),
}
SURFACES = ("brick", "wood", "rust", "gravel")


def _jitter(rng: np.random.Generator, colour, spread: float = 0.12) -> tuple[float, float, float]:
    """``colour`` under another light: a brightness gain and a little per-channel drift."""
    c = np.asarray(colour) * rng.uniform(0.7, 1.15) + rng.normal(0, spread / 3, 3)
    return tuple(float(v) for v in np.clip(c, 0, 1))


def _noise(rng: np.random.Generator, size: int, scale: int) -> np.ndarray:
    small = rng.random((max(2, size // scale), max(2, size // scale))).astype(np.float32)
    return cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC)


def _brick(rng, n):
    mortar = np.array(_jitter(rng, (0.68, 0.65, 0.6), 0.05))
    img = np.ones((n, n, 3)) * mortar
    h = int(rng.uniform(0.05, 0.1) * n)
    w = int(h * rng.uniform(2.0, 3.0))
    base = CLUTTER_COLOURS["red" if rng.random() < 0.5 else "brown"]
    for row, y in enumerate(range(0, n, h)):
        for x in range(-(row % 2) * w // 2, n, w):
            cv2.rectangle(img, (x + 1, y + 1), (x + w - 2, y + h - 2), _jitter(rng, base, 0.08), -1)
    return img * (0.85 + 0.3 * _noise(rng, n, 4)[..., None])


def _wood(rng, n):
    img = np.empty((n, n, 3))
    plank = int(rng.uniform(0.12, 0.3) * n)
    y = np.arange(n)[:, None]
    for x0 in range(0, n, plank):
        colour = np.array(_jitter(rng, CLUTTER_COLOURS["brown"], 0.06))
        freq = rng.uniform(0.15, 0.4)
        wobble = 6 * _noise(rng, n, 32)[:, x0:x0 + plank]
        grain = 0.8 + 0.25 * np.sin(freq * (y + wobble) + rng.uniform(0, 6))
        img[:, x0:x0 + plank] = grain[..., None] * colour
        img[:, x0:x0 + 1] *= 0.5                                  # the gap between planks
    return img


def _rust(rng, n):
    a, b = np.array(CLUTTER_COLOURS["orange"]) * 0.8, np.array(CLUTTER_COLOURS["brown"])
    t = np.clip(0.6 * _noise(rng, n, 24) + 0.4 * _noise(rng, n, 6), 0, 1)[..., None]
    img = a * t + b * (1 - t)
    if rng.random() < 0.6:                                        # corrugated sheet metal
        period = rng.uniform(6, 14)
        img = img * (0.8 + 0.2 * np.sin(np.arange(n) * 2 * np.pi / period))[None, :, None]
    return img


def _gravel(rng, n):
    img = np.ones((n, n, 3)) * rng.uniform(0.3, 0.55) * (0.8 + 0.4 * _noise(rng, n, 3)[..., None])
    for _ in range(int(n * n / 40)):                              # stones and fallen leaves
        colour = (_jitter(rng, CLUTTER_COLOURS[rng.choice(list(CLUTTER_COLOURS))]) if rng.random() < 0.3
                  else (float(rng.uniform(0.2, 0.8)),) * 3)
        cv2.circle(img, (int(rng.integers(n)), int(rng.integers(n))), int(rng.integers(1, 3)), colour, -1)
    return img


_SURFACE_MAKERS = {"brick": _brick, "wood": _wood, "rust": _rust, "gravel": _gravel}


def _clutter(rng: np.random.Generator, img: np.ndarray, count: int) -> np.ndarray:
    """Draw ``count`` blobs, strips and striped barriers in the sign colours onto ``img`` (H×W×3)."""
    n = img.shape[0]
    names = list(CLUTTER_COLOURS)
    for _ in range(count):
        colour = _jitter(rng, CLUTTER_COLOURS[names[rng.integers(len(names))]])
        kind = rng.random()
        cx, cy = int(rng.integers(n)), int(rng.integers(n))
        if kind < 0.4:                                            # a blob: car body, awning, leaves
            axes = (int(rng.uniform(0.03, 0.16) * n), int(rng.uniform(0.03, 0.16) * n))
            cv2.ellipse(img, (cx, cy), axes, float(rng.uniform(0, 180)), 0, 360, colour, -1, cv2.LINE_AA)
        elif kind < 0.7:                                          # a strip: a pole, a rail, a shop sign
            long, short = rng.uniform(0.2, 0.8) * n, rng.uniform(0.015, 0.06) * n
            box = cv2.boxPoints(((cx, cy), (long, short), float(rng.choice([0, 90, rng.uniform(0, 180)]))))
            cv2.fillPoly(img, [box.astype(np.int32)], colour, cv2.LINE_AA)
        elif kind < 0.85:                                         # a barrier or a cone: colour and white bands
            w, h = int(rng.uniform(0.15, 0.5) * n), int(rng.uniform(0.03, 0.08) * n)
            band = max(2, w // int(rng.integers(3, 7)))
            for i, x in enumerate(range(cx - w // 2, cx + w // 2, band)):
                c = colour if i % 2 == 0 else _jitter(rng, (0.92, 0.92, 0.9), 0.05)
                cv2.rectangle(img, (x, cy), (x + band, cy + h), c, -1)
        else:                                                     # an irregular patch: paint, rust, a poster
            r = int(rng.uniform(0.05, 0.15) * n)
            angles = np.sort(rng.uniform(0, 2 * np.pi, int(rng.integers(5, 10))))
            radii = r * rng.uniform(0.5, 1.0, len(angles))
            pts = np.stack([cx + radii * np.cos(angles), cy + radii * np.sin(angles)], 1).astype(np.int32)
            cv2.fillPoly(img, [pts], colour, cv2.LINE_AA)
    return img


def hard_backgrounds(images: Tensor, seed: int, clutter: tuple[int, int] = (4, 12)) -> Tensor:
    """The images of a background bank (N×3×S×S in [0, 1]) made hard: every other one replaced by a
    textured surface (brick, wood, rust, gravel in turn), and every one cluttered with ``clutter``
    (min, max) blobs, strips and striped barriers in red, orange and brown."""
    rng = np.random.default_rng(seed)
    out = images.permute(0, 2, 3, 1).numpy().astype(np.float64)
    n = out.shape[1]
    for i in range(len(out)):
        if i % 2 == 1:
            out[i] = _SURFACE_MAKERS[SURFACES[(i // 2) % len(SURFACES)]](rng, n)
        out[i] = _clutter(rng, np.ascontiguousarray(out[i]), int(rng.integers(clutter[0], clutter[1] + 1)))
    out = np.clip(out + rng.normal(0, 0.01, out.shape), 0, 1).astype(np.float32)
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


class HardBackgroundBank(BackgroundBank):
    """A procedural background bank (``BackgroundBank(count, seed)``) made hard by ``hard_backgrounds``:
    textured surfaces and clutter in the signs' own colours."""

    def __init__(self, count: int = 48, seed: int = HARD_BACKGROUND_SEED):
        super().__init__(count, seed)
        self.images = hard_backgrounds(self.images, seed)


def hard_sampler(sampler: ViewSampler, distance_m: tuple[float, float], frame: tuple[float, float],
                 background_count: int) -> ViewSampler:
    """``sampler`` with signs as small and far as a dashcam sees them: the distance range widened and
    the share of the crop the sign fills shrunk (so fewer sensor pixels fall on the sign)."""
    return replace(sampler, distance_m=tuple(distance_m), frame=tuple(frame), background_count=background_count)


# ----------------------------------------------------------------------------- options
@dataclass
class ZooTraining:
    """A zoo member's architecture, preprocessing and training budget.

    Args:
        arch: a timm architecture (timm.list_models()), built with random initialization.
        model_kwargs: more timm.create_model arguments, e.g. {img_size:64,depth:6,patch_size:8} for a small ViT.
        input_size: side of the square the model sees (the rendered crops are resized to it).
        normalization: imagenet (timm's ImageNet mean/std) or half (mean 0.5, std 0.5).
        source: render (this pipeline's renders, as every attack sees) or warp (the flat sign face warped
            onto scikit-image's bundled photographs with OpenCV, physattack.train.warp: an image path the
            attack never optimizes through, for held-out victims of their own group).
        augment: none, shift (random shift and scale of the crop), erase (a random rectangle painted
            over), shift_erase, or v2 (torchvision transforms.v2 colour, blur, perspective, noise and
            erasing, per image); on top of the views' own randomization.
        hard: train on hard views too (clutter in the sign colours, textured surfaces, small far signs).
        hard_share: share of the training renders that are hard views when hard=true.
        hard_distance_m: [min, max] camera distance of the hard views, metres (dashcam range).
        hard_frame: [min, max] share of the crop's width the sign fills in the hard views.
        per_class: training renders of each sign.
        test_per_class: held-out renders of each sign, for the normal and again for the hard views.
        epochs: passes over the training renders.
        batch_size: renders per optimizer step.
        lr: peak learning rate of the one-cycle schedule (AdamW).
        weight_decay: AdamW weight decay.
        image_size: side of the rendered crops in pixels.
        storage: float16 (half the file) or float32; the held-out figures are measured on the stored weights.
        seed: seed of the renders, the initialization, the batch order and the augmentation.
    """

    arch: str = "resnet10t"
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    input_size: int = 64
    normalization: str = "imagenet"
    source: str = "render"
    augment: str = "shift"
    hard: bool = False
    hard_share: float = 0.5
    hard_distance_m: tuple[float, float] = (3.0, 60.0)
    hard_frame: tuple[float, float] = (0.2, 0.85)
    per_class: int = 1200
    test_per_class: int = 200
    epochs: int = 10
    batch_size: int = 64
    lr: float = 2e-3
    weight_decay: float = 0.05
    image_size: int = 96
    storage: str = "float16"
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("per_class", "test_per_class", "epochs", "batch_size"):
            check_range(name, getattr(self, name), 1, integer=True)
        check_range("input_size", self.input_size, 16, 512, integer=True, why="pixels")
        check_range("image_size", self.image_size, 16, integer=True, why="pixels")
        check_range("lr", self.lr, 0, lo_open=True)
        check_range("weight_decay", self.weight_decay, 0)
        check_range("hard_share", self.hard_share, 0, 1, why="the share of training renders that are hard views")
        self.hard_distance_m = check_interval("hard_distance_m", self.hard_distance_m, 0, lo_open=True,
                                              why="camera distances in metres")
        self.hard_frame = check_interval("hard_frame", self.hard_frame, 0, 1, lo_open=True,
                                         why="the share of the crop's width the sign fills")
        for name, choices in (("normalization", NORMALIZATIONS), ("augment", AUGMENTATIONS), ("storage", STORAGE),
                              ("source", SOURCES)):
            check_choice(name, getattr(self, name), list(choices))
        if self.source == "warp" and self.hard:
            raise InputError("hard=true adds hard renders, and source=warp trains on no render: give hard=false "
                             "with source=warp (its warped views already include small far signs).")
        check_batch_fits(self.batch_size, self.per_class)

    @property
    def hard_per_class(self) -> int:
        return round(self.per_class * self.hard_share) if self.hard else 0


# ----------------------------------------------------------------------------- the member
def build_member(cfg: ZooTraining) -> TimmClassifier:
    """The untrained member: ``load_timm_classifier`` with random initialization and the sign labels,
    exactly as the victim config will build it (less the weights)."""
    mean, std = NORMALIZATIONS[cfg.normalization]
    victim = load_timm_classifier(cfg.arch, labels=[SIGNS[n].class_name for n in SIGNS], label_sets=None,
                                  preprocessing=Preprocessing(cfg.input_size, list(mean), list(std), "bilinear"),
                                  model_kwargs=dict(cfg.model_kwargs), random_init=True)
    try:                                           # a model built for another size fails here, not mid-training
        with torch.no_grad():
            victim(torch.zeros(2, 3, cfg.image_size, cfg.image_size))
    except (AssertionError, RuntimeError, ValueError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
        raise InputError(f"timm's {cfg.arch} does not take {cfg.input_size}-pixel inputs ({reason}); change "
                         "input_size or give the size in model_kwargs (e.g. model_kwargs={img_size:"
                         f"{cfg.input_size}}} for a ViT).") from None
    return victim


def victim_options(victim: TimmClassifier, cfg: ZooTraining) -> dict:
    """The ``victim=timm`` keys that rebuild ``victim`` from its weights file (less ``weights``)."""
    return {"arch": cfg.arch, "labels": list(victim.labels), "label_sets": None, "input_size": victim.input_size,
            "mean": list(victim.mean), "std": list(victim.std), "interpolation": victim.interpolation,
            "crop_pct": None, "model_kwargs": dict(cfg.model_kwargs)}


def augment(images: Tensor, kind: str, generator: torch.Generator) -> Tensor:
    """B×3×S×S float images in [0, 1], shifted/scaled (±8 %, ×0.9–1.1) and/or with one random
    rectangle (2–12 % of the area) painted a random colour, from ``generator``'s draws; or, for ``v2``,
    each image through torchvision's ``transforms.v2`` pipeline (``warp.warp_augmentation``), which
    draws from torch's global generator (seeded by ``train_member``)."""
    if kind == "v2":
        transform = _v2_augmentation()
        return torch.stack([transform(im) for im in images]).clamp(0, 1)
    b = images.shape[0]
    if "shift" in kind:
        theta = torch.zeros(b, 2, 3)
        scale = 0.9 + 0.2 * torch.rand(b, generator=generator)
        theta[:, 0, 0] = theta[:, 1, 1] = scale
        theta[:, :, 2] = 0.16 * (torch.rand(b, 2, generator=generator) - 0.5)
        grid = F.affine_grid(theta, list(images.shape), align_corners=False)
        images = F.grid_sample(images, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
    if "erase" in kind:
        s = images.shape[-1]
        area = (0.02 + 0.10 * torch.rand(b, generator=generator)) * s * s
        aspect = torch.exp((torch.rand(b, generator=generator) - 0.5) * 1.4)
        h = (area * aspect).sqrt().clamp(1, s).long()
        w = (area / aspect).sqrt().clamp(1, s).long()
        top = (torch.rand(b, generator=generator) * (s - h + 1)).long()
        left = (torch.rand(b, generator=generator) * (s - w + 1)).long()
        colour = torch.rand(b, 3, generator=generator)
        rows, cols = torch.arange(s).view(1, s, 1), torch.arange(s).view(1, 1, s)
        mask = ((rows >= top.view(b, 1, 1)) & (rows < (top + h).view(b, 1, 1))
                & (cols >= left.view(b, 1, 1)) & (cols < (left + w).view(b, 1, 1))).unsqueeze(1)
        images = torch.where(mask, colour.view(b, 3, 1, 1), images)
    return images


@functools.lru_cache(maxsize=1)
def _v2_augmentation():
    return warp_augmentation()


def evaluate(victim: TimmClassifier, images: Tensor, labels: Tensor) -> tuple[float, list[float]]:
    """Top-1 accuracy over uint8 ``images`` N×3×S×S, and per class."""
    victim.eval()
    with torch.no_grad():
        pred = torch.cat([victim(images[i:i + 256].float() / 255).argmax(1) for i in range(0, len(images), 256)])
    per_class = [float((pred[labels == k] == k).float().mean()) for k in range(len(victim.labels))]
    return float((pred == labels).float().mean()), per_class


def stored_state(victim: TimmClassifier, storage: str) -> dict[str, Tensor]:
    """The timm model's state dict as it is written: floating tensors in ``storage`` (one that would
    overflow float16 stays float32), integer buffers as they are."""
    dtype = STORAGE[storage]
    state = {}
    for k, v in victim.model.state_dict().items():
        v = v.detach().contiguous().cpu()
        if v.is_floating_point() and dtype != v.dtype and torch.isfinite(v.to(dtype)).all():
            v = v.to(dtype)
        state[k] = v
    return state


def train_member(options: ZooTraining, world: TrainingWorld) -> tuple[TimmClassifier, dict]:
    """Make the training set (renders, or warps for ``source=warp``) and the held-out renders, train the
    member, and measure it on the normal and the hard held-out renders, and for ``source=warp`` on warps
    over photographs it never trained on (``world``: the attack's renderer, sampler and training
    backgrounds). Returns the trained victim (frozen; its weights rounded to ``storage``, so it is
    exactly what loads back) and its metadata: labels, the ``victim=timm`` options, held-out top-1
    (overall and per class) on each set, and the training configuration."""
    cfg = options
    torch.manual_seed(cfg.seed)
    victim = build_member(cfg)                     # an unknown arch or bad model_kwargs fail before rendering
    t0 = time.time()
    names = list(SIGNS)
    sampler, renderer = world.sampler, world.renderer
    g = torch.Generator().manual_seed(cfg.seed)
    hard_bank = HardBackgroundBank(sampler.background_count, seed=HARD_BACKGROUND_SEED)
    hard = hard_sampler(sampler, cfg.hard_distance_m, cfg.hard_frame, len(hard_bank))
    if cfg.source == "warp":
        parts = [warp_set(names, cfg.per_class, cfg.seed, cfg.image_size, desc="train warps")]
    else:
        parts = [render_set(names, cfg.per_class - cfg.hard_per_class, ViewSource(renderer, sampler, world.backgrounds),
                            g, cfg.image_size, desc="train renders")]
    if cfg.hard_per_class:
        parts.append(render_set(names, cfg.hard_per_class, ViewSource(renderer, hard, hard_bank), g, cfg.image_size,
                                desc="hard train renders"))
    train_x, train_y = (torch.cat(t) for t in zip(*parts))

    test_bank = BackgroundBank(24, seed=HELDOUT_BACKGROUND_SEED)
    test_x, test_y = render_set(names, cfg.test_per_class,
                                ViewSource(renderer, replace(sampler, background_count=len(test_bank)), test_bank),
                                torch.Generator().manual_seed(cfg.seed + 10_000), cfg.image_size,
                                presets=True, desc="held-out renders")
    hard_test_bank = HardBackgroundBank(24, seed=HELDOUT_HARD_BACKGROUND_SEED)
    hard_test = hard_sampler(sampler, cfg.hard_distance_m, cfg.hard_frame, len(hard_test_bank))
    hard_x, hard_y = render_set(names, cfg.test_per_class, ViewSource(renderer, hard_test, hard_test_bank),
                                torch.Generator().manual_seed(cfg.seed + 20_000), cfg.image_size, presets=True,
                                desc="hard held-out renders")

    for p in victim.parameters():
        p.requires_grad_(True)
    opt = torch.optim.AdamW(victim.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    per_epoch = len(train_x) // cfg.batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.epochs * per_epoch)
    bar = tqdm(total=cfg.epochs * per_epoch, desc="train", unit="step")
    for epoch in range(cfg.epochs):
        victim.train()
        order = torch.randperm(len(train_x), generator=g)
        for i in range(per_epoch):
            idx = order[i * cfg.batch_size:(i + 1) * cfg.batch_size]
            images = augment(train_x[idx].float() / 255, cfg.augment, g)
            loss = F.cross_entropy(victim(images), train_y[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}")
    bar.close()
    victim.freeze()
    state = stored_state(victim, cfg.storage)
    victim.model.load_state_dict(state)            # measure, and hand back, the weights as stored

    acc, per_class = evaluate(victim, test_x, test_y)
    hard_acc, hard_per_class = evaluate(victim, hard_x, hard_y)
    warp_test = {}
    if cfg.source == "warp":                       # also on warps over photographs it never trained on
        warp_x, warp_y = warp_set(names, cfg.test_per_class, cfg.seed + 30_000, cfg.image_size, TEST_PHOTOS,
                                  desc="held-out warps")
        warp_acc, warp_per_class = evaluate(victim, warp_x, warp_y)
        warp_test = {"heldout_warp_top1": warp_acc, "heldout_warp_per_class": dict(zip(list(victim.labels),
                                                                                         warp_per_class)),
                     "heldout_warp_views": len(warp_x),
                     "heldout_warp": f"warped views over the photographs {', '.join(TEST_PHOTOS)}, seed {cfg.seed + 30_000}"}
    labels = list(victim.labels)
    presets = ", ".join(LIGHTING_PRESETS)
    meta = {
        "labels": labels, "scenes": names, "arch": cfg.arch, "victim": victim_options(victim, cfg),
        "input_size": victim.input_size, "parameters": sum(v.numel() for v in state.values() if v.is_floating_point()),
        "weights_bytes": sum(v.numel() * v.element_size() for v in state.values()), "storage": cfg.storage,
        "heldout_top1": acc, "heldout_per_class": dict(zip(labels, per_class)), "heldout_views": len(test_x),
        "heldout": f"background bank seed {HELDOUT_BACKGROUND_SEED} (24 images), lighting presets {presets}",
        "heldout_hard_top1": hard_acc, "heldout_hard_per_class": dict(zip(labels, hard_per_class)),
        "heldout_hard_views": len(hard_x), **warp_test,
        "heldout_hard": f"hard background bank seed {HELDOUT_HARD_BACKGROUND_SEED} (24 images: clutter in red, "
                        f"orange, brown; textured surfaces), distance {list(cfg.hard_distance_m)} m, frame "
                        f"{list(cfg.hard_frame)}, lighting presets {presets}",
        "train": {**{f.name: _plain(getattr(cfg, f.name)) for f in fields(ZooTraining)},
                  "views": len(train_x), "hard_views": cfg.hard_per_class * len(names),
                  **({"recipe": WARP_RECIPE} if cfg.source == "warp" else {}),
                  "sampler": asdict(sampler), "hard_sampler": asdict(hard), "background_seed": 0,
                  "hard_background_seed": HARD_BACKGROUND_SEED, "minutes": round((time.time() - t0) / 60, 1)},
        "torch": torch.__version__,
    }
    return victim, meta


def _plain(value):
    return list(value) if isinstance(value, tuple) else (dict(value) if isinstance(value, dict) else value)


# ----------------------------------------------------------------------------- files
def save_member(out: str | Path, victim: TimmClassifier, meta: dict) -> tuple[Path, Path]:
    """Write the member's timm state dict (in ``meta['storage']``) to ``out`` (.safetensors) and ``meta``
    to the .json beside it; ``victim=timm victim.weights=<out>`` reads the file back."""
    out = Path(out)
    state = stored_state(victim, meta.get("storage", "float32"))
    save_with(out, lambda p: save_file(state, str(p)))
    return out, save_json(out.with_suffix(".json"), meta)


FAMILIES = {"resnet": "ResNet", "mobilenetv3": "MobileNetV3", "efficientnet": "EfficientNet", "tinynet": "EfficientNet",
            "vit": "ViT", "convnext": "ConvNeXt", "regnet": "RegNet", "deit": "ViT", "ghostnet": "GhostNet"}


def family(arch: str) -> str:
    """The architecture family of a timm name (``resnet10t`` -> ResNet), or the name's stem."""
    stem = arch.split(".")[0]
    return next((f for prefix, f in FAMILIES.items() if stem.startswith(prefix)), stem)


def victim_config(meta: dict, weights: str | Path, bundled: bool = False) -> str:
    """A ``conf/victim/<name>.yaml`` for the member. ``bundled``: the weights ship in physattack/assets,
    so the config names the member (``bundled_timm_victim``, which reads the rest from its JSON);
    otherwise every ``victim=timm`` key is filled, weights at ``weights``."""
    v, name = meta["victim"], Path(weights).stem
    command = meta.get("command", "physattack.train.zoo.train_member").split(" config=")[0]
    trained_on = ("# views it warped with OpenCV onto photographs (source=warp: no render of this pipeline) by"
                  if meta["train"].get("source") == "warp" else
                  f"# renders{', harder views included,' if meta['train'].get('hard') else ''} by")
    lines = [f"# Zoo member {name}: timm's {v['arch']} ({family(v['arch'])} family) trained from random init on "
             "physattack's own" if meta["train"].get("source") != "warp" else
             f"# Zoo member {name}: timm's {v['arch']} ({family(v['arch'])} family) trained from random init on",
             trained_on,
             f"#   {command}",
             f"# Held-out top-1 {100 * meta['heldout_top1']:.1f} %, on hard views "
             f"{100 * meta['heldout_hard_top1']:.1f} % "
             + (f"(renders), on warps over unseen photographs {100 * meta['heldout_warp_top1']:.1f} % "
                if "heldout_warp_top1" in meta else "")
             + f"({'assets/' if bundled else ''}{Path(weights).with_suffix('.json').name} records the rest)."]
    if bundled:
        return "\n".join([*lines, "_target_: physattack.victims.timm.bundled_timm_victim", f"name: {name}"]) + "\n"

    def show(value) -> str:
        if value is None:
            return "null"
        if isinstance(value, dict):
            return "{" + ", ".join(f"{k}: {show(x)}" for k, x in value.items()) + "}"
        if isinstance(value, (list, tuple)):
            return "[" + ", ".join(show(x) for x in value) + "]"
        return str(value).lower() if isinstance(value, bool) else str(value)

    lines += ["_target_: physattack.victims.timm.load_timm_classifier", f"arch: {v['arch']}", f"weights: {weights}",
              "num_classes: null",
              *[f"{k}: {show(v[k])}" for k in ("labels", "label_sets")],
              "preprocessing:", *[f"  {k}: {show(v[k])}" for k in PREPROCESSING_KEYS],
              f"model_kwargs: {show(v['model_kwargs'])}", "random_init: false"]
    return "\n".join(lines) + "\n"


def save_victim_config(path: str | Path, meta: dict, weights: str | Path, bundled: bool = False) -> Path:
    return save_text(path, victim_config(meta, weights, bundled))
