"""Peer baseline: physattack's 3D-EOT sticker attack against IBM ART's AdversarialPatchPyTorch (2D EOT).

Both attack the bundled SignNet (stop -> yield) with the same patch area on the sign face and the same
number of victim forward+backward passes; both are then judged on the same held-out 3D grid through
physattack's renderer (the protocol grid of conf/evaluation: held-out backgrounds, lighting presets,
camera-effect presets), RP2's way (success over clean-correct views) with Wilson intervals.

ART sees what a 2D patch attack sees: clean renders of the sign from the training distribution
(training backgrounds, seed 0), with its own 2D EOT — rotation, scale and perspective distortion —
and the patch placed anywhere on the sign (``mask`` = the sign's face in each image). Its square
patch is then stuck on the sign's face at the same share of the face as physattack's stickers, at
the face's centre, and rendered like any texture.

    pip install -e ".[art]"
    OMP_WAIT_POLICY=PASSIVE python benchmarks/art_baseline.py                       # runs both attacks
    OMP_WAIT_POLICY=PASSIVE python benchmarks/art_baseline.py --physattack-run outputs/<date>/<time>

``--physattack-run`` reuses a finished canonical run (its patch, wall time and pass count) instead of
running physattack's attack again.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
import torch

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline, ViewSampler
from physattack.evaluate.grid import Comparison
from physattack.evaluate.heldout import evaluate_heldout, heldout_metrics
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.victims import load_signnet

SIZE = 96


def protocol_grid(bank: BackgroundBank) -> EvalGrid:
    """The default protocol grid (conf/evaluation/default.yaml over conf/eot/default.yaml)."""
    return EvalGrid(camera_effects=["default", "defocus", "motion", "jpeg", "dim"], background_count=len(bank))


def physattack_patch(scene, victim, args) -> tuple[torch.Tensor, float, int, float]:
    """The canonical attack (conf defaults): attacked texture, wall seconds, victim passes, area fraction."""
    if args.physattack_run:
        from physattack.cli.runs import open_run
        folder = open_run(args.physattack_run)
        run, m = folder.rebuild(), folder.report.summary
        passes = (m["steps_done"] + run.cfg.attack.mask_search_steps * (run.cfg.patch.shape == "search")) * m["batch_size"]
        return run.adv_texture, float(m["attack_seconds"]), int(passes), float(m["patch_area_fraction"])
    from physattack.attack import AttackSetup, EOTAttack
    from physattack.config import RunConfig
    from physattack.patch import sticker_for_scene
    from physattack.printing import load_palette
    patch = sticker_for_scene(scene, shape="search", area=args.area)
    attack = EOTAttack(target="yield", steps=args.steps, batch_size=args.batch_size)
    bank = BackgroundBank(48, seed=0)
    t0 = time.time()
    setup = AttackSetup(scene=scene, patch=patch, victim=victim, pipeline=ViewPipeline(Renderer(), bank, (SIZE, SIZE)),
                        sampler=ViewSampler(background_count=len(bank)), palette=load_palette())
    result = attack.run(setup, RunConfig(seed=0, progress=False), args.out / "physattack")
    seconds = time.time() - t0
    patch.load_state_dict(result.best_state)
    with torch.no_grad():
        texture = patch.apply(scene.texture)
    passes = (result.steps_done + attack.mask_search_steps) * attack.batch_size
    return texture, seconds, passes, patch.area_fraction(scene.face_mask)


def art_patch(scene, victim, passes: int, area_fraction: float, args) -> tuple[torch.Tensor, float, dict]:
    """Train ART's AdversarialPatchPyTorch with ``passes`` victim passes; stick it on the face."""
    from art.attacks.evasion import AdversarialPatchPyTorch
    from art.estimators.classification import PyTorchClassifier

    bank = BackgroundBank(48, seed=0)
    sampler = ViewSampler(background_count=len(bank))
    pipe = ViewPipeline(Renderer(), bank, (SIZE, SIZE))
    with torch.no_grad():
        views = pipe(scene, scene.texture, sampler.sample(args.art_images, torch.Generator().manual_seed(0)))
    x = views.images.numpy().astype(np.float32)
    face = views.object_mask[:, 0].numpy() > 0.5
    face_px = float(np.median(face.reshape(len(face), -1).sum(1)))
    scale = math.sqrt(area_fraction * face_px) / SIZE            # square patch side / image side
    max_iter = max(1, round(passes / args.art_images))
    y = np.zeros((len(x), len(victim.labels)), np.float32)
    y[:, victim.label_index("yield")] = 1
    classifier = PyTorchClassifier(model=victim, loss=torch.nn.CrossEntropyLoss(), input_shape=(3, SIZE, SIZE),
                                   nb_classes=len(victim.labels), clip_values=(0.0, 1.0), channels_first=True)
    attack = AdversarialPatchPyTorch(classifier, rotation_max=22.5, scale_min=0.85 * scale, scale_max=1.15 * scale,
                                     distortion_scale_max=0.3, learning_rate=args.art_lr, max_iter=max_iter,
                                     batch_size=args.batch_size, patch_shape=(3, SIZE, SIZE), patch_type="square",
                                     optimizer="Adam", targeted=True, verbose=False)
    torch.manual_seed(0)
    np.random.seed(0)
    t0 = time.time()
    patch, _ = attack.generate(x=x, y=y, mask=face)
    seconds = time.time() - t0
    texture = stick_square(scene, torch.from_numpy(np.asarray(patch, np.float32)), area_fraction)
    with torch.no_grad():   # ART's own 2D view of its success, on its training images
        x_adv = attack.apply_patch(x, scale=scale, mask=face)
        own = float((victim(torch.from_numpy(x_adv).float()).argmax(1) == victim.label_index("yield")).float().mean())
    return texture, seconds, {"max_iter": max_iter, "images": len(x), "passes": max_iter * len(x), "scale": scale,
                              "art_2d_success_on_training_images": own}


