"""Victims: frozen classifiers behind one interface, and the bundled SignNet."""

from physattack.victims.base import Classifier, VictimError
from physattack.victims.signnet import SignNet, load_signnet

__all__ = ["Classifier", "SignNet", "VictimError", "load_signnet"]
