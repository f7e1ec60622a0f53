"""Sanity flags, auto-attack style: automatic checks that warn when a reported number may not mean
what it seems to mean. Each flag is printed as a warning and stored in the report with its reason.

- ``patch_invisible``: in more than ``max_invisible_share`` of the held-out views the patch changes
  fewer than ``min_visible_pixels`` of the image (it faces away, is too small at that distance, or is
  hidden). Success there cannot come from the patch; failure there says nothing about it.
- ``zero_gradient``: the patch received exactly zero gradient in more than ``max_zero_grad_share``
  of the optimizer's steps (a detached path, a saturated loss, a victim that hides its gradient);
  the attack then did not really run, and a low success rate is no evidence of robustness.
- ``stochastic_victim``: the victim in eval mode gives different outputs for the same images
  (dropout or batch statistics left on, random preprocessing). Its success rates then vary from run
  to run and gradients are noisy (auto-attack's EOT warning).
- ``probabilities_not_logits``: the victim returns probabilities (or log-probabilities) instead of
  logits. Losses built for logits then saturate and gradients vanish (auto-attack's check).
- ``low_clean_accuracy``: the victim reads the clean object correctly in fewer than
  ``min_clean_accuracy`` of the held-out views, or fewer than ``min_clean_views`` views remain: the
  conditional success rate rests on too few views, or the grid is outside what the victim knows.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass

import torch
from torch import Tensor

log = logging.getLogger("physattack.sanity")


@dataclass(frozen=True)
class SanityThresholds:
    """When each flag is raised (see the module docstring)."""

    min_visible_pixels: float = 0.002     # share of the image's pixels the patch must change
    max_invisible_share: float = 0.25
    max_zero_grad_share: float = 0.1
    stochastic_atol: float = 1e-4
    min_clean_accuracy: float = 0.5
    min_clean_views: int = 20


@dataclass(frozen=True)
class SanityFlag:
    name: str
    raised: bool
    value: float | None
    threshold: float | None
    message: str


def patch_invisible(patch_visible: Tensor, t: SanityThresholds) -> SanityFlag:
    share = float((patch_visible < t.min_visible_pixels).float().mean()) if patch_visible.numel() else 0.0
    return SanityFlag("patch_invisible", share > t.max_invisible_share, share, t.max_invisible_share,
                      f"the patch changes fewer than {t.min_visible_pixels:.1%} of the pixels in {share:.0%} of the "
                      "held-out views; success there cannot come from it")


def zero_gradient(zero_grad_steps: int | None, steps_done: int | None, t: SanityThresholds) -> SanityFlag:
    if not steps_done:
        return SanityFlag("zero_gradient", False, None, t.max_zero_grad_share, "no optimizer steps to check")
    share = (zero_grad_steps or 0) / steps_done
    return SanityFlag("zero_gradient", share > t.max_zero_grad_share, share, t.max_zero_grad_share,
                      f"the patch received zero gradient in {zero_grad_steps} of {steps_done} steps; the attack "
                      "may not have run, and a low success rate is then no evidence of robustness")


@torch.no_grad()
def stochastic_victim(victim, images: Tensor, t: SanityThresholds) -> SanityFlag:
    state = torch.get_rng_state()
    a, b = victim(images).float(), victim(images).float()
    torch.set_rng_state(state)
    diff = float((a - b).abs().max())
    return SanityFlag("stochastic_victim", diff > t.stochastic_atol, diff, t.stochastic_atol,
                      f"the victim in eval mode gives outputs differing by up to {diff:.3g} for the same images; "
                      "rates vary between runs and gradients are noisy (average over draws, or fix the model)")


@torch.no_grad()
def probabilities_not_logits(victim, images: Tensor) -> SanityFlag:
    out = victim(images).float()
    probs = bool(out.min() >= 0 and out.max() <= 1 and torch.allclose(out.sum(1), torch.ones(len(out)), atol=1e-3))
    log_probs = bool(out.max() <= 0 and torch.allclose(out.logsumexp(1), torch.zeros(len(out)), atol=1e-3))
    kind = "probabilities" if probs else "log-probabilities" if log_probs else "logits"
    return SanityFlag("probabilities_not_logits", probs or log_probs, None, None,
                      f"the victim returns {kind}" + ("; logit losses saturate and gradients vanish — remove the "
                                                      "final softmax" if probs or log_probs else ""))


def low_clean_accuracy(clean_correct: Tensor, t: SanityThresholds) -> SanityFlag:
    n_ok, n = int(clean_correct.sum()), int(clean_correct.numel())
    acc = n_ok / n if n else 0.0
    raised = acc < t.min_clean_accuracy or n_ok < t.min_clean_views
    return SanityFlag("low_clean_accuracy", raised, acc, t.min_clean_accuracy,
                      f"the clean object is read correctly in {n_ok} of {n} held-out views ({acc:.0%}); "
                      + ("too few for the conditional success rate to mean much" if raised else "enough views"))


def sanity_flags(*, victim, probe_images: Tensor, patch_visible: Tensor, clean_correct: Tensor,
                 zero_grad_steps: int | None = None, steps_done: int | None = None,
                 thresholds: SanityThresholds = SanityThresholds(), warn: bool = True) -> list[dict]:
    """Run every check; log a warning for each raised flag and return all of them as dicts."""
    flags = [patch_invisible(patch_visible, thresholds), zero_gradient(zero_grad_steps, steps_done, thresholds),
             stochastic_victim(victim, probe_images, thresholds), probabilities_not_logits(victim, probe_images),
             low_clean_accuracy(clean_correct, thresholds)]
    if warn:
        for f in flags:
            if f.raised:
                log.warning("sanity flag %s: %s", f.name, f.message)
    return [asdict(f) for f in flags]
