"""Train the bundled SignNet on physattack's own renders: ``python -m physattack.victims.train``.

Every bundled sign scene is rendered through the EOT sampler's domain randomization (viewpoint,
light, camera effects, procedural backgrounds) as the crop a two-stage recognizer would see. The
held-out set uses a background bank made from another seed and the named lighting presets of the
evaluation grid, so its accuracy is measured on backgrounds and lighting the network never saw.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from tqdm import tqdm

from physattack.eot import LIGHTING_PRESETS, BackgroundBank, SceneParams, ViewPipeline, ViewSampler
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.scene.signs import SIGNS
from physattack.victims.signnet import SignNet, default_weights


@torch.no_grad()
def render_set(scene_names: list[str], per_class: int, sampler: ViewSampler, bank: BackgroundBank,
               generator: torch.Generator, image_size: int, presets: bool = False,
               desc: str = "render") -> tuple[torch.Tensor, torch.Tensor]:
    """Render ``per_class`` views of each scene; uint8 images N×3×S×S and labels N."""
    pipe = ViewPipeline(Renderer(), bank, (image_size, image_size), object_width_m=0.75)
    images, labels = [], []
    bar = tqdm(total=per_class * len(scene_names), desc=desc, unit="view")
    for label, name in enumerate(scene_names):
        scene = load_scene(name)
        for start in range(0, per_class, 64):
            n = min(64, per_class - start)
            params = sampler.sample(n, generator)
            if presets:
                params = _with_presets(params, generator)
            views = pipe(scene, scene.texture, params)
            images.append((views.images * 255).round().to(torch.uint8))
            labels.append(torch.full((n,), label))
            bar.update(n)
    bar.close()
    return torch.cat(images), torch.cat(labels)


def _with_presets(params: SceneParams, generator: torch.Generator) -> SceneParams:
    names = list(LIGHTING_PRESETS)
    pick = torch.randint(len(names), (len(params),), generator=generator)
    fields = {k: torch.tensor([LIGHTING_PRESETS[names[i]][k] for i in pick.tolist()]) for k in LIGHTING_PRESETS["noon"]}
    return replace(params, **fields)


def evaluate(model: SignNet, images: torch.Tensor, labels: torch.Tensor) -> tuple[float, list[float]]:
    model.eval()
    preds = []
    with torch.no_grad():
        for i in range(0, len(images), 256):
            preds.append(model(images[i:i + 256].float() / 255).argmax(1))
    pred = torch.cat(preds)
    per_class = [float((pred[labels == k] == k).float().mean()) for k in range(len(model.labels))]
    return float((pred == labels).float().mean()), per_class


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Train the bundled SignNet traffic-sign classifier on renders.")
    p.add_argument("--out", type=Path, default=default_weights(), help="weights file (.safetensors)")
    p.add_argument("--per-class", type=int, default=1500)
    p.add_argument("--test-per-class", type=int, default=250)
    p.add_argument("--epochs", type=int, default=14)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--image-size", type=int, default=96, help="render size; the net resizes to 64")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    if args.out.exists():
        backup = args.out.with_suffix(".safetensors.bak")
        args.out.replace(backup)
        print(f"kept the previous weights as {backup}")

    torch.manual_seed(args.seed)
    names = list(SIGNS)
    labels = [SIGNS[n].class_name for n in names]
    sampler = ViewSampler()
    t0 = time.time()
    train_x, train_y = render_set(names, args.per_class, sampler, BackgroundBank(sampler.background_count, seed=0),
                                  torch.Generator().manual_seed(args.seed), args.image_size, desc="train renders")
    test_bank = BackgroundBank(24, seed=7777)
    test_sampler = replace(sampler, background_count=len(test_bank))
    test_x, test_y = render_set(names, args.test_per_class, test_sampler, test_bank,
                                torch.Generator().manual_seed(args.seed + 10_000), args.image_size, presets=True,
                                desc="held-out renders")

    model = SignNet(labels, width=args.width)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=5e-4)
    steps = args.epochs * (len(train_x) // args.batch_size)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=steps)
    g = torch.Generator().manual_seed(args.seed)
    bar = tqdm(total=steps, desc="train", unit="step")
    for epoch in range(args.epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=g)
        for i in range(len(train_x) // args.batch_size):
            idx = order[i * args.batch_size:(i + 1) * args.batch_size]
            loss = F.cross_entropy(model(train_x[idx].float() / 255), train_y[idx], label_smoothing=0.05)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}")
    bar.close()
    acc, per_class = evaluate(model, test_x, test_y)
    print(f"held-out top-1: {acc:.4f} over {len(test_x)} renders; per class: "
          + ", ".join(f"{lab} {a:.3f}" for lab, a in zip(labels, per_class)))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(args.out))
    meta = {
        "labels": labels, "scenes": names, "width": args.width, "input_size": model.input_size,
        "heldout_top1": acc, "heldout_per_class": dict(zip(labels, per_class)), "heldout_views": len(test_x),
        "heldout": "background bank seed 7777 (24 images), lighting presets " + ", ".join(LIGHTING_PRESETS),
        "train": {**{k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
                  "sampler": asdict(sampler), "background_seed": 0, "minutes": round((time.time() - t0) / 60, 1)},
        "torch": torch.__version__,
    }
    args.out.with_suffix(".json").write_text(json.dumps(meta, indent=2))
    print(f"wrote {args.out} and {args.out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
