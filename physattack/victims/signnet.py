"""SignNet: the bundled traffic-sign classifier, trained by ``python -m physattack.train signnet``.

It sees the crop a two-stage recognizer takes around a detected sign, resized to 64×64. Its
weights ship in ``assets/signnet.safetensors`` beside ``signnet.json`` (labels, preprocessing,
training configuration and held-out accuracy).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import torch.nn.functional as F
from torch import Tensor, nn

from physattack.victims.base import Classifier, build_from_weights, normalize, read_bundled_weights

MEAN = (0.5, 0.5, 0.5)
STD = (0.25, 0.25, 0.25)


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
                         nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class SignNet(Classifier):
    """A small VGG-style CNN: four conv blocks (width ``w``, 2w, 4w, 8w), global pooling, linear head.

    Args:
        labels: class names, in output order.
        width: channels of the first block.
        input_size: side of the square the input is resized to.
    """

    def __init__(self, labels: list[str] | tuple[str, ...], width: int = 16, input_size: int = 64):
        super().__init__()
        self.labels = tuple(labels)
        self.input_size = input_size
        self.width = width
        w = width
        self.features = nn.Sequential(_block(3, w), nn.MaxPool2d(2), _block(w, 2 * w), nn.MaxPool2d(2),
                                      _block(2 * w, 4 * w), nn.MaxPool2d(2), _block(4 * w, 8 * w))
        self.head = nn.Sequential(nn.Dropout(0.2), nn.Linear(8 * w, len(self.labels)))

    def logits(self, images: Tensor) -> Tensor:
        if images.shape[-2:] != (self.input_size, self.input_size):
            images = F.interpolate(images, size=(self.input_size, self.input_size), mode="bilinear",
                                   antialias=True, align_corners=False)
        x = self.features(normalize(images, MEAN, STD))
        return self.head(x.mean(dim=(2, 3)))


def default_weights() -> Path:
    return Path(str(resources.files("physattack.assets"))) / "signnet.safetensors"


def bundled_signnet(name: str = "signnet") -> SignNet:
    """A SignNet whose weights ship in ``assets/<name>.safetensors`` (``signnet``, ``signnet_seed1``, ...)."""
    return load_signnet(Path(str(resources.files("physattack.assets"))) / f"{name}.safetensors")


def load_signnet(weights: str | Path | None = None) -> SignNet:
    """Load SignNet from ``weights`` (a .safetensors file with a .json beside it), default the bundled one."""
    path = Path(weights) if weights else default_weights()
    state, meta = read_bundled_weights(path, "SignNet", "python -m physattack.train signnet")
    model = build_from_weights(path, lambda: SignNet(meta["labels"], width=meta["width"],
                                                     input_size=meta["input_size"]), state)
    model.meta = meta
    return model.freeze()
