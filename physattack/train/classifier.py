"""Train the bundled SignNet on physattack's own renders: ``python -m physattack.train signnet``.

Every bundled sign scene is rendered through the EOT sampler's domain randomization (viewpoint,
light, camera effects, procedural backgrounds) as the crop a two-stage recognizer would see. The
held-out set uses a background bank made from another seed and the named lighting presets of the
evaluation grid, so its accuracy is measured on backgrounds and lighting the network never saw.

From Python::

    model, meta = train_signnet(SignNetTraining(per_class=1200, epochs=10), training_world())   # physattack.cli.train.training_world
    save_weights("signnet.safetensors", model, meta)
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from tqdm import tqdm

from physattack.eot import LIGHTING_PRESETS, BackgroundBank, SceneParams, ViewPipeline
from physattack.eot.effects import apply_camera_effects
from physattack.eot.fog import FogDraw, fog_generator
from physattack.eot.grid import preset_lights
from physattack.errors import InputError, check_range
from physattack.scene import load_scene
from physattack.scene.signs import SIGNS
from physattack.train.world import TrainingWorld, ViewSource
from physattack.victims.signnet import SignNet

HELDOUT_BACKGROUND_SEED = 7777


def check_batch_fits(batch_size: int, per_class: int) -> None:
    """A batch no larger than the training renders (one per sign and ``per_class``)."""
    if batch_size > per_class * len(SIGNS):
        raise InputError(f"batch_size={batch_size} is more than the {per_class * len(SIGNS)} training renders "
                         f"({len(SIGNS)} signs x per_class={per_class}); lower batch_size or raise per_class.")


@dataclass
class SignNetTraining:
    """SignNet's training budget and shape.

    Args:
        per_class: training renders of each sign.
        test_per_class: held-out renders of each sign.
        epochs: passes over the training renders.
        batch_size: renders per optimizer step.
        lr: peak learning rate of the one-cycle schedule (AdamW).
        width: channels of SignNet's first block.
        image_size: side of the rendered crops in pixels (the network resizes to 64).
        fog_share: the share of training renders seen through fog (``physattack.eot.fog``; 0: none).
        seed: seed of the renders, the initialization and the batch order.
    """

    per_class: int = 1500
    test_per_class: int = 250
    epochs: int = 14
    batch_size: int = 128
    lr: float = 3e-3
    width: int = 16
    image_size: int = 96
    fog_share: float = 0.0
    seed: int = 0

    def __post_init__(self) -> None:
        FogDraw(share=self.fog_share)                   # one sentence naming fog_share when it is not in [0, 1]
        for name in ("per_class", "test_per_class", "epochs", "batch_size", "width"):
            check_range(name, getattr(self, name), 1, integer=True)
        check_range("image_size", self.image_size, 8, integer=True, why="pixels")
        check_range("lr", self.lr, 0, lo_open=True)
        check_batch_fits(self.batch_size, self.per_class)


@torch.no_grad()
def render_set(scene_names: list[str], per_class: int, source: ViewSource, generator: torch.Generator,
               image_size: int, presets: bool = False, desc: str = "render",
               fog: FogDraw = FogDraw()) -> tuple[torch.Tensor, torch.Tensor]:
    """Render ``per_class`` views of each scene, drawn by ``source.sampler`` over ``source.bank`` (``fog.share``
    of them through fog, drawn from a generator of their own); uint8 images N×3×S×S and labels N."""
    sampler = source.sampler
    pipe = ViewPipeline(source.renderer, source.bank, (image_size, image_size), object_width_m=0.75)
    foggy = fog_generator(generator) if fog.share > 0 else None
    images, labels = [], []
    bar = tqdm(total=per_class * len(scene_names), desc=desc, unit="view")
    for label, name in enumerate(scene_names):
        scene = load_scene(name)
        for start in range(0, per_class, 64):
            n = min(64, per_class - start)
            params = sampler.sample(n, generator)
            if presets:
                params = with_presets(params, generator)
            if foggy is None:
                shot = pipe(scene, scene.texture, params).images
            else:                           # fog lies between the sign and the lens: before the camera's effects
                raw = pipe(scene, scene.texture, params, effects=False)
                drawn = fog.sample(params.distance_m, params.ambient, params.diffuse, params.lights().color, foggy)
                shot = apply_camera_effects(drawn.view(raw.images, raw.alpha, params.distance_m), params)
            images.append((shot * 255).round().to(torch.uint8))
            labels.append(torch.full((n,), label))
            bar.update(n)
    bar.close()
    return torch.cat(images), torch.cat(labels)


def with_presets(params: SceneParams, generator: torch.Generator) -> SceneParams:
    """The same views under the evaluation grid's named lighting presets (one drawn per view)."""
    return replace(params, **preset_lights(len(params), generator))