def stick_square(scene, patch: torch.Tensor, area_fraction: float) -> torch.Tensor:
    """The square ``patch`` (3×P×P) on the face's centre, covering ``area_fraction`` of the face."""
    tex = scene.texture.clone()
    _, h, w = tex.shape
    side = int(round(math.sqrt(area_fraction * float(scene.face_mask.sum()))))
    small = torch.nn.functional.interpolate(patch[None], size=(side, side), mode="area")[0].clamp(0, 1)
    y0, x0 = (h - side) // 2, (w - side) // 2
    region = scene.face_mask[:, y0:y0 + side, x0:x0 + side]
    tex[:, y0:y0 + side, x0:x0 + side] = small * region + tex[:, y0:y0 + side, x0:x0 + side] * (1 - region)
    return tex


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--physattack-run", type=Path, default=None, help="a finished canonical run to reuse")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--batch-size", type=int, default=24)
    p.add_argument("--area", type=float, default=0.18)
    p.add_argument("--art-images", type=int, default=96, help="training renders ART cycles through")
    p.add_argument("--art-lr", type=float, default=0.05)
    p.add_argument("--out", type=Path, default=Path("outputs/art_baseline"))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.set_grad_enabled(True)

    scene, victim = load_scene("stop_sign"), load_signnet()
    phys_tex, phys_s, passes, area = physattack_patch(scene, victim, args)
    art_tex, art_s, art_info = art_patch(scene, victim, passes, area, args)

    eval_bank = BackgroundBank(24, seed=1000)
    grid = protocol_grid(eval_bank)
    held = ViewPipeline(Renderer(), eval_bank, (SIZE, SIZE))
    true_set, target_set = victim.label_set("stop"), victim.label_set("yield")
    rows = {}
    for name, tex in (("physattack", phys_tex), ("art", art_tex)):
        r = evaluate_heldout(Comparison(scene, scene.texture, tex, held), victim, grid, (true_set, target_set))
        rows[name] = heldout_metrics(r)
    from physattack.atomic import save_rgb_png
    save_rgb_png(args.out / "art_texture.png", art_tex)
    save_rgb_png(args.out / "physattack_texture.png", phys_tex)

    def fmt(r):
        return f"{r['rate']:6.1%} [{r['ci95'][0]:.1%}, {r['ci95'][1]:.1%}] ({r['count']}/{r['n']})"
    print(f"held-out grid: {len(grid)} views (azimuth x distance x lighting x camera effects, backgrounds seed 1000)")
    print(f"patch area: {area:.1%} of the face for both; victim passes: physattack {passes}, ART {art_info['passes']}")
    print(f"{'attack':<12}{'success (clean-correct views)':<38}{'success (all views)':<36}{'target conf':<13}wall s")
    for name, secs in (("physattack", phys_s), ("art", art_s)):
        m = rows[name]
        print(f"{name:<12}{fmt(m['attack_success_rate']):<38}{fmt(m['attack_success_rate_unconditional']):<36}"
              f"{m['mean_target_confidence']:<13.3f}{secs:.1f}")
    gap = rows["physattack"]["attack_success_rate"]["rate"] - rows["art"]["attack_success_rate"]["rate"]
    print(f"physattack - ART: {100 * gap:+.1f} points (goal: >= +30); clean accuracy "
          f"{rows['art']['clean_accuracy']['rate']:.1%}; ART's 2D success on its own training images "
          f"{art_info['art_2d_success_on_training_images']:.1%}")
    (args.out / "art_baseline.json").write_text(json.dumps(
        {"views": len(grid), "area_fraction": area, "passes": {"physattack": passes, "art": art_info["passes"]},
         "seconds": {"physattack": phys_s, "art": art_s}, "art": art_info,
         "heldout": {k: {kk: v[kk] for kk in ("clean_accuracy", "attack_success_rate",
                                               "attack_success_rate_unconditional", "mean_target_confidence")}
                     for k, v in rows.items()}}, indent=2))


if __name__ == "__main__":
    main()
