"""Detector evaluation: the clean and the attacked sign through the same held-out frames.

Per view (one sign, its ground-truth box from the renderer):

- **detected**: a detection of the sign's class with IoU ≥ 0.5 and score ≥ the victim's threshold;
- **disappeared**: detected clean, not detected attacked (reported over clean-detected views);
- **mislabelled**: detected clean; attacked, a detection of the target class with IoU ≥ 0.5 and score
  ≥ threshold, and none of the true class;
- **vanished**: attacked, no detection of *any* class with IoU ≥ 0.5 and score ≥ threshold.

AP@0.5 of the sign's class over the grid (all detections down to the model's own low threshold,
greedy matching in score order, all-point interpolated precision, as PASCAL VOC 2010+), clean and
attacked. Rates carry Wilson intervals as the classifier metrics do.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import matplotlib.pyplot as plt
import numpy as np
import torch
from torch import Tensor

from physattack.atomic import save_figure, save_rgb_png, save_text, save_torch
from physattack.evaluate.attacked import EvaluationSetup, FinishedAttack
from physattack.evaluate.grid import Comparison
from physattack.evaluate.metrics import rate
from physattack.evaluate.plots import success_heatmap, training_curves
from physattack.evaluate.report import save_patch_png
from physattack.run_report import RunReport
from physattack.victims.detection import Detections, best_scores_on_boxes, class_ap


def detection_metrics(clean_true: Tensor, adv_true: Tensor, adv_target: Tensor | None, adv_any: Tensor,
                      threshold: float, clean_ap: float, adv_ap: float) -> dict:
    """Rates over a grid from per-view best scores (of the true class clean and attacked, of the target
    class attacked, of any class attacked) on the sign's box."""
    clean_det, adv_det = clean_true >= threshold, adv_true >= threshold
    out = {
        "views": int(clean_true.numel()),
        "score_threshold": threshold,
        "detection_rate_clean": rate(clean_det),
        "detection_rate_attacked": rate(adv_det),
        "disappearance_rate": rate(~adv_det[clean_det]),
        "vanish_rate": rate((adv_any < threshold)[clean_det]),
        "ap50_clean": clean_ap,
        "ap50_attacked": adv_ap,
    }
    if adv_target is not None:
        out["mislabel_rate"] = rate(((adv_target >= threshold) & ~adv_det)[clean_det])
    return out


# -- the grid ---------------------------------------------------------------------------------------
@dataclass
class DetectionGridResult:
    """Per-view outcomes on the grid, in ``grid.conditions()`` order."""

    conditions: list[dict]
    gt_boxes: Tensor                  # V×4
    clean: list[Detections]
    attacked: list[Detections]
    clean_true: Tensor                # best true-class score on the sign's box, clean
    adv_true: Tensor
    adv_target: Tensor | None
    adv_any: Tensor
    metrics: dict


@torch.no_grad()
def evaluate_detection_on_grid(cmp: Comparison, victim, grid, labels: tuple[int, int | None], batch_size: int = 32,
                               keep_images: int = 0) -> tuple[DetectionGridResult, Tensor | None, Tensor | None]:
    """Detect on every grid frame with the clean and the attacked texture; ``labels``: the true label's
    index and the target's (None: not a mislabelling attack).

    Returns the result and (when ``keep_images``) that many clean and attacked frames picked evenly
    across the grid.
    """
    true_label, target_label = labels
    params = grid.params()
    gt, clean, adv = [], [], []
    for s in range(0, len(params), batch_size):
        c_views, a_views = cmp.views(params[s:s + batch_size])
        gt.append(c_views.boxes.cpu())
        clean += [_cpu(d) for d in victim(c_views.images).detections]
        adv += [_cpu(d) for d in victim(a_views.images).detections]
    gt_boxes = torch.cat(gt)
    one = torch.tensor([true_label])
    clean_true = best_scores_on_boxes(clean, gt_boxes, true_label)
    adv_true, adv_any = best_scores_on_boxes(adv, gt_boxes, true_label), best_scores_on_boxes(adv, gt_boxes)
    adv_target = best_scores_on_boxes(adv, gt_boxes, target_label) if target_label is not None else None
    visible = [(b[2:] > b[:2]).all() for b in gt_boxes]
    gts = [b[None] if v else torch.zeros(0, 4) for b, v in zip(gt_boxes, visible)]
    gls = [one if v else torch.zeros(0, dtype=torch.long) for v in visible]
    metrics = detection_metrics(clean_true, adv_true, adv_target, adv_any, victim.score_threshold,
                                class_ap(clean, gts, gls, true_label), class_ap(adv, gts, gls, true_label))
    result = DetectionGridResult(grid.conditions(), gt_boxes, clean, adv, clean_true, adv_true, adv_target,
                                 adv_any, metrics)
    if not keep_images:
        return result, None, None
    pick = torch.linspace(0, len(params) - 1, keep_images).round().long()
    c_views, a_views = cmp.views(params[pick])
    return result, c_views.images.cpu(), a_views.images.cpu()


