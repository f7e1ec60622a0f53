"""Transfer for detector attacks: the final patch on the attacked detectors and on held-out detectors.

The detector counterpart of ``physattack.evaluate.members`` (which covers classifiers). After a
detector attack (``attack=hide`` or ``mislabel``) every detector of ``evaluation.detectors`` is scored
on the attack's held-out frame grid: those the attack used as **attacked** (each member of a detector
ensemble on its own), every other as **held out** — built before the attack and never called while
the patch was optimized. Each grid batch is rendered once, clean and attacked, and handed to every
detector, which resizes the frames to its own input size.

Per detector, with its own label for the scene's class and its own operating threshold (a detection of
that class with IoU >= 0.5 on the sign's box and score >= threshold, as ``physattack.evaluate.detection``
counts it): the clean and the attacked detection rate, and the disappearance rate over the frames it
detected clean, each a rate with a 95 % Wilson interval.

A detector is **skipped**, with the reason recorded, when it is a classifier or its labels lack the
scene's class.

``detectors_table`` returns what ``metrics.json`` holds under ``heldout.detectors``::

    {"members": {name: {"role", "label", "score_threshold", "input_size", "views", "detection_rate_clean",
                        "detection_rate_attacked", "disappearance_rate",
                        "per_condition": {axis: [{"value", "views", "detection_rate_clean", ...}]}}},
     "skipped": {name: {"role", "reason"}},
     "held_out_mean": {"victims", "detection_rate_clean", "detection_rate_attacked", "disappearance_rate"},
     "scope": "detector victims"}

``held_out_mean`` averages the rates over the held-out detectors (each weighs the same; the
disappearance rate over those that detected the clean sign at least once); None when there is none.
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import Tensor

from physattack.evaluate.heldout import condition_masks
from physattack.evaluate.members import ATTACKED, HELD_OUT, Member, per_condition_rows
from physattack.evaluate.metrics import rate
from physattack.victims.base import VictimError
from physattack.victims.detection import Detections, best_scores_on_boxes

SCOPE = "detector victims"


def scene_label(detector, scene_class: str) -> int | str:
    """The detector's label index of ``scene_class``, or the reason it cannot be scored (a sentence)."""
    if not getattr(detector, "is_detector", False):
        return f"a classifier; the detectors table covers {SCOPE} only"
    try:
        return detector.label_index(scene_class)
    except VictimError:
        return f"its labels lack the scene's class '{scene_class}'"


@torch.no_grad()
def detect_views(scene, clean_texture: Tensor, adv_texture: Tensor, pipeline, params, detectors: Sequence,
                 batch_size: int = 32) -> tuple[list[tuple[list[Detections], list[Detections]]], Tensor]:
    """Render each batch of ``params`` once with the clean and once with the attacked texture and detect
    on both with every detector (one after another: peak memory stays near one detector's).

    Returns:
        per detector, its clean and attacked detections (CPU), and the sign's boxes V×4.
    """
    clean = [[] for _ in detectors]
    attacked = [[] for _ in detectors]
    boxes = []
    for s in range(0, len(params), batch_size):
        p = params[s:s + batch_size]
        c_views = pipeline(scene, clean_texture, p)
        a_views = pipeline(scene, adv_texture, p)
        boxes.append(c_views.boxes.cpu())
        for k, det in enumerate(detectors):
            clean[k] += [_cpu(d) for d in det(c_views.images).detections]
            attacked[k] += [_cpu(d) for d in det(a_views.images).detections]
    return list(zip(clean, attacked)), torch.cat(boxes)


def _cpu(d: Detections) -> Detections:
    return Detections(d.boxes.detach().cpu(), d.scores.detach().cpu(), d.labels.detach().cpu())


def detector_rates(clean_true: Tensor, adv_true: Tensor, threshold: float) -> dict:
    """Clean and attacked detection rates and the disappearance rate, from per-view best scores of the
    sign's class on its box."""
    clean_det, adv_det = clean_true >= threshold, adv_true >= threshold
    return {"views": int(clean_true.numel()), "detection_rate_clean": rate(clean_det),
            "detection_rate_attacked": rate(adv_det), "disappearance_rate": rate(~adv_det[clean_det])}


