"""Rates reported the careful way: success only over views the clean object got right (RP2), with
Wilson intervals, beside the unconditional rate and clean accuracy."""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import Tensor


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial rate; (0, 1) when ``n`` is 0."""
    if n == 0:
        return 0.0, 1.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def rate(mask: Tensor) -> dict:
    """Rate of True in a boolean tensor, with its count and Wilson interval."""
    n, k = int(mask.numel()), int(mask.sum())
    lo, hi = wilson_interval(k, n)
    return {"rate": k / n if n else float("nan"), "count": k, "n": n, "ci95": [lo, hi]}


def in_label_set(pred: Tensor, labels: int | Sequence[int]) -> Tensor:
    """Boolean per prediction: is it one of ``labels`` (one index or a label set)?"""
    labels = [labels] if isinstance(labels, int) else list(labels)
    return torch.isin(pred, torch.tensor(labels, dtype=pred.dtype, device=pred.device))


def classification_metrics(clean_pred: Tensor, adv_pred: Tensor, adv_probs: Tensor, true_label: int | Sequence[int],
                           target_label: int | Sequence[int] | None) -> dict:
    """Clean accuracy and attack success over a grid of views.

    Targeted success: the attacked view reads as ``target_label``; untargeted: not as ``true_label``.
    Either may be a label set (a victim with another label space): correct means landing in the true
    set, untargeted success means leaving all of it, and the target confidence sums over its set.
    ``attack_success_rate`` counts only views whose clean version was classified correctly.
    """
    clean_ok = in_label_set(clean_pred, true_label)
    hit = in_label_set(adv_pred, target_label) if target_label is not None else ~in_label_set(adv_pred, true_label)
    out = {
        "views": int(clean_pred.numel()),
        "clean_accuracy": rate(clean_ok),
        "attack_success_rate": rate(hit[clean_ok]),
        "attack_success_rate_unconditional": rate(hit),
        "attacked_accuracy": rate(in_label_set(adv_pred, true_label)),
    }
    if target_label is not None:
        target = [target_label] if isinstance(target_label, int) else list(target_label)
        out["mean_target_confidence"] = float(adv_probs[:, target].sum(1).mean())
    return out