def _cpu(d: Detections) -> Detections:
    return Detections(d.boxes.detach().cpu(), d.scores.detach().cpu(), d.labels.detach().cpu())


# -- pictures ---------------------------------------------------------------------------------------
def draw_detections(image: Tensor, det: Detections, labels: tuple[str, ...], threshold: float,
                    gt_box: Tensor | None = None, highlight: int | None = None, scale: int = 2) -> np.ndarray:
    """One frame with its ground-truth box (thin white) and its detections ≥ ``threshold`` (green for
    ``highlight``, the sign's true class; orange for any other), each labelled; H×W×3 uint8 RGB."""
    img = (image.clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
    img = np.ascontiguousarray(cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_NEAREST))
    if gt_box is not None and float((gt_box[2:] - gt_box[:2]).min()) > 0:
        x0, y0, x1, y1 = (int(round(float(v) * scale)) for v in gt_box)
        cv2.rectangle(img, (x0, y0), (x1, y1), (255, 255, 255), 1, cv2.LINE_AA)
    shown = det.above(threshold)
    for box, score, lab in zip(shown.boxes.tolist(), shown.scores.tolist(), shown.labels.tolist()):
        colour = (40, 220, 60) if lab == highlight else (255, 140, 0)
        x0, y0, x1, y1 = (int(round(v * scale)) for v in box)
        cv2.rectangle(img, (x0, y0), (x1, y1), colour, 2, cv2.LINE_AA)
        text = f"{labels[lab][:14]} {score:.2f}"
        (tw, th), _ = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.38, 1)
        ty = max(th + 2, y0 - 2)
        cv2.rectangle(img, (x0, ty - th - 2), (x0 + tw + 2, ty + 2), colour, -1)
        cv2.putText(img, text, (x0 + 1, ty), cv2.FONT_HERSHEY_SIMPLEX, 0.38, (0, 0, 0), 1, cv2.LINE_AA)
    return img


def detections_gallery(images: tuple[Tensor, Tensor], detections: tuple[list[Detections], list[Detections]],
                       gt_boxes: Tensor, labels: tuple[str, ...], threshold: float, true_label: int,
                       columns: int = 6) -> np.ndarray:
    """Clean frames above their attacked twins (``images``: clean, attacked), their detections (clean,
    attacked) drawn; H×W×3 uint8 RGB."""
    (clean, attacked), (clean_det, adv_det) = images, detections
    tiles = []
    for img_c, img_a, dc, da, gb in zip(clean, attacked, clean_det, adv_det, gt_boxes):
        pair = [draw_detections(img_c, dc, labels, threshold, gb, true_label),
                draw_detections(img_a, da, labels, threshold, gb, true_label)]
        tiles.append(cv2.copyMakeBorder(np.concatenate(pair, 0), 2, 2, 2, 2, cv2.BORDER_CONSTANT, value=(0, 0, 0)))
    while len(tiles) % columns:
        tiles.append(np.zeros_like(tiles[0]))
    return np.concatenate([np.concatenate(tiles[i:i + columns], 1) for i in range(0, len(tiles), columns)], 0)


