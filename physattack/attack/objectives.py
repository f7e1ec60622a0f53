"""Objectives: ``loss(victim_output, label, views) -> loss per view`` (lower is better for the
attacker) and ``success(victim_output, label, views) -> bool per view``.

``label`` is the target's index for targeted objectives and the true class's index otherwise;
``views`` (RenderedViews) carries the object's masks and boxes, which detector objectives need.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.attack import detection_objectives as det


def backward(loss: Tensor, images: Tensor | None = None, images_grad: Tensor | None = None) -> None:
    """``loss.backward()``, joined by the rendered ``images``' gradient ``images_grad`` when an
    ensemble's members computed it one after another: the renderer and the patch are then
    differentiated once, for the loss and the members together."""
    if images_grad is None:
        loss.backward()
    else:
        torch.autograd.backward([loss, images], [torch.ones_like(loss), images_grad])


def targeted(logits: Tensor, target: int) -> Tensor:
    """Cross-entropy towards ``target``: make every view read as the target label."""
    return F.cross_entropy(logits, logits.new_full((logits.shape[0],), target, dtype=int), reduction="none")


def targeted_margin(logits: Tensor, target: int, margin: float = 10.0) -> Tensor:
    """Carlini-Wagner margin towards ``target`` (Carlini & Wagner, S&P 2017, their f6): the best other
    logit minus the target's, floored at ``-margin``. A large floor asks for a confident reading,
    which Carlini & Wagner found transfers to other models far better than a barely-won one."""
    other = logits.clone()
    other[:, target] = float("-inf")
    return (other.amax(dim=1) - logits[:, target]).clamp(min=-margin)


def targeted_logit(logits: Tensor, target: int) -> Tensor:
    """The target's logit, negated (Zhao et al., NeurIPS 2021, "On Success and Simplicity: A Second
    Look at Transferable Targeted Attacks"): unlike cross-entropy it does not saturate once the
    surrogate is fooled, so later steps keep pushing towards the target, which they found to be what
    targeted transfer needs. Logits are the victim's own, so its scale differs between members."""
    return -logits[:, target]


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
    "targeted_margin": Objective(lambda out, label, views: targeted_margin(out, label),
                                 lambda out, label, views: out.argmax(1) == label, targeted=True),
    "targeted_logit": Objective(lambda out, label, views: targeted_logit(out, label),
                                lambda out, label, views: out.argmax(1) == label, targeted=True),
    "untargeted": Objective(lambda out, label, views: untargeted(out, label),
                            lambda out, label, views: out.argmax(1) != label, targeted=False),
    "hide": Objective(det.hide, det.hidden, targeted=False),
    "mislabel": Objective(det.mislabel, det.mislabelled, targeted=True),
}

#: Objectives only a detector's outputs can serve (a classifier has no boxes to hide or relabel).
DETECTOR_ONLY = frozenset({"hide", "mislabel"})

#: What each objective means for a detector (``DetectorOutput``): targeted is mislabel, untargeted
#: takes the true class off the sign's boxes; ``hide`` and ``mislabel`` exist only for detectors.
DETECTOR_OBJECTIVES: dict[str, Objective] = {
    "targeted": OBJECTIVES["mislabel"], "mislabel": OBJECTIVES["mislabel"], "hide": OBJECTIVES["hide"],
    "targeted_margin": OBJECTIVES["mislabel"], "targeted_logit": OBJECTIVES["mislabel"],
    "untargeted": Objective(det.untargeted, det.hidden, targeted=False),
}