def detector_conditions(clean_true: Tensor, adv_true: Tensor, threshold: float, conditions: list[dict]
                        ) -> dict[str, list[dict]]:
    """``detector_rates`` per value of every grid axis with more than one value (``conditions``: the
    grid's, in frame order)."""
    return {axis: [{"value": v, **detector_rates(clean_true[keep], adv_true[keep], threshold)} for v, keep in groups]
            for axis, groups in condition_masks(conditions).items()}


def detectors_table(rows: dict[str, dict], members: dict[str, Member], skipped: dict[str, str]) -> dict:
    """The ``heldout.detectors`` entry of ``metrics.json`` (see the module docstring)."""
    held = [n for n, r in rows.items() if r["role"] == HELD_OUT]
    defined = [n for n in held if rows[n]["disappearance_rate"]["n"]]

    def mean(names, key):
        return sum(rows[n][key]["rate"] for n in names) / len(names) if names else None

    return {
        "members": rows,
        "skipped": {name: {"role": members[name].role, "reason": reason} for name, reason in skipped.items()},
        "held_out_mean": {"victims": held, "detection_rate_clean": mean(held, "detection_rate_clean"),
                          "detection_rate_attacked": mean(held, "detection_rate_attacked"),
                          "disappearance_rate": mean(defined, "disappearance_rate")},
        "scope": SCOPE,
    }


@torch.no_grad()
def evaluate_detectors(scene, clean_texture: Tensor, adv_texture: Tensor, pipeline, grid,
                       members: dict[str, Member], batch_size: int = 32) -> dict:
    """The detectors table of ``adv_texture`` on ``grid``.

    Args:
        pipeline: the held-out view pipeline, ``(scene, texture, params) -> RenderedViews`` with boxes.
        grid: the attack's held-out frame grid (``FrameGrid``: ``params()``).
        members: ``{name: Member}`` (``physattack.evaluate.members.tag_members``), attacked and held out.

    Returns:
        ``detectors_table``'s dict.
    """
    labels, skipped = {}, {}
    for name, member in members.items():
        label = scene_label(member.victim, scene.class_name)
        if isinstance(label, str):
            skipped[name] = label
        else:
            labels[name] = label
    rows = {}
    if labels:
        detectors = [members[n].victim for n in labels]
        outputs, boxes = detect_views(scene, clean_texture, adv_texture, pipeline, grid.params(), detectors,
                                      batch_size)
        conditions = grid.conditions()
        for (name, label), det, (clean, attacked) in zip(labels.items(), detectors, outputs):
            threshold = float(det.score_threshold)
            clean_true = best_scores_on_boxes(clean, boxes, label)
            adv_true = best_scores_on_boxes(attacked, boxes, label)
            rows[name] = {"role": members[name].role, "label": det.labels[label], "score_threshold": threshold,
                          "input_size": getattr(det, "input_size", None),
                          **detector_rates(clean_true, adv_true, threshold),
                          "per_condition": detector_conditions(clean_true, adv_true, threshold, conditions)}
    return detectors_table(rows, members, skipped)


# -- what people read ---------------------------------------------------------------------------------

def _short(r: dict) -> str:
    if not r["n"]:
        return "n/a"
    return f"{r['rate']:.1%} [{r['ci95'][0]:.0%}-{r['ci95'][1]:.0%}]"


