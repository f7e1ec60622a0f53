"""Train the bundled DetNet on physattack's own frames: ``python -m physattack.train detnet``.

Every bundled sign scene is placed into context frames (``physattack.eot.frames``): up to three signs
of any class, or none, at varied distance, angle, light and camera effects over procedural
backgrounds, composited by depth, with a ground-truth box for each visible sign. The set is rendered
once into memory (uint8) and the network trained on it as CenterNet is: a penalty-reduced focal loss on
Gaussian centre heatmaps, L1 on log box size and on the sub-cell offset.

The held-out set uses a background bank made from another seed and the named lighting presets of the
evaluation grid, so its AP@0.5 is measured on backgrounds and lighting the network never saw. The
attack's own held-out grid (``FrameGrid``, the grid ``python -m physattack`` evaluates on) is also
scored, and both go into ``detnet.json``.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from tqdm import tqdm

from physattack.eot import LIGHTING_PRESETS, BackgroundBank, EvalGrid, ViewPipeline, ViewSampler
from physattack.eot.frames import FrameGrid, FrameLayout, FrameSampler, render_frames
from physattack.eot.grid import preset_lights
from physattack.errors import InputError, check_range
from physattack.evaluate.detection import class_ap
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.scene.signs import SIGNS
from physattack.victims.detection import best_scores_on_boxes
from physattack.victims.detnet import STRIDE, DetNet

HELDOUT_BACKGROUND_SEED = 7777


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
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("frames", "test_frames", "epochs", "batch_size", "width", "neck"):
            check_range(name, getattr(self, name), 1, integer=True)
        if check_range("image_size", self.image_size, 16, integer=True, why="pixels") % 16:
            raise InputError(f"image_size must be a multiple of 16 pixels (DetNet's stride); got {self.image_size}.")
        check_range("lr", self.lr, 0, lo_open=True)
        check_range("score_threshold", self.score_threshold, 0, 1, lo_open=True, hi_open=True)
        if self.batch_size > self.frames:
            raise InputError(f"batch_size={self.batch_size} is more than the {self.frames} training frames; lower "
                             "batch_size or raise frames.")


@torch.no_grad()
def render_set(scenes, sampler: FrameSampler, bank: BackgroundBank, count: int, generator: torch.Generator,
               image_size: int, presets: bool = False, desc: str = "render", chunk: int = 64):
    """``count`` frames: uint8 images N×3×S×S, and per frame its boxes (M×4 pixels) and scene indices (M)."""
    renderer = Renderer()
    widths = [max(s.texture_size_m) for s in scenes]
    images, boxes, labels = [], [], []
    bar = tqdm(total=count, desc=desc, unit="frame")
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        layout = sampler.sample_layout(n, widths, generator)
        if presets:
            layout = with_presets(layout, generator)
        frames = render_frames(renderer, bank, scenes, layout, (image_size, image_size))
        images.append((frames.images * 255).round().to(torch.uint8))
        boxes += frames.boxes
        labels += frames.scene_index
        bar.update(n)
    bar.close()
    return torch.cat(images), boxes, labels


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
def detect_all(model: DetNet, images: torch.Tensor, batch: int = 128):
    model.eval()
    out = []
    for i in range(0, len(images), batch):
        out += model(images[i:i + batch].float() / 255).detections
    return out


@torch.no_grad()
def grid_detection_rate(model: DetNet, scene, image_size: int) -> float:
    """Clean detection rate of ``scene``'s class on the attack's held-out frame grid."""
    grid = FrameGrid(EvalGrid())
    pipe = ViewPipeline(Renderer(), BackgroundBank(24, seed=1000), (image_size, image_size))
    views = pipe(scene, scene.texture, grid.params())
    label = model.label_index(scene.class_name)
    dets = model(views.images).detections
    return float((best_scores_on_boxes(dets, views.boxes, label) >= model.score_threshold).float().mean())


def train_detnet(options: DetNetTraining | None = None) -> tuple[DetNet, dict]:
    """Render the training and held-out frames, train DetNet as CenterNet, and measure it.

    Returns the trained network (eval mode) and its metadata: labels, shape, threshold, held-out
    AP@0.5 per class and its mean, the stop sign's detection rate on the attack's frame grid, and the
    training configuration, as ``detnet.json`` holds.
    """
    cfg = options or DetNetTraining()
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    names = list(SIGNS)
    scenes = [load_scene(n) for n in names]
    labels = [s.class_name for s in scenes]
    sampler = FrameSampler(ViewSampler())
    train_x, train_b, train_l = render_set(scenes, sampler, BackgroundBank(sampler.background_count, seed=0),
                                           cfg.frames, torch.Generator().manual_seed(cfg.seed), cfg.image_size,
                                           desc="train frames")
    test_bank = BackgroundBank(24, seed=HELDOUT_BACKGROUND_SEED)
    test_sampler = replace(sampler, view=replace(sampler.view, background_count=len(test_bank)))
    test_x, test_b, test_l = render_set(scenes, test_sampler, test_bank, cfg.test_frames,
                                        torch.Generator().manual_seed(cfg.seed + 10_000), cfg.image_size,
                                        presets=True, desc="held-out frames")
    render_minutes = (time.time() - t0) / 60

    model = DetNet(labels, width=cfg.width, neck=cfg.neck, input_size=cfg.image_size,
                   score_threshold=cfg.score_threshold)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=1e-4)
    per_epoch = len(train_x) // cfg.batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.epochs * per_epoch,
                                                pct_start=0.15)
    g = torch.Generator().manual_seed(cfg.seed)
    bar = tqdm(total=cfg.epochs * per_epoch, desc="train", unit="step")
    for epoch in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=g)
        for i in range(per_epoch):
            idx = order[i * cfg.batch_size:(i + 1) * cfg.batch_size]
            x = train_x[idx].float() / 255
            gain = 1 + 0.12 * (2 * torch.rand(len(idx), 3, 1, 1, generator=g) - 1)   # colour cast the renders lack
            x = (x * gain).clamp(0, 1)
            picked = idx.tolist()
            loss, parts = centernet_loss(model, x, [train_b[j] for j in picked], [train_l[j] for j in picked])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}", **{k: f"{v:.2f}" for k, v in parts.items()})
    bar.close()
    model.eval()
    dets = detect_all(model, test_x)
    ap = {lab: class_ap(dets, test_b, test_l, k) for k, lab in enumerate(labels)}
    finite = [v for v in ap.values() if not math.isnan(v)]
    grid_rate = grid_detection_rate(model, scenes[names.index("stop_sign")], cfg.image_size)
    meta = {
        "labels": labels, "scenes": names, "width": cfg.width, "neck": cfg.neck, "input_size": cfg.image_size,
        "score_threshold": cfg.score_threshold, "stride": STRIDE,
        "heldout_ap50": ap, "heldout_map50": sum(finite) / len(finite) if finite else float("nan"),
        "heldout_frames": len(test_x), "heldout_signs": sum(len(b) for b in test_b),
        "heldout": f"frames over background bank seed {HELDOUT_BACKGROUND_SEED} (24 images), lighting presets "
                   + ", ".join(LIGHTING_PRESETS),
        "grid_detection_rate_stop": grid_rate,
        "grid": "FrameGrid(EvalGrid()) over background bank seed 1000: the frames python -m physattack evaluates on",
        "train": {**{f.name: getattr(cfg, f.name) for f in fields(DetNetTraining)},
                  "sampler": asdict(sampler), "background_seed": 0, "render_minutes": round(render_minutes, 1),
                  "minutes": round((time.time() - t0) / 60, 1)},
        "torch": torch.__version__,
    }
    return model, meta
