"""Weights a user points victim.weights at: anything but a good file is one sentence naming it."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from physattack.victims import VictimError, load_detnet, load_signnet
from physattack.victims.signnet import default_weights
from physattack.victims.torchvision import load_torchvision_classifier


def _beside_bundled_json(tmp_path, data: bytes):
    """``tmp/w.safetensors`` holding ``data``, with the bundled SignNet's .json beside it."""
    path = tmp_path / "w.safetensors"
    path.write_bytes(data)
    shutil.copy(default_weights().with_suffix(".json"), path.with_suffix(".json"))
    return path


@pytest.mark.parametrize("kind", ["random", "truncated"])
def test_damaged_safetensors_is_one_sentence_naming_the_file(tmp_path, kind):
    good = default_weights().read_bytes()
    data = os.urandom(4096) if kind == "random" else good[:len(good) // 2]
    path = _beside_bundled_json(tmp_path, data)
    with pytest.raises(VictimError) as err:
        load_signnet(path)
    msg = str(err.value)
    assert str(path) in msg and "truncated or not a safetensors file" in msg and "\n" not in msg
    with pytest.raises(VictimError, match="w.safetensors"):
        load_detnet(path)


def test_weights_that_do_not_fit_the_json_are_refused(tmp_path):
    path = _beside_bundled_json(tmp_path, default_weights().read_bytes())
    meta = path.with_suffix(".json")
    meta.write_text(meta.read_text().replace('"width": 16', '"width": 8'))
    with pytest.raises(VictimError, match="does not fit the network"):
        load_signnet(path)
    meta.write_text("{not json")
    with pytest.raises(VictimError, match="not valid JSON"):
        load_signnet(path)


def test_torchvision_weights_read_as_data_and_refuse_damage(tmp_path):
    good = load_torchvision_classifier("mobilenet_v3_small", random_init=True)
    state = good.model.state_dict()
    pt = tmp_path / "mnv3.pth"
    torch.save(state, pt)
    loaded = load_torchvision_classifier("mobilenet_v3_small", weights=str(pt))
    assert torch.equal(loaded.model.features[0][0].weight, state["features.0.0.weight"])
    pt.write_bytes(os.urandom(2048))
    with pytest.raises(VictimError, match="mnv3.pth"):
        load_torchvision_classifier("mobilenet_v3_small", weights=str(pt))
    st = tmp_path / "mnv3.safetensors"
    st.write_bytes(os.urandom(2048))
    with pytest.raises(VictimError, match="mnv3.safetensors.*truncated or not a safetensors file"):
        load_torchvision_classifier("mobilenet_v3_small", weights=str(st))
