"""One attack run from built parts: optimize, evaluate on the held-out grid, write and log outputs."""

from __future__ import annotations

import time
from pathlib import Path

import cv2
import torch

from physattack.attack.reprogram import ReprogramAttack
from physattack.config import RunConfig
from physattack.evaluate.detection import report_detection_attack
from physattack.evaluate.grid import evaluate_on_grid
from physattack.evaluate.report import write_run_outputs
from physattack.evaluate.reprogram import report_reprogram
from physattack.printing.export import ExportOptions, export_patch, free_folder


def run_attack(*, scene, victim, patch, attack, pipeline, sampler, eval_pipeline, grid, palette, tracker,
               run_dir: str | Path, run: RunConfig, colour_model=None, export: ExportOptions | None = None,
               heldout=None) -> dict:
    """Run ``attack`` on ``patch`` and return the metrics written to ``metrics.json``.

    ``colour_model`` prints the patch's texels inside the attack and in the held-out evaluation; the
    export bundle (``export/``: the patch on paper at true size) is written last, with ``export``'s options.
    ``heldout`` (``physattack.evaluate.protocol.HeldOutRun``) adds the full held-out protocol: per-condition
    tables, atlas, sanity flags, ``report.md``; its numbers go under ``heldout`` in ``metrics.json``.
    """
    run_dir = Path(run_dir)
    t0 = time.time()
    if isinstance(attack, ReprogramAttack):
        return run_reprogram(scene=scene, victim=victim, patch=patch, attack=attack, pipeline=pipeline,
                             sampler=sampler, eval_pipeline=eval_pipeline, grid=grid, palette=palette,
                             tracker=tracker, run_dir=run_dir, run=run, colour_model=colour_model, export=export)
    true_index = victim.label_index(scene.class_name)
    target_index = attack.label(victim, scene) if attack.targeted else None
    result = optimize(attack, patch=patch, scene=scene, pipeline=pipeline, sampler=sampler, victim=victim,
                      palette=palette, run_dir=run_dir, tracker=tracker, run=run, colour_model=colour_model)
    attack_seconds = time.time() - t0
    patch.load_state_dict(result.best_state)
    with torch.no_grad():
        adv_texture = patch.apply(scene.texture)
        printed = adv_texture if colour_model is None else colour_model.print_patch(adv_texture, patch.mask)
    if getattr(victim, "is_detector", False):     # detections, not labels: physattack/evaluate/detection.py
        metrics = report_detection_attack(
            scene=scene, victim=victim, patch=patch, attack=attack, result=result, adv_texture=adv_texture,
            eval_texture=printed, eval_pipeline=eval_pipeline, grid=grid, tracker=tracker, run_dir=run_dir, run=run,
            true_index=true_index, target_index=target_index, started=t0, attack_seconds=attack_seconds)
        export_patch(free_folder(run_dir / "export"), scene=scene, patch=patch, palette=palette,
                     colour_model=colour_model, options=export,
                     source={"run_dir": str(run_dir), "attack": metrics["attack"], "best_step": result.best_step})
        return metrics
    grid_result, clean_imgs, adv_imgs = evaluate_on_grid(
        scene, scene.texture, printed, eval_pipeline, victim, grid, true_index, target_index,
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
    paths["export"] = free_folder(run_dir / "export")           # a resumed run keeps the earlier bundle
    export_patch(paths["export"], scene=scene, patch=patch, palette=palette, colour_model=colour_model, options=export,
                 source={"run_dir": str(run_dir), "attack": summary["attack"], "best_step": result.best_step})
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
    if heldout is not None:          # the full held-out protocol: physattack/evaluate/protocol.py
        metrics.update(heldout.evaluate(scene=scene, victim=victim, adv_texture=printed, summary=summary,
                                        run_dir=run_dir, tracker=tracker, zero_grad_steps=result.zero_grad_steps,
                                        steps_done=result.steps_done, batch_size=run.eval_batch_size))
    return metrics


def optimize(attack, *, patch, scene, pipeline, sampler, victim, palette, run_dir, tracker, run: RunConfig,
             colour_model=None):
    """Run the attack's optimization with the run's seed and device switches."""
    torch.manual_seed(run.seed)
    return attack.run(patch=patch, scene=scene, pipeline=pipeline, sampler=sampler, victim=victim, palette=palette,
                      generator=torch.Generator().manual_seed(run.seed), run_dir=run_dir, tracker=tracker,
                      resume=run.resume, progress=run.progress, amp=run.amp, channels_last=run.channels_last,
                      colour_model=colour_model)


def run_reprogram(*, scene, victim, patch, attack, pipeline, sampler, eval_pipeline, grid, palette, tracker,
                  run_dir: Path, run: RunConfig, colour_model=None, export: ExportOptions | None = None) -> dict:
    """Train a reprogramming frame, evaluate it on held-out digits × held-out views, export it."""
    t0 = time.time()
    result = optimize(attack, patch=patch, scene=scene, pipeline=pipeline, sampler=sampler, victim=victim,
                      palette=palette, run_dir=run_dir, tracker=tracker, run=run, colour_model=colour_model)
    patch.load_state_dict(result.best_state)
    metrics = report_reprogram(scene=scene, patch=patch, victim=victim, attack=attack, result=result,
                               eval_pipeline=eval_pipeline, grid=grid, run_dir=run_dir, tracker=tracker,
                               batch_size=run.eval_batch_size, colour_model=colour_model, seconds=time.time() - t0)
    export_patch(free_folder(run_dir / "export"), scene=scene, patch=patch, palette=palette,
                 colour_model=colour_model, options=export,
                 source={"run_dir": str(run_dir), "attack": "reprogram", "best_step": result.best_step,
                         "label_map": metrics["label_map"]})     # which sign label means which digit
    return metrics
