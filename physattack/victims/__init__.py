"""Victims: frozen classifiers and detectors behind one interface, and the bundled SignNet and DetNet
(and the bundled detectors of other architectures, ``bundled_sign_detector``)."""

from physattack.victims.base import Classifier, VictimError
from physattack.victims.detection import Detections, Detector, DetectorOutput
from physattack.victims.detnet import DetNet, load_detnet
from physattack.victims.ensemble import Ensemble, build_ensemble
from physattack.victims.signnet import SignNet, load_signnet
from physattack.victims.torchvision_detection import TorchvisionDetector, bundled_sign_detector, load_sign_detector

__all__ = ["Classifier", "DetNet", "Detections", "Detector", "DetectorOutput", "Ensemble", "SignNet",
           "TorchvisionDetector", "VictimError", "build_ensemble", "bundled_sign_detector", "load_detnet",
           "load_sign_detector", "load_signnet"]
