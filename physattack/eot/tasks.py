"""Task inputs that change per view: what a reprogramming card shows in its window."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.errors import InputError, check_range

PAPER = 0.95     # the card's white
INK = 0.08       # printed digit ink


class DigitTask:
    """scikit-learn's 8×8 handwritten digits (shipped inside the package: no download), split by sample.

    Args:
        classes: digits 0..classes-1 are used.
        heldout_share: share of the samples kept for evaluation.
        seed: the split's seed.
    """

    def __init__(self, classes: int = 9, heldout_share: float = 0.3, seed: int = 0):
        try:
            from sklearn.datasets import load_digits
        except ImportError:
            raise InputError("attack=reprogram needs scikit-learn for its digits; pip install scikit-learn.") from None
        classes = check_range("attack.classes", classes, 2, 10, integer=True, why="digits 0..classes-1 are shown")
        check_range("DigitTask.heldout_share", heldout_share, 0.0, 1.0, lo_open=True, hi_open=True,
                    why="the share of the digits kept for evaluation")
        data = load_digits()
        keep = torch.from_numpy(data.target) < classes
        images = torch.from_numpy(data.images).float()[keep] / 16.0           # N×8×8, 1 = ink
        labels = torch.from_numpy(data.target).long()[keep]
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))
        n_held = int(round(heldout_share * len(order)))
        self.classes = classes
        self.split = {"heldout": (images[order[:n_held]], labels[order[:n_held]]),
                      "train": (images[order[n_held:]], labels[order[n_held:]])}

    def sample(self, n: int, generator: torch.Generator, split: str = "train") -> tuple[Tensor, Tensor]:
        images, labels = self.split[split]
        idx = torch.randint(len(labels), (n,), generator=generator)
        return images[idx], labels[idx]

    @staticmethod
    def print_into(base: Tensor, digits: Tensor, window: tuple[float, float, float, float]) -> Tensor:
        """B textures: ``base`` (3×H×W) with each digit printed (dark ink on white) into ``window``."""
        _, h, w = base.shape
        x0, y0, x1, y1 = int(round(window[0] * w)), int(round(window[1] * h)), int(round(window[2] * w)), \
            int(round(window[3] * h))
        ink = F.interpolate(digits[:, None].to(base), size=(y1 - y0, x1 - x0), mode="bilinear", align_corners=False)
        out = base.expand(len(digits), -1, -1, -1).clone()
        out[:, :, y0:y1, x0:x1] = PAPER * (1 - ink) + INK * ink
        return out
