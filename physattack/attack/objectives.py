"""Objectives: ``(victim_output, label) -> loss per sample``; lower is better for the attacker."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor


def targeted(logits: Tensor, target: int) -> Tensor:
    """Cross-entropy towards ``target``: make every view read as the target label."""
    return F.cross_entropy(logits, logits.new_full((logits.shape[0],), target, dtype=int), reduction="none")


def untargeted(logits: Tensor, true_label: int, margin: float = 5.0) -> Tensor:
    """Carlini-Wagner margin away from ``true_label``: the true logit minus the best other one,
    floored at ``-margin`` so that views already fooled stop pulling the patch."""
    true = logits[:, true_label]
    other = logits.clone()
    other[:, true_label] = float("-inf")
    return (true - other.amax(dim=1)).clamp(min=-margin)


OBJECTIVES = {"targeted": targeted, "untargeted": untargeted}
