"""Objectives: ``loss(victim_output, label, views) -> loss per view`` (lower is better for the
attacker) and ``success(victim_output, label, views) -> bool per view``.

``label`` is the target's index for targeted objectives and the true class's index otherwise;
``views`` (RenderedViews) carries the object's masks and boxes, which detector objectives need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch.nn.functional as F
from torch import Tensor

from physattack.attack import detection_objectives as det


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


@dataclass(frozen=True)
class Objective:
    """A named attack goal: its per-view loss, its per-view success test, and whether its label is
    a target (``targeted=True``) or the object's true class."""

    loss: Callable[[Any, int, Any], Tensor]
    success: Callable[[Any, int, Any], Tensor]
    targeted: bool


OBJECTIVES: dict[str, Objective] = {
    "targeted": Objective(lambda out, label, views: targeted(out, label),
                          lambda out, label, views: out.argmax(1) == label, targeted=True),
    "untargeted": Objective(lambda out, label, views: untargeted(out, label),
                            lambda out, label, views: out.argmax(1) != label, targeted=False),
    "hide": Objective(det.hide, det.hidden, targeted=False),
    "mislabel": Objective(det.mislabel, det.mislabelled, targeted=True),
}

#: What each objective means for a detector (``DetectorOutput``): targeted is mislabel, untargeted
#: takes the true class off the sign's boxes; ``hide`` and ``mislabel`` exist only for detectors.
DETECTOR_OBJECTIVES: dict[str, Objective] = {
    "targeted": OBJECTIVES["mislabel"], "mislabel": OBJECTIVES["mislabel"], "hide": OBJECTIVES["hide"],
    "untargeted": Objective(det.untargeted, det.hidden, targeted=False),
}
