"""timm classifiers as victims: skipped unless the `timm` extra is installed; never downloads."""

from __future__ import annotations

import json
import os
import sys

import pytest
import torch
from safetensors.torch import save_file

from physattack.errors import InputError
from physattack.victims import VictimError
from physattack.victims.signnet import default_weights

ARCH = "resnet10t"          # timm's smallest ResNet; random weights here, ~5 M parameters
SIGN_LABELS = json.loads(default_weights().with_suffix(".json").read_text())["labels"]


def test_without_timm_the_error_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)     # as if it were not installed
    from physattack.victims.timm import load_timm_classifier
    with pytest.raises(VictimError, match="pip install timm"):
        load_timm_classifier(ARCH, random_init=True)


@pytest.fixture(scope="module")
def timm():
    return pytest.importorskip("timm")


@pytest.fixture(scope="module")
def signs(timm):
    """A 9-sign resnet10t at 64 px, random weights, frozen."""
    from physattack.victims.timm import load_timm_classifier
    torch.manual_seed(0)
    return load_timm_classifier(ARCH, labels=SIGN_LABELS, preprocessing={"input_size": 64}, random_init=True)


def _randomize_batchnorm(model):
    """Non-trivial running statistics, so that a load that skipped buffers would show in the logits."""
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) + 0.5)


def test_saved_weights_load_to_identical_logits(signs, tmp_path):
    from physattack.victims.timm import load_timm_classifier
    _randomize_batchnorm(signs.model)
    state = signs.model.state_dict()
    x = torch.rand(3, 3, 80, 96)
    want = signs(x)
    st = tmp_path / "signs.safetensors"
    save_file({k: v.contiguous() for k, v in state.items()}, str(st))
    pth = tmp_path / "signs.pth"
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}}, pth)   # timm/DDP checkpoint layout
    for path in (st, pth):
        loaded = load_timm_classifier(ARCH, weights=str(path), labels=SIGN_LABELS, preprocessing={"input_size": 64})
        assert torch.equal(loaded(x), want), path.name
        assert loaded.labels == tuple(SIGN_LABELS) and loaded.label_index("yield") == 1


def test_frozen_in_eval_mode_and_gradients_reach_the_image(signs):
    assert not signs.training and not signs.model.training
    assert not any(p.requires_grad for p in signs.parameters())
    for crop_pct in (None, 0.875):      # the whole view resized, and timm's centre crop
        signs.crop_pct = crop_pct
        x = torch.rand(2, 3, 72, 90, requires_grad=True)
        logits = signs(x)
        assert logits.shape == (2, 9)
        logits[:, signs.label_index("yield")].sum().backward()
        assert x.grad is not None and float(x.grad.abs().sum()) > 0
        if crop_pct:                    # the crop keeps the centre: the border gets no gradient
            assert float(x.grad[..., :, :2].abs().sum()) == 0
    signs.crop_pct = None


def test_preprocessing_comes_from_timms_data_config(timm):
    from physattack.victims.timm import Preprocessing, load_timm_classifier
    victim = load_timm_classifier(ARCH, random_init=True, label_sets="imagenet")
    config = timm.data.resolve_data_config({}, model=victim.model)
    assert (victim.input_size,) * 2 == tuple(config["input_size"][-2:]) == (176, 176)
    assert victim.mean == tuple(config["mean"]) and victim.std == tuple(config["std"])
    assert victim.interpolation == config["interpolation"] == "bicubic"
    assert len(victim.labels) == 1000 and victim.labels[919] == "street sign"
    assert victim.label_set("stop") == (919,)
    x = torch.rand(1, 3, 176, 176)
    assert torch.equal(victim(x), victim.model((x - torch.tensor(victim.mean).view(1, 3, 1, 1))
                                               / torch.tensor(victim.std).view(1, 3, 1, 1)))
    mine = load_timm_classifier(ARCH, labels=SIGN_LABELS, random_init=True,
                                preprocessing=Preprocessing(48, [0.5] * 3, [0.25] * 3, "bilinear"))
    assert (mine.input_size, mine.mean, mine.std, mine.interpolation) == (48, (0.5,) * 3, (0.25,) * 3,
                                                                          "bilinear")


