"""One attack run from built parts: optimize, evaluate on the held-out grid, write and log outputs."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import torch

from physattack.config import RunConfig
from physattack.evaluate.grid import evaluate_on_grid
from physattack.evaluate.report import write_run_outputs


def run_attack(*, scene, victim, patch, attack, pipeline, sampler, eval_pipeline, grid, palette, tracker,
               run_dir: str | Path, run: RunConfig) -> dict:
    """Run ``attack`` on ``patch`` and return the metrics written to ``metrics.json``."""
    run_dir = Path(run_dir)
    t0 = time.time()
    true_index = victim.label_index(scene.class_name)
    target_index = attack.label(victim, scene) if attack.targeted else None
    generator = torch.Generator().manual_seed(run.seed)
    torch.manual_seed(run.seed)
    result = attack.run(patch=patch, scene=scene, pipeline=pipeline, sampler=sampler, victim=victim,
                        palette=palette, generator=generator, run_dir=run_dir, tracker=tracker,
                        resume=run.resume, progress=run.progress, amp=run.amp,
                        channels_last=run.channels_last)
    attack_seconds = time.time() - t0
    patch.load_state_dict(result.best_state)
    with torch.no_grad():
        adv_texture = patch.apply(scene.texture)
    grid_result, clean_imgs, adv_imgs = evaluate_on_grid(
        scene, scene.texture, adv_texture, eval_pipeline, victim, grid, true_index, target_index,
        batch_size=run.eval_batch_size, keep_images=run.gallery_views)
    summary = {
        "scene": scene.name, "true_label": scene.class_name, "true_index": true_index,
        "attack": f"{attack.objective} -> {attack.target}" if target_index is not None else "untargeted",
        "target_label": attack.target if target_index is not None else None, "target_index": target_index,
        "patch_type": type(patch).__name__, "patch_area_fraction": patch.area_fraction(scene.face_mask),
        "steps": attack.steps, "steps_done": result.steps_done, "best_step": result.best_step,
        "interrupted": result.interrupted, "zero_gradient_steps": result.zero_grad_steps,
        "batch_size": attack.batch_size, "seed": run.seed, "device": run.device,
        "attack_seconds": round(attack_seconds, 1), "total_seconds": round(time.time() - t0, 1),
        "protocol": "attack_success_rate counts held-out grid views whose clean render was classified "
                    "correctly (RP2); the unconditional rate counts all views",
    }
    paths = write_run_outputs(run_dir, patch=patch, adv_texture=adv_texture.cpu(), result=grid_result,
                              labels=victim.labels, clean_imgs=clean_imgs, adv_imgs=adv_imgs,
                              history=result.history, summary=summary)
    metrics = {**summary, **grid_result.metrics}
    flat = {"eval/clean_accuracy": metrics["clean_accuracy"]["rate"],
            "eval/attack_success_rate": metrics["attack_success_rate"]["rate"],
            "eval/attack_success_rate_unconditional": metrics["attack_success_rate_unconditional"]["rate"],
            "eval/patch_area_fraction": summary["patch_area_fraction"]}
    tracker.summary(flat)
    tracker.log(flat)
    images = {k: cv2.cvtColor(cv2.imread(str(paths[k]), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
              for k in ("views", "heatmap", "texture") if k in paths}
    tracker.log_images({f"eval/{k}": v for k, v in images.items()})
    tracker.log_table("eval/per_view", ["azimuth_deg", "distance_m", "lighting", "clean", "attacked"],
                      [[c["azimuth_deg"], c["distance_m"], c["lighting"], victim.labels[int(a)], victim.labels[int(b)]]
                       for c, a, b in zip(grid_result.conditions, grid_result.clean_pred, grid_result.adv_pred)])
    tracker.log_artifact(f"patch-{scene.name}", "patch", [paths["patch"], paths["texture"], paths["patch_state"]])
    return metrics
