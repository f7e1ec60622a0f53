"""Victims: frozen classifiers and detectors behind one interface, and the bundled SignNet and DetNet."""

from physattack.victims.base import Classifier, VictimError
from physattack.victims.detection import Detections, Detector, DetectorOutput
from physattack.victims.detnet import DetNet, load_detnet
from physattack.victims.ensemble import Ensemble, build_ensemble
from physattack.victims.signnet import SignNet, load_signnet

__all__ = ["Classifier", "DetNet", "Detections", "Detector", "DetectorOutput", "Ensemble", "SignNet", "VictimError",
           "build_ensemble", "load_detnet", "load_signnet"]
