"""A differentiable stand-in for a drive's verdict, for objectives over approach windows (issue 26).

The judge (``physattack.drive.judge``) says a car *stops* when, at some frame before its braking point, ``k``
of the last ``n`` frames (fewer at the start) read the sign as its class. ``soft_stop`` replaces each hard
step of that rule with a smooth one, so that an optimizer can lower it:

- each frame's reading is a probability ``p`` (the stack's soft read of the sign's class) instead of a bool;
- each window's vote is ``sigmoid(sharpness · (Σ p − (k − ½)))`` instead of ``Σ correct ≥ k``;
- "some window before the braking point" is a smooth maximum over those windows,
  ``temperature · log(mean(exp(vote / temperature))``, instead of ``any``.

The smooth maximum lies between ``max − temperature · log(U)`` and ``max`` (U usable windows), so on hard
readings (``p`` 0 or 1) with the defaults it is above ½ exactly when the judge says the car stops, for drives
of up to ~10⁴ usable frames; its gradient goes mostly to the windows that come closest to stopping the car.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.errors import InputError


def soft_stop(p: Tensor, usable: Tensor, k: int, n: int, *, sharpness: float = 12.0,
              temperature: float = 0.03) -> Tensor:
    """How surely the car stops, in [0, 1], differentiably in ``p``.

    Args:
        p: ...×T, each frame's probability that the stack reads the sign as its class, in time order.
        usable: ...×T bool (broadcast with ``p``), the frames at which a recognition still stops the car
            (the sign is at least the braking distance away). A drive with none runs the sign: 0.
        k, n: the voting rule (``drive.settings.k``, ``drive.settings.n``).
        sharpness: the slope of a window's vote around ``k − ½`` readings.
        temperature: the smooth maximum's; smaller is closer to the hard maximum.

    Returns:
        ... (the leading shape of ``p``): about 1 where some usable window holds ``k`` readings, about 0 where
        none comes close.
    """
    t = p.shape[-1]
    if not 1 <= k <= n:
        raise InputError(f"k={k} of n={n} frames can never be met (drive.settings.k must be between 1 and "
                         "drive.settings.n): choose k <= n.")
    if n > t:
        raise InputError(f"The voting window (n={n} frames, drive.settings.n) is longer than the drive's {t} frames: "
                         "choose a shorter window or a longer drive.")
    usable = usable.expand_as(p)
    sums = F.pad(p.cumsum(-1), (1, 0))
    ends = torch.arange(1, t + 1, device=p.device)
    window = sums[..., ends] - sums[..., (ends - n).clamp(min=0)]          # readings in each window
    vote = torch.sigmoid(sharpness * (window - (k - 0.5)))
    count = usable.sum(-1)
    masked = vote.masked_fill(~usable, float("-inf")) / temperature
    best = temperature * (torch.logsumexp(masked, -1) - count.clamp(min=1).to(p.dtype).log())
    return torch.where(count > 0, best.clamp(0.0, 1.0), torch.zeros_like(best))     # rounding: -1e-8


def stop_margin(p: Tensor, k: int, n: int, *, temperature: float = 0.5, sharpness: float = 4.0,
                windows: Tensor | None = None) -> Tensor:
    """A loss that is zero when no window comes near ``k`` readings and grows with the worst one: for each
    row of windows, ``softplus(sharpness · (M − (k − ½))) / sharpness`` where M is the smooth maximum
    (``temperature · logsumexp(· / temperature)``, in frames) of the readings in each window of ``n``
    consecutive frames (and of fewer at each run's start).

    Unlike ``soft_stop`` it does not saturate where the car surely stops (every frame read as the sign): the
    gradient is then about 1 on the frames of the windows closest to the maximum, so an optimizer starting
    from the clean sign is pulled first towards the windows that would still stop the car.

    Args:
        p: ...×S×L, the probabilities of S runs of L consecutive frames (L >= n); all of them usable.
        k, n: the voting rule.
        windows: ... (the leading shape), how many windows each row's drive has before its braking point, when its
            S×L drawn ones are a sample of them: each drawn window then stands for ``windows / (S·L)`` of its
            drive's, and the smooth maximum is taken over that many copies (``+ temperature · log`` of it). The
            car judges every window, so a drive with ten times the drawn windows needs its drawn ones further from
            ``k``. None: the drawn windows are all of them.

    Returns:
        ... (the shape of ``p`` without its last two dimensions).
    """
    if not 1 <= k <= n:
        raise InputError(f"k={k} of n={n} frames can never be met (drive.settings.k must be between 1 and "
                         "drive.settings.n): choose k <= n.")
    if n > p.shape[-1]:
        raise InputError(f"The voting window (n={n} frames) is longer than the runs of {p.shape[-1]} frames it is "
                         "taken from: draw longer runs or a shorter window.")
    # windows of fewer than n frames at each run's start too, as the judge counts them at a drive's first frame
    # (for a run from further on they are lower bounds of the real windows, so they never overstate the maximum)
    total = windows
    flat = F.pad(p, (n - 1, 0)).unfold(-1, n, 1).sum(-1).flatten(-2)        # ...×(S·L) window counts
    top = temperature * torch.logsumexp(flat / temperature, -1)
    if total is not None:
        top = top + temperature * (total.to(top) / flat.shape[-1]).clamp(min=1.0).log()
    return F.softplus(sharpness * (top - (k - 0.5))) / sharpness


def usable_frames(distance_m: Tensor, braking_m: float) -> Tensor:
    """T bool: the frames at which the sign is at least ``braking_m`` away (a recognition there stops the car),
    as ``DriveOutcome.stops`` has it."""
    if len(distance_m) and float(distance_m[0]) < braking_m:
        raise InputError(f"The braking point ({braking_m:.1f} m) is beyond the drive's first frame "
                         f"({float(distance_m[0]):.1f} m): start the drive farther away (drive.drives.start_m) "
                         "or brake sooner.")
    return distance_m >= braking_m


__all__ = ["soft_stop", "stop_margin", "usable_frames"]