def evaluate(model: SignNet, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, list[float]]:
    """Top-1 accuracy over uint8 ``images`` N×3×S×S, and per class."""
    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, len(images), 256):
            preds.append(model(images[i:i + 256].float() / 255).argmax(1))
    pred = torch.cat(preds)
    per_class = [float((pred[labels == k] == k).float().mean()) for k in range(len(model.labels))]
    return float((pred == labels).float().mean()), per_class


def train_signnet(options: SignNetTraining, world: TrainingWorld) -> tuple[SignNet, dict]:
    """Render the training and held-out sets (``world``: the attack's renderer, sampler and training
    backgrounds), train SignNet, and measure it on the held-out set.

    Returns the trained network (eval mode) and its metadata: labels, scenes, shape, held-out
    top-1 accuracy (overall and per class) and the training configuration, as ``signnet.json`` holds.
    """
    cfg = options
    torch.manual_seed(cfg.seed)
    names = list(SIGNS)
    labels = [SIGNS[n].class_name for n in names]
    sampler = world.sampler
    t0 = time.time()
    train_x, train_y = render_set(names, cfg.per_class, ViewSource(world.renderer, sampler, world.backgrounds),
                                  torch.Generator().manual_seed(cfg.seed), cfg.image_size, desc="train renders",
                                  fog=FogDraw(share=cfg.fog_share))
    test_bank = BackgroundBank(24, seed=HELDOUT_BACKGROUND_SEED)
    test_source = ViewSource(world.renderer, replace(sampler, background_count=len(test_bank)), test_bank)
    test_seed = cfg.seed + 10_000
    test_x, test_y = render_set(names, cfg.test_per_class, test_source, torch.Generator().manual_seed(test_seed),
                                cfg.image_size, presets=True, desc="held-out renders")
    fog_x, _ = render_set(names, cfg.test_per_class, test_source, torch.Generator().manual_seed(test_seed),
                          cfg.image_size, presets=True, desc="held-out renders in fog", fog=FogDraw(share=1.0))

    model = SignNet(labels, width=cfg.width)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=5e-4)
    per_epoch = len(train_x) // cfg.batch_size
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.epochs * per_epoch)
    g = torch.Generator().manual_seed(cfg.seed)
    bar = tqdm(total=cfg.epochs * per_epoch, desc="train", unit="step")
    for epoch in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=g)
        for i in range(per_epoch):
            idx = order[i * cfg.batch_size:(i + 1) * cfg.batch_size]
            loss = F.cross_entropy(model(train_x[idx].float() / 255), train_y[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}")
    bar.close()
    acc, per_class = evaluate(model, test_x, test_y)
    fog_acc, fog_per_class = evaluate(model, fog_x, test_y)
    meta = {
        "labels": labels, "scenes": names, "width": cfg.width, "input_size": model.input_size,
        "heldout_top1": acc, "heldout_per_class": dict(zip(labels, per_class)), "heldout_views": len(test_x),
        "heldout": f"background bank seed {HELDOUT_BACKGROUND_SEED} (24 images), lighting presets "
                   + ", ".join(LIGHTING_PRESETS),
        "heldout_fog_top1": fog_acc, "heldout_fog_per_class": dict(zip(labels, fog_per_class)),
        "heldout_fog": "the same views, each through fog (the sign's transmission 0.1-0.9, physattack.eot.fog)",
        "train": {**{f.name: getattr(cfg, f.name) for f in fields(SignNetTraining)},
                  "sampler": asdict(sampler), "background_seed": 0, "minutes": round((time.time() - t0) / 60, 1)},
        "torch": torch.__version__,
    }
    return model.eval(), meta
