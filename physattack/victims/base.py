"""One interface over victims: a frozen model that maps B×3×H×W images in [0, 1] to outputs.

Normalization and resizing belong to the victim, so every caller hands it plain rendered images.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from physattack.errors import InputError


class VictimError(InputError):
    """A victim that cannot be built or asked for; the message says what to do."""


class Classifier(nn.Module):
    """A classifier victim. Subclasses set ``labels`` and implement ``logits``.

    ``forward(images)`` returns B×K logits for images B×3×H×W in [0, 1].
    """

    labels: tuple[str, ...] = ()
    #: A scene's class name -> the label indices that count as that object (e.g. ImageNet's 919
    #: "street sign" for ``stop``); names not in it are the victim's own labels. See ``label_set``.
    label_sets: dict[str, tuple[int, ...]] = {}

    def label_index(self, name: str) -> int:
        """Index of the label called ``name`` (the first of its label set when it has one); a clear
        error listing the labels when unknown."""
        if name in self.labels:
            return self.labels.index(name)
        if name in self.label_sets:
            return self.label_sets[name][0]
        raise VictimError(f"The victim has no label '{name}'; its labels are: {', '.join(self.labels)}.")

    def label_set(self, name: str) -> tuple[int, ...]:
        """Every label index acceptable for ``name``: clean accuracy means landing in the set,
        untargeted success means leaving all of it."""
        if name in self.label_sets:
            return tuple(self.label_sets[name])
        return (self.label_index(name),)

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


def remap_logits(logits: Tensor, label_map: Tensor) -> Tensor:
    """A task's logits from a victim's: column ``i`` is the victim's logit for the label that means
    the task's class ``i`` (adversarial reprogramming's label remapping)."""
    return logits[:, label_map]


def read_bundled_weights(path: Path, model_name: str, train_command: str) -> tuple[dict, dict]:
    """The state dict in ``path`` (.safetensors) and the metadata in the .json beside it; a missing
    file says how to train one or where to point ``victim.weights``."""
    meta_path = path.with_suffix(".json")
    if not path.is_file() or not meta_path.is_file():
        raise VictimError(f"{model_name} weights not found at {path} (with {meta_path.name} beside it); train them "
                          f"with '{train_command}' or point victim.weights at a trained file.")
    return load_file(str(path)), json.loads(meta_path.read_text())
