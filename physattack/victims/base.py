"""One interface over victims: a frozen model that maps B×3×H×W images in [0, 1] to outputs.

Normalization and resizing belong to the victim, so every caller hands it plain rendered images.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import Tensor, nn

from physattack.atomic import load_torch
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


def read_state_dict(path: Path, what: str) -> dict[str, Tensor]:
    """A state dict from ``path``: safetensors (``.safetensors``) or a data-only torch file; a missing,
    truncated or foreign file is one sentence naming it, never a traceback."""
    path = Path(path)
    if not path.is_file():
        raise VictimError(f"There is no {what} at {path}; point victim.weights at the file.")
    if path.suffix != ".safetensors":
        try:
            return load_torch(path, what)
        except InputError as e:
            raise VictimError(str(e)) from None
    try:
        return load_file(str(path))
    except Exception as e:                  # SafetensorError for bad headers, OSError for short reads
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise VictimError(f"{path} could not be read as {what} ({reason}); it is truncated or not a safetensors "
                          "file: point victim.weights at a file physattack or safetensors wrote.") from None


def read_bundled_weights(path: Path, model_name: str, train_command: str) -> tuple[dict, dict]:
    """The state dict in ``path`` (.safetensors) and the metadata in the .json beside it; a missing
    file says how to train one or where to point ``victim.weights``."""
    meta_path = path.with_suffix(".json")
    if not path.is_file():
        raise VictimError(f"{model_name} weights not found at {path} (with {meta_path.name} beside them); train them "
                          f"with '{train_command}' or point victim.weights at a trained file.")
    if not meta_path.is_file():
        raise VictimError(f"{path} has no {meta_path.name} beside it: the metadata its training wrote (labels, input "
                          f"size, normalization) must sit next to the weights; copy it from where they were trained, "
                          f"or retrain with '{train_command}'.")
    try:
        meta = json.loads(meta_path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise VictimError(f"{meta_path} is not valid JSON ({e}); it should be the metadata '{train_command}' "
                          f"wrote beside {path.name}.") from None
    if not isinstance(meta, dict) or "labels" not in meta:
        raise VictimError(f"{meta_path} has no 'labels'; it should be the metadata '{train_command}' wrote beside "
                          f"{path.name}.")
    return read_state_dict(path, f"{model_name} weights"), meta


def build_from_weights(path: Path, build, state: dict) -> nn.Module:
    """``build()`` then load ``state`` into it; metadata or weights that do not fit the network (another
    architecture, width or label count) are one sentence naming the file."""
    try:
        model = build()
        model.load_state_dict(state)
    except (KeyError, TypeError, RuntimeError) as e:
        reason = str(e).strip().splitlines()[0][:200]
        raise VictimError(f"{path} does not fit the network it was loaded into ({reason}); give victim.weights "
                          "weights of this architecture (for a bundled victim, with the .json its training wrote "
                          "beside them).") from None
    return model
