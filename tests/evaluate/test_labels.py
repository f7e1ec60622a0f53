"""Label sets: a scene's class maps to a set of a victim's labels (physattack/victims/labels.py)."""

from __future__ import annotations

import json

import pytest
import torch

from physattack.victims.base import Classifier, VictimError
from physattack.victims.labels import load_label_sets


def test_bundled_imagenet_sets_name_street_sign_for_every_sign():
    sets = load_label_sets("imagenet", tuple(str(i) for i in range(1000)))
    assert sets["stop"] == (919,) and sets["yield"] == (919,)
    assert all(919 in s for s in sets.values()) and not any(k.startswith("_") for k in sets)


def test_sets_from_a_file_and_bad_indices(tmp_path):
    path = tmp_path / "sets.json"
    path.write_text(json.dumps({"_about": "x", "stop": {"indices": [2, 5]}, "yield": [1]}))
    assert load_label_sets(path, ("a",) * 6) == {"stop": (2, 5), "yield": (1,)}
    with pytest.raises(VictimError, match="outside"):
        load_label_sets({"stop": [9]}, ("a",) * 6)
    with pytest.raises(VictimError, match="label-set file"):
        load_label_sets(tmp_path / "missing.json")


def test_classifier_label_set_and_index():
    class Tiny(Classifier):
        labels = ("cat", "street sign", "pole")

    v = Tiny()
    assert v.label_set("cat") == (0,)                       # own labels: a set of one
    v.label_sets = {"stop": (1, 2)}
    assert v.label_set("stop") == (1, 2) and v.label_index("stop") == 1
    with pytest.raises(VictimError, match="yield"):
        v.label_set("yield")


def test_torchvision_victim_takes_the_bundled_sets():
    from physattack.victims.torchvision import load_torchvision_classifier

    v = load_torchvision_classifier("mobilenet_v3_small", random_init=True, label_sets="imagenet")
    assert v.labels[919] == "street sign" and v.label_set("stop") == (919,)
    assert v(torch.rand(1, 3, 64, 64)).shape == (1, 1000)
