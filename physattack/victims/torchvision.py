"""torchvision classifiers as victims, with weights from the local torch cache or a given file.

Nothing is downloaded: the weights file must already be in ``$TORCH_HOME/hub/checkpoints`` (where
torchvision caches them) or at the path given as ``weights``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torchvision
from torch import Tensor

from physattack.victims.base import Classifier, VictimError, build_from_weights, normalize, read_state_dict
from physattack.victims.labels import load_label_sets

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class TorchvisionClassifier(Classifier):
    """An ImageNet classifier from ``torchvision.models``; images are resized to ``input_size``."""

    def __init__(self, model: torch.nn.Module, labels: list[str], input_size: int = 224):
        super().__init__()
        self.model = model
        self.labels = tuple(labels)
        self.input_size = input_size

    def logits(self, images: Tensor) -> Tensor:
        if images.shape[-2:] != (self.input_size, self.input_size):
            images = torch.nn.functional.interpolate(images, size=(self.input_size, self.input_size),
                                                     mode="bilinear", antialias=True, align_corners=False)
        return self.model(normalize(images, IMAGENET_MEAN, IMAGENET_STD))


def local_weights(arch: str, enum, weights: str | None) -> Path:
    """The weights file for ``enum``: the user's path, else torchvision's cache; never downloaded."""
    path = Path(weights) if weights else Path(torch.hub.get_dir()) / "checkpoints" / Path(enum.url).name
    if not path.is_file():
        raise VictimError(f"The weights for {arch} are not on this machine (looked for {path}); copy "
                          f"{Path(enum.url).name} there or set victim.weights to the file's path.")
    return path


def load_torchvision_classifier(arch: str, weights: str | None = None, weights_enum: str = "DEFAULT",
                                input_size: int = 224, random_init: bool = False,
                                label_sets: str | dict | None = None) -> TorchvisionClassifier:
    """Build ``torchvision.models.<arch>`` and load its weights without touching the network.

    Args:
        arch: e.g. ``resnet50``, ``mobilenet_v3_large``.
        weights: a state-dict file; default: torchvision's cached file for ``weights_enum``.
        random_init: skip the weights (for tests of shapes and gradients only).
        label_sets: the scene classes' sets of acceptable labels (``imagenet``: the bundled
            ``assets/imagenet_label_sets.json``; see ``physattack.victims.labels``).
    """
    try:
        builder = torchvision.models.get_model_builder(arch)
        enum = torchvision.models.get_model_weights(arch)[weights_enum] if weights_enum != "DEFAULT" else \
            torchvision.models.get_model_weights(arch).DEFAULT
    except (ValueError, KeyError):
        raise VictimError(f"torchvision has no classifier '{arch}' with weights '{weights_enum}'; see "
                          "torchvision.models.list_models(module=torchvision.models).") from None
    labels = list(enum.meta["categories"])
    model = builder(weights=None)
    if not random_init:
        path = local_weights(arch, enum, weights)
        build_from_weights(path, lambda: model, read_state_dict(path, f"{arch} weights"))
    victim = TorchvisionClassifier(model, labels, input_size)
    victim.label_sets = load_label_sets(label_sets, victim.labels)
    return victim.freeze()