def detectors_line(table: dict) -> str:
    """The detectors table in one console line, e.g. ``detectors (detection rate clean -> attacked, 95 %
    CI): attacked detnet 100.0% [97%-100%] -> 2.5% [1%-7%]; held-out (never called by the optimizer)
    det_ssdlite 99.2% [95%-100%] -> 41.7% [33%-51%]; held-out mean 99.2% -> 41.7%``."""
    rows = table["members"]
    parts = []
    for role, head in ((ATTACKED, "attacked"), (HELD_OUT, "held-out (never called by the optimizer)")):
        names = [n for n, r in rows.items() if r["role"] == role]
        if names:
            parts.append(f"{head} " + ", ".join(f"{n} {_short(rows[n]['detection_rate_clean'])} -> "
                                                f"{_short(rows[n]['detection_rate_attacked'])}" for n in names))
    mean = table["held_out_mean"]
    if mean["detection_rate_attacked"] is not None:
        k = len(mean["victims"])
        parts.append(f"held-out mean {mean['detection_rate_clean']:.1%} -> {mean['detection_rate_attacked']:.1%} "
                     f"({k} detector{'' if k == 1 else 's'})")
    if table["skipped"]:
        parts.append("skipped " + ", ".join(f"{n} ({s['reason']})" for n, s in table["skipped"].items()))
    return "detectors (detection rate clean -> attacked, 95% CI): " + ("; ".join(parts) or "none")


def detectors_markdown(table: dict) -> str:
    """The detectors table as a Markdown section for ``report.md``."""
    def cell(r: dict) -> str:
        return f"{r['rate']:.1%} ({r['ci95'][0]:.1%}-{r['ci95'][1]:.1%}, {r['count']}/{r['n']})" if r["n"] else "n/a"

    lines = ["## Detectors: attacked and held out", "",
             "Each detector reads the same held-out frames (clean and attacked) at its own input size and "
             "threshold. A held-out detector was never called while the patch was optimized: its figures are "
             "what an attacker without its weights can expect.", "",
             "| detector | role | threshold | detection rate, clean | detection rate, attacked | disappearance "
             "(of clean-detected) |", "|---|---|---|---|---|---|"]
    for name, r in table["members"].items():
        lines.append(f"| {name} | {r['role']} | {r['score_threshold']:g} | {cell(r['detection_rate_clean'])} | "
                     f"{cell(r['detection_rate_attacked'])} | {cell(r['disappearance_rate'])} |")
    mean = table["held_out_mean"]
    if mean["detection_rate_attacked"] is not None:
        lines += ["", f"Held-out mean over {len(mean['victims'])} detector(s): detection rate "
                      f"{mean['detection_rate_clean']:.1%} clean -> {mean['detection_rate_attacked']:.1%} attacked."]
    for name, s in table["skipped"].items():
        lines += ["", f"Skipped {name} ({s['role']}): {s['reason']}."]
    return "\n".join(lines) + "\n"


def log_detectors(tracker, table: dict) -> None:
    """The detectors table to the tracker: ``heldout/detectors`` and ``heldout/detectors_per_condition``
    tables and ``heldout/<name>/...`` summaries."""
    columns = ["detector", "role", "score_threshold", "detection_rate_clean", "detection_rate_attacked",
               "detection_rate_attacked_ci_low", "detection_rate_attacked_ci_high", "disappearance_rate"]
    rows = [[n, r["role"], r["score_threshold"], r["detection_rate_clean"]["rate"], r["detection_rate_attacked"]["rate"],
             r["detection_rate_attacked"]["ci95"][0], r["detection_rate_attacked"]["ci95"][1],
             r["disappearance_rate"]["rate"]] for n, r in table["members"].items()]
    tracker.log_table("heldout/detectors", columns, rows)
    by_condition = per_condition_rows(table, ("detection_rate_clean", "detection_rate_attacked"))
    if by_condition:
        tracker.log_table("heldout/detectors_per_condition", ["detector", "role", "axis", "value", "views",
                                                              "detection_rate_clean", "detection_rate_attacked"],
                          by_condition)
    flat = {f"heldout/{n}/{key}": r[key]["rate"] for n, r in table["members"].items()
            for key in ("detection_rate_clean", "detection_rate_attacked", "disappearance_rate")}
    mean = table["held_out_mean"]
    if mean["detection_rate_attacked"] is not None:
        flat["heldout/held_out_mean_detection_rate_attacked"] = mean["detection_rate_attacked"]
    tracker.summary(flat)
