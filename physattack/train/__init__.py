"""Training the bundled victims on rendered views (``python -m physattack.train signnet|detnet``)."""

from physattack.train.classifier import SignNetTraining, train_signnet
from physattack.train.detector import DetNetTraining, train_detnet
from physattack.train.weights import save_weights

__all__ = ["DetNetTraining", "SignNetTraining", "save_weights", "train_detnet", "train_signnet"]
