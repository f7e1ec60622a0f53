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


def test_weights_without_their_json_say_the_json_is_missing_not_the_weights(tmp_path):
    path = tmp_path / "w.safetensors"
    shutil.copy(default_weights(), path)
    with pytest.raises(VictimError) as err:
        load_signnet(path)
    msg = str(err.value)
    assert msg.startswith(f"{path} has no w.json beside it") and "not found" not in msg


@pytest.mark.parametrize("data, words", [
    (os.urandom(4096), "truncated, damaged or not a file physattack wrote"),
    (b"hello\n", "truncated, damaged or not a file physattack wrote"),
])
def test_a_random_torch_file_is_called_damaged_not_code(tmp_path, data, words):
    from physattack.atomic import load_torch
    from physattack.errors import InputError

    path = tmp_path / "w.pt"
    path.write_bytes(data)
    with pytest.raises(InputError) as err:
        load_torch(path, "SignNet weights")
    msg = str(err.value)
    assert words in msg and "run code" not in msg and "weightss" not in msg
    assert msg.startswith(f"{path} could not be read as SignNet weights (")


def test_a_torch_file_with_code_is_refused_as_code(tmp_path):
    from physattack.atomic import load_torch
    from physattack.errors import InputError

    path = tmp_path / "w.pt"
    torch.save({"layer": torch.nn.Linear(2, 2)}, path)                 # a pickled module: code on load
    with pytest.raises(InputError, match="is not plain SignNet weights: it holds Python objects that would run code"):
        load_torch(path, "SignNet weights")


def test_an_ensemble_member_whose_weights_are_missing_is_named(tmp_path):
    from physattack.cli import build
    from physattack.cli.attack import compose

    cfg = compose("+scene=stop_sign", "victim=ensemble", "+victim.members.mine._target_=physattack.victims.load_signnet",
                  f"+victim.members.mine.weights={tmp_path / 'none.safetensors'}")
    with pytest.raises(VictimError, match=r"^victim\.members\.mine: SignNet weights not found at "):
        build.victim(cfg.victim, "cpu")
