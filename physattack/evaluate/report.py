"""A classifier attack's report: the quick grid, what the run leaves for people (patch, textured sign,
pictures), the held-out protocol, the run report's sections."""

from __future__ import annotations

from pathlib import Path

import cv2
import matplotlib.pyplot as plt
import numpy as np
import torch

from physattack.atomic import save_figure, save_png, save_rgb_png, save_torch
from physattack.evaluate.attacked import EvaluationSetup, FinishedAttack
from physattack.evaluate.grid import Comparison, GridResult, evaluate_on_grid
from physattack.evaluate.plots import success_heatmap, training_curves, views_gallery
from physattack.evaluate.protocol import JudgedPatch, RunFacts
from physattack.run_report import RunReport


def save_patch_png(path: Path, colors: torch.Tensor, mask: torch.Tensor) -> Path:
    """The patch in texture space as RGBA: its colours where it lives, transparent elsewhere."""
    rgb = (colors.detach().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
    alpha = (mask[0].detach().cpu().numpy() * 255).round().astype(np.uint8)
    return save_png(path, np.concatenate([rgb, alpha[..., None]], axis=2))


def write_run_outputs(run_dir: Path, done: FinishedAttack, result: GridResult, gallery: tuple, summary: dict
                      ) -> tuple[dict[str, Path], list[dict]]:
    """Write the pictures and files of a classifier attack run into ``run_dir`` (the patch, the attacked
    texture, ``patch.pt``, the views gallery from ``gallery`` = (clean, attacked) images or (None, None),
    the success heatmap and the training curves); returns name -> path, and the grid's per-view rows."""
    run_dir.mkdir(parents=True, exist_ok=True)
    patch, labels = done.patch, done.victim.labels
    out = {
        "patch": save_patch_png(run_dir / "patch.png", patch.colors(), patch.mask),
        "texture": save_rgb_png(run_dir / "texture.png", done.adv_texture.cpu()),
    }
    save_torch(run_dir / "patch.pt", {"patch": patch.state_dict()})
    out["patch_state"] = run_dir / "patch.pt"
    clean_imgs, adv_imgs = gallery
    if clean_imgs is not None:
        pick = torch.linspace(0, len(result.conditions) - 1, len(clean_imgs)).round().long()
        lab = lambda probs: [f"{labels[int(p.argmax())]} {float(p.max()):.2f}" for p in probs]  # noqa: E731
        views = views_gallery(clean_imgs, adv_imgs, lab(result.clean_probs[pick]), lab(result.adv_probs[pick]))
        out["views"] = save_rgb_png(run_dir / "views.png", views)
    success = (result.adv_pred == summary["target_index"]) if summary.get("target_index") is not None \
        else (result.adv_pred != summary["true_index"])
    valid = result.clean_pred == summary["true_index"]
    fig = success_heatmap(result.conditions, success.float(), valid.float(),
                          f"{summary['attack']} success on held-out views (clean-correct views only)")
    out["heatmap"] = save_figure(run_dir / "heatmap.png", fig)
    plt.close(fig)
    if done.result.history:
        fig = training_curves(done.result.history)
        out["training"] = save_figure(run_dir / "training.png", fig)
        plt.close(fig)
    per_view = [{**c, "clean": labels[int(cp)], "attacked": labels[int(ap)],
                 "attacked_confidence": float(pr.max()), "patch_visible_share": float(v)}
                for c, cp, ap, pr, v in zip(result.conditions, result.clean_pred, result.adv_pred,
                                            result.adv_probs, result.patch_visible)]
    return out, per_view


def report_classifier_attack(done: FinishedAttack, setup: EvaluationSetup) -> RunReport:
    """Judge a finished classifier attack: the quick grid, the run's pictures and files, the print bundle,
    then the held-out protocol (``setup.protocol``, a ``protocol.HeldOutRun``) unless the run was
    interrupted; log it all. Returns the run report (the command adds the drives and the headline)."""
    scene, victim, attack, result, run = done.scene, done.victim, done.attack, done.result, setup.run
    true_index = victim.label_index(scene.class_name)
    target_index = attack.label(victim, scene) if attack.targeted else None
    grid_result, clean_imgs, adv_imgs = evaluate_on_grid(
        Comparison(scene, scene.texture, done.eval_texture, setup.pipeline), victim, setup.grid,
        (true_index, target_index), batch_size=run.eval_batch_size, keep_images=run.gallery_views)
    summary = {
        "scene": scene.name, "true_label": scene.class_name, "true_index": true_index,
        "attack": f"{attack.objective} -> {attack.target}" if target_index is not None else "untargeted",
        "target_label": attack.target if target_index is not None else None, "target_index": target_index,
        "victim_names": done.victim_names,
        "patch_type": type(done.patch).__name__, "patch_area_fraction": done.patch.area_fraction(scene.face_mask),
        "steps": attack.steps, "steps_done": result.steps_done, "best_step": result.best_step,
        **done.stopped(), "zero_gradient_steps": result.zero_grad_steps,
        **({"restarts": result.restarts} if result.restarts else {}),     # attack.restarts: the starts tried
        "batch_size": attack.batch_size, "seed": run.seed, "device": run.device,
        "attack_seconds": round(done.attack_seconds, 1), "total_seconds": done.elapsed(),
        "protocol": "attack_success_rate counts held-out grid views whose clean render was classified "
                    "correctly (RP2); the unconditional rate counts all views",
    }
    if done.init is not None:
        summary["init"] = done.init
    paths, per_view = write_run_outputs(setup.run_dir, done, grid_result, (clean_imgs, adv_imgs), summary)
    setup.export({"attack": summary["attack"]})
    report = RunReport("classifier", summary={**summary, **grid_result.metrics}, per_view=per_view)
    log_classifier_run(setup.tracker, report.summary, paths, grid_result, (victim.labels, scene.name))
    if setup.protocol is not None and not result.interrupted:     # the full held-out protocol (evaluate/protocol.py)
        report.add(**setup.protocol.evaluate(JudgedPatch(scene, victim, done.eval_texture, summary),
                                             RunFacts(setup.run_dir, setup.tracker, result.zero_grad_steps,
                                                      result.steps_done, run.eval_batch_size)))
    return report


def log_classifier_run(tracker, metrics: dict, paths: dict, grid_result: GridResult, names: tuple) -> None:
    """The quick grid's figures, pictures and per-view table, and the patch as an artifact (``names``: the
    victim's labels and the scene's name)."""
    labels, scene_name = names
    flat = {"eval/clean_accuracy": metrics["clean_accuracy"]["rate"],
            "eval/attack_success_rate": metrics["attack_success_rate"]["rate"],
            "eval/attack_success_rate_unconditional": metrics["attack_success_rate_unconditional"]["rate"],
            "eval/patch_area_fraction": metrics["patch_area_fraction"]}
    tracker.summary(flat)
    tracker.log(flat)
    images = {k: cv2.cvtColor(cv2.imread(str(paths[k]), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
              for k in ("views", "heatmap", "texture") if k in paths}
    tracker.log_images({f"eval/{k}": v for k, v in images.items()})
    tracker.log_table("eval/per_view", ["azimuth_deg", "distance_m", "lighting", "clean", "attacked"],
                      [[c["azimuth_deg"], c["distance_m"], c["lighting"], labels[int(a)], labels[int(b)]]
                       for c, a, b in zip(grid_result.conditions, grid_result.clean_pred, grid_result.adv_pred)])
    tracker.log_artifact(f"patch-{scene_name}", "patch", [paths["patch"], paths["texture"], paths["patch_state"]])
