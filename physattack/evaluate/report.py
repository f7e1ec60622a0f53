"""Write what a run leaves for people: patch, textured sign, pictures, metrics."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch

from physattack.atomic import save_figure, save_json, save_png, save_rgb_png, save_torch
from physattack.evaluate.grid import GridResult
from physattack.evaluate.plots import success_heatmap, training_curves, views_gallery


def save_patch_png(path: Path, colors: torch.Tensor, mask: torch.Tensor) -> Path:
    """The patch in texture space as RGBA: its colours where it lives, transparent elsewhere."""
    rgb = (colors.detach().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
    alpha = (mask[0].detach().cpu().numpy() * 255).round().astype(np.uint8)
    return save_png(path, np.concatenate([rgb, alpha[..., None]], axis=2))


def write_run_outputs(run_dir: Path, *, patch, adv_texture, result: GridResult, labels: tuple[str, ...],
                      clean_imgs, adv_imgs, history: list[dict], summary: dict) -> dict[str, Path]:
    """Write every output of an attack run into ``run_dir``; returns name -> path."""
    run_dir.mkdir(parents=True, exist_ok=True)
    out = {
        "patch": save_patch_png(run_dir / "patch.png", patch.colors(), patch.mask),
        "texture": save_rgb_png(run_dir / "texture.png", adv_texture),
    }
    save_torch(run_dir / "patch.pt", {"patch": patch.state_dict()})
    out["patch_state"] = run_dir / "patch.pt"
    if clean_imgs is not None:
        pick = torch.linspace(0, len(result.conditions) - 1, len(clean_imgs)).round().long()
        lab = lambda probs: [f"{labels[int(p.argmax())]} {float(p.max()):.2f}" for p in probs]  # noqa: E731
        gallery = views_gallery(clean_imgs, adv_imgs, lab(result.clean_probs[pick]), lab(result.adv_probs[pick]))
        out["views"] = save_rgb_png(run_dir / "views.png", gallery)
    success = (result.adv_pred == summary["target_index"]) if summary.get("target_index") is not None \
        else (result.adv_pred != summary["true_index"])
    valid = result.clean_pred == summary["true_index"]
    fig = success_heatmap(result.conditions, success.float(), valid.float(),
                          f"{summary['attack']} success on held-out views (clean-correct views only)")
    out["heatmap"] = save_figure(run_dir / "heatmap.png", fig)
    plt.close(fig)
    if history:
        fig = training_curves(history)
        out["training"] = save_figure(run_dir / "training.png", fig)
        plt.close(fig)
    per_view = [{**c, "clean": labels[int(cp)], "attacked": labels[int(ap)],
                 "attacked_confidence": float(pr.max()), "patch_visible_share": float(v)}
                for c, cp, ap, pr, v in zip(result.conditions, result.clean_pred, result.adv_pred,
                                            result.adv_probs, result.patch_visible)]
    out["metrics"] = save_json(run_dir / "metrics.json", {**summary, **result.metrics, "per_view": per_view})
    return out