# -- a whole run's report ---------------------------------------------------------------------------
def report_detection_attack(done: FinishedAttack, setup: EvaluationSetup) -> RunReport:
    """Judge a finished detector attack on the held-out frames, write its outputs into ``setup.run_dir`` and
    log them; returns the run report (the command adds the drives and the headline).

    The held-out frames show ``done.eval_texture`` (the texture as printed, when a colour model prints
    it). ``setup.protocol`` (``{name: Member}``, attacked and held out; ``physattack.cli.build.
    protocol_members``) are scored on the same frames after the attack (``physattack.evaluate.detectors``):
    the table goes under ``heldout.detectors``, into ``report.md`` and to the tracker. ``done.victim_names``
    (the attacked detectors' names) go into the report and the headline."""
    from physattack.evaluate.detectors import evaluate_detectors, log_detectors
    from physattack.evaluate.heldout_report import victim_axes, victims_conditions_figure

    scene, victim, patch, attack, result, run = done.scene, done.victim, done.patch, done.attack, done.result, setup.run
    run_dir, tracker, detectors = Path(setup.run_dir), setup.tracker, setup.protocol
    adv_texture = done.adv_texture
    true_index = victim.label_index(scene.class_name)
    target_index = attack.label(victim, scene) if attack.targeted else None
    cmp = Comparison(scene, scene.texture, done.eval_texture, setup.pipeline)
    grid_result, clean_imgs, adv_imgs = evaluate_detection_on_grid(
        cmp, victim, setup.grid, (true_index, target_index), batch_size=run.eval_batch_size,
        keep_images=run.gallery_views)
    m = grid_result.metrics
    threshold = victim.score_threshold
    success_key = "mislabel_rate" if target_index is not None else "disappearance_rate"
    summary = {
        "scene": scene.name, "true_label": victim.labels[true_index], "true_index": true_index,
        "attack": f"{attack.objective} -> {attack.target}" if target_index is not None else attack.objective,
        "target_label": victim.labels[target_index] if target_index is not None else None,
        "target_index": target_index, "victim": type(victim).__name__, "victim_names": list(done.victim_names),
        "patch_type": type(patch).__name__, "patch_area_fraction": patch.area_fraction(scene.face_mask),
        "steps": attack.steps, "steps_done": result.steps_done, "best_step": result.best_step,
        **done.stopped(), "zero_gradient_steps": result.zero_grad_steps,
        **({"restarts": result.restarts} if result.restarts else {}),     # attack.restarts: the starts tried
        "batch_size": attack.batch_size, "seed": run.seed, "device": run.device,
        "attack_seconds": round(done.attack_seconds, 1),
        "attack_success_rate": m[success_key],
        "protocol": "detected = a detection of the true class with IoU >= 0.5 and score >= score_threshold; "
                    "disappearance, vanish and mislabel rates count held-out frames whose clean sign was detected",
    }
    out = {"patch": save_patch_png(run_dir / "patch.png", patch.colors(), patch.mask),
           "texture": save_rgb_png(run_dir / "texture.png", adv_texture.cpu())}
    save_torch(run_dir / "patch.pt", {"patch": patch.state_dict()})
    if clean_imgs is not None:
        pick = torch.linspace(0, len(grid_result.conditions) - 1, len(clean_imgs)).round().long().tolist()
        gallery = detections_gallery((clean_imgs, adv_imgs), ([grid_result.clean[i] for i in pick],
                                                               [grid_result.attacked[i] for i in pick]),
                                     grid_result.gt_boxes[pick], victim.labels, threshold, true_index)
        out["views"] = save_rgb_png(run_dir / "views.png", gallery)
    clean_det = grid_result.clean_true >= threshold
    success = grid_result.adv_true < threshold
    if target_index is not None:
        success &= grid_result.adv_target >= threshold
    fig = success_heatmap(grid_result.conditions, success.float(), clean_det.float(),
                          f"{summary['attack']} success on held-out frames (clean-detected frames only)")
    out["heatmap"] = save_figure(run_dir / "heatmap.png", fig)
    plt.close(fig)
    fig = success_heatmap(grid_result.conditions, clean_det.float(), torch.ones_like(clean_det, dtype=torch.float),
                          f"clean {summary['true_label']} detection rate on held-out frames")
    out["clean_heatmap"] = save_figure(run_dir / "clean_heatmap.png", fig)
    plt.close(fig)
    if result.history:
        fig = training_curves(result.history)
        out["training"] = save_figure(run_dir / "training.png", fig)
        plt.close(fig)
    per_view = [{**c, "gt_box": b.tolist(), "clean_score": float(ct), "attacked_score": float(at),
                 "attacked_any_class_score": float(aa),
                 **({"attacked_target_score": float(grid_result.adv_target[i])} if target_index is not None else {})}
                for i, (c, b, ct, at, aa) in enumerate(zip(grid_result.conditions, grid_result.gt_boxes,
                                                           grid_result.clean_true, grid_result.adv_true,
                                                           grid_result.adv_any))]
    heldout = None
    if detectors and not result.interrupted:
        table = evaluate_detectors(scene, scene.texture, done.eval_texture, setup.pipeline, setup.grid, detectors,
                                   batch_size=run.eval_batch_size)
        log_detectors(tracker, table)
        heldout = {"detectors": table}
        if victim_axes(table):
            fig = victims_conditions_figure(table, f"{summary['attack']}: each detector's {summary['true_label']} "
                                                   "detection rate on the attacked held-out frames",
                                            key="detection_rate_attacked", label="detection rate")
            out["heldout_detectors"] = save_figure(run_dir / "heldout_detectors.png", fig)
            plt.close(fig)
    summary["total_seconds"] = done.elapsed()
    metrics = {**summary, **m, **({"heldout": heldout} if heldout else {})}
    out["report"] = save_text(run_dir / "report.md", detection_report(metrics, heldout, out))
    report = RunReport("detector", summary={**summary, **m}, per_view=per_view, heldout=heldout,
                       report=str(out["report"]))
    flat = {"eval/detection_rate_clean": m["detection_rate_clean"]["rate"],
            "eval/detection_rate_attacked": m["detection_rate_attacked"]["rate"],
            "eval/disappearance_rate": m["disappearance_rate"]["rate"], "eval/vanish_rate": m["vanish_rate"]["rate"],
            "eval/ap50_clean": m["ap50_clean"], "eval/ap50_attacked": m["ap50_attacked"],
            "eval/patch_area_fraction": summary["patch_area_fraction"]}
    if "mislabel_rate" in m:
        flat["eval/mislabel_rate"] = m["mislabel_rate"]["rate"]
    tracker.summary(flat)
    tracker.log(flat)
    images = {k: cv2.cvtColor(cv2.imread(str(out[k]), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
              for k in ("views", "heatmap", "clean_heatmap", "heldout_detectors", "texture") if k in out}
    tracker.log_images({f"eval/{k}": v for k, v in images.items()})
    tracker.log_table("eval/per_view", ["azimuth_deg", "distance_m", "lighting", "clean_score", "attacked_score"],
                      [[c["azimuth_deg"], c["distance_m"], c["lighting"], float(a), float(b)]
                       for c, a, b in zip(grid_result.conditions, grid_result.clean_true, grid_result.adv_true)])
    tracker.log_artifact(f"patch-{scene.name}", "patch", [out["patch"], out["texture"], run_dir / "patch.pt"])
    return report


def detection_report(metrics: dict, heldout: dict | None, files: dict) -> str:
    """``report.md`` of a detector attack: its headline on the held-out frames, the rates, and the
    detectors table (when the run scored one)."""
    from physattack.evaluate.detectors import detectors_markdown
    from physattack.evaluate.heldout_report import victims_conditions_markdown

    def cell(r: dict) -> str:
        return f"{r['rate']:.1%} (95% CI {r['ci95'][0]:.1%}-{r['ci95'][1]:.1%}, {r['count']}/{r['n']})" if r["n"] else "n/a"

    lines = [f"# {metrics['attack']} on {metrics['scene']}", "", headline(metrics), "",
             f"Held-out frames: {metrics['views']} (the attack's frame grid; never sampled by the optimizer). "
             + metrics["protocol"] + "."
             + (" The victim is an ensemble: these rates are its first member's; the detectors table below scores "
                "every member." if metrics.get("victim") == "Ensemble" else ""), "", "| rate | value |", "|---|---|"]
    for key in ("detection_rate_clean", "detection_rate_attacked", "disappearance_rate", "vanish_rate",
                "mislabel_rate"):
        if key in metrics:
            lines.append(f"| {key.replace('_', ' ')} | {cell(metrics[key])} |")
    lines += [f"| AP@0.5 clean -> attacked | {metrics['ap50_clean']:.3f} -> {metrics['ap50_attacked']:.3f} |", ""]
    if heldout:
        lines.append(detectors_markdown(heldout["detectors"]))
        lines += victims_conditions_markdown(heldout["detectors"], key="detection_rate_attacked",
                                             intro="Each detector's detection rate of the attacked sign per grid "
                                                   "value (lower: the patch hides it better there)",
                                             figure="heldout_detectors.png", heading="Detectors by condition")
    shown = [k for k in ("views", "heatmap", "clean_heatmap", "heldout_detectors", "texture") if k in files]
    lines += [f"![{k}]({Path(files[k]).name})" for k in shown]
    return "\n".join(lines) + "\n"


def headline(metrics: dict, fitted: str | None = None) -> str:
    """One line for the terminal: detection clean -> attacked, the objective's success, AP, area; the
    detectors the patch was fitted to (``fitted``, when given, says it instead: a query run's access) and how
    the held-out ones (``heldout.detectors``) read it."""
    c, a, s = metrics["detection_rate_clean"], metrics["detection_rate_attacked"], metrics["attack_success_rate"]
    names = list(metrics.get("victim_names") or [])
    table = (metrics.get("heldout") or {}).get("detectors") or {}
    rows = table.get("members") or {}
    who = f" on {names[0]}" if names else ""
    if len(names) > 1:
        attacked = {n: rows[n]["detection_rate_attacked"]["rate"] for n in names if n in rows}
        rates = "/".join(f"{attacked[n]:.1%}".rstrip("%") for n in attacked)
        who = (f", fitted to {'+'.join(names)} (" + (f"attacked detection {rates}%; " if attacked else "")
               + f"the rates that follow are {names[0]}'s, the first; every detector is on the detectors line)")
    elif names:
        who = f" on {names[0]}, fitted to it"
    if fitted:
        who = f", {fitted}"
    return (f"{metrics['attack']}{who}: held-out {metrics['true_label']} detection rate {c['rate']:.1%} clean -> "
            f"{a['rate']:.1%} attacked (of {c['n']} frames, score >= {metrics['score_threshold']:g}); success "
            f"{s['rate']:.1%} (95% CI {s['ci95'][0]:.1%}-{s['ci95'][1]:.1%}, {s['count']}/{s['n']} clean-detected "
            f"frames); AP@0.5 {metrics['ap50_clean']:.3f} -> {metrics['ap50_attacked']:.3f}; "
            f"{not_fitted_detectors(table)}; patch covers {metrics['patch_area_fraction']:.1%} of the face.")


def not_fitted_detectors(table: dict) -> str:
    """How the held-out detectors of a detectors table read the patch, in words."""
    mean = table.get("held_out_mean") or {}
    if mean.get("detection_rate_attacked") is None:
        return ("not fitted to: no held-out detector scored, so this is a white-box figure only "
                "(name held-out detectors in evaluation.detectors)")
    k = len(mean["victims"])
    return (f"not fitted to: {k} held-out detector{'' if k == 1 else 's'} ({', '.join(mean['victims'])}) "
            f"detect{'s' if k == 1 else ''} it {mean['detection_rate_clean']:.1%} clean -> "
            f"{mean['detection_rate_attacked']:.1%} attacked")