"""One interface over victims: a frozen model that maps B×3×H×W images in [0, 1] to outputs.

Normalization and resizing belong to the victim, so every caller hands it plain rendered images.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from physattack.errors import InputError


class VictimError(InputError):
    """A victim that cannot be built or asked for; the message says what to do."""


class Classifier(nn.Module):
    """A classifier victim. Subclasses set ``labels`` and implement ``logits``.

    ``forward(images)`` returns B×K logits for images B×3×H×W in [0, 1].
    """

    labels: tuple[str, ...] = ()

    def label_index(self, name: str) -> int:
        """Index of the label called ``name``; a clear error listing the labels when unknown."""
        if name in self.labels:
            return self.labels.index(name)
        raise VictimError(f"The victim has no label '{name}'; its labels are: {', '.join(self.labels)}.")

    def logits(self, images: Tensor) -> Tensor:
        raise NotImplementedError

    def forward(self, images: Tensor) -> Tensor:
        return self.logits(images)

    def freeze(self) -> "Classifier":
        """Eval mode, no parameter gradients: the victim is never trained by an attack."""
        self.eval()
        for p in self.parameters():
            p.requires_grad_(False)
        return self


def normalize(images: Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> Tensor:
    m = torch.tensor(mean, device=images.device, dtype=images.dtype).view(1, -1, 1, 1)
    s = torch.tensor(std, device=images.device, dtype=images.dtype).view(1, -1, 1, 1)
    return (images - m) / s