def test_weights_found_in_timms_own_caches_without_the_network(timm, tmp_path, monkeypatch):
    from physattack.victims.timm import load_timm_classifier
    source = load_timm_classifier(ARCH, random_init=True)
    state = {k: v.contiguous() for k, v in source.model.state_dict().items()}
    x = torch.rand(1, 3, 64, 64)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    with pytest.raises(InputError) as err:
        load_timm_classifier(ARCH)
    msg = str(err.value)
    assert f"timm weights for {ARCH} are not on this machine" in msg and str(tmp_path / "hf") in msg
    assert f"timm.create_model('{ARCH}', pretrained=True)" in msg and "\n" not in msg
    # where timm's download leaves them: models--timm--<name.tag>/snapshots/<commit>/model.safetensors
    repo = tmp_path / "hf" / "models--timm--resnet10t.c3_in1k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("0123abcd")
    (repo / "snapshots" / "0123abcd").mkdir(parents=True)
    save_file(state, str(repo / "snapshots" / "0123abcd" / "model.safetensors"))
    assert torch.equal(load_timm_classifier(ARCH)(x), source(x))
    # an older timm's download by URL: torch's hub cache
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    url_name = timm.models.get_pretrained_cfg(ARCH).url.rsplit("/", 1)[-1]
    (tmp_path / "torch" / "hub" / "checkpoints").mkdir(parents=True)
    torch.save(source.model.state_dict(), tmp_path / "torch" / "hub" / "checkpoints" / url_name)
    assert torch.equal(load_timm_classifier(ARCH)(x), source(x))


@pytest.mark.parametrize("name", ["w.safetensors", "w.pth"])
def test_missing_or_damaged_weights_are_one_sentence_naming_the_file(timm, tmp_path, name):
    from physattack.victims.timm import load_timm_classifier
    path = tmp_path / name
    with pytest.raises(InputError) as err:
        load_timm_classifier(ARCH, weights=str(path), labels=SIGN_LABELS)
    assert ARCH in str(err.value) and str(path) in str(err.value)
    path.write_bytes(os.urandom(4096))
    with pytest.raises(InputError) as err:
        load_timm_classifier(ARCH, weights=str(path), labels=SIGN_LABELS)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_weights_of_another_network_and_bad_settings_are_refused(signs, tmp_path):
    from physattack.victims.timm import load_timm_classifier
    path = tmp_path / "signs.safetensors"
    save_file({k: v.contiguous() for k, v in signs.model.state_dict().items()}, str(path))
    with pytest.raises(VictimError, match="does not fit the network"):
        load_timm_classifier(ARCH, weights=str(path))                       # a 1000-class head
    with pytest.raises(VictimError, match="did you mean resnet10t"):
        load_timm_classifier("resnet10")
    with pytest.raises(VictimError, match="num_classes is 5 but victim.labels names 9"):
        load_timm_classifier(ARCH, labels=SIGN_LABELS, num_classes=5, random_init=True)
    with pytest.raises(VictimError, match="give victim.labels"):
        load_timm_classifier(ARCH, num_classes=9, random_init=True)
    with pytest.raises(VictimError, match="model_kwargs"):
        load_timm_classifier(ARCH, model_kwargs={"no_such_argument": 1}, random_init=True)
    with pytest.raises(VictimError, match="crop_pct"):
        load_timm_classifier(ARCH, preprocessing={"crop_pct": 1.5}, random_init=True)
    with pytest.raises(VictimError, match="indices outside"):
        load_timm_classifier(ARCH, labels=SIGN_LABELS, label_sets="imagenet", random_init=True)


def test_the_config_passes_the_door_and_builds_a_sign_model_from_a_file(timm, signs, tmp_path):
    from hydra import compose, initialize_config_module

    from physattack.cli.build import make
    from physattack.cli.door import check_constructors

    path = tmp_path / "signs.safetensors"
    save_file({k: v.contiguous() for k, v in signs.model.state_dict().items()}, str(path))
    overrides = ["+scene=stop_sign", "attack=yield", "victim=timm", f"victim.arch={ARCH}", f"victim.weights={path}",
                 f"victim.labels=[{','.join(SIGN_LABELS)}]", "victim.label_sets=null",
                 "victim.preprocessing.input_size=64", "attack.steps=1"]
    with initialize_config_module("physattack.conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
        bad = compose("config", overrides=overrides + ["victim.preprocessing.crop_pct=abc"])
    check_constructors(cfg)
    with pytest.raises(InputError, match=r"victim\.preprocessing\.crop_pct must be a number in \(0, 1\]"):
        make(bad.victim)
    victim = make(cfg.victim)
    x = torch.rand(2, 3, 64, 64)
    assert victim.labels == tuple(SIGN_LABELS) and torch.equal(victim(x), signs(x))
