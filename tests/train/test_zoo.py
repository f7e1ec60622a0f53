"""The victim zoo's training (``python -m physattack.train zoo``): a tiny member end to end, the trained
file loading back as a timm victim with identical logits, hard backgrounds, one-sentence refusals, and
every bundled member (conf/victim/zoo_*.yaml) holding its published figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

pytest.importorskip("timm")

from physattack.cli.build import make  # noqa: E402
from physattack.cli.train import main  # noqa: E402
from physattack.eot import BackgroundBank  # noqa: E402
from physattack.train.zoo import (HardBackgroundBank, ZooTraining, augment, save_member,  # noqa: E402
                                  train_member, victim_config)
from physattack.cli.train import training_world  # noqa: E402
from physattack.victims.signnet import default_weights  # noqa: E402

ARCH = "mobilenetv3_small_050"      # timm's smallest MobileNetV3: a tiny member trains in seconds
TINY = dict(arch=ARCH, per_class=2, test_per_class=1, epochs=1, batch_size=6, image_size=32, input_size=32,
            hard=True, normalization="half", augment="shift_erase")
CONF = Path(__file__).resolve().parents[2] / "conf" / "victim"


@pytest.fixture(scope="module")
def member():
    torch.set_num_threads(1)
    return train_member(ZooTraining(**TINY), training_world())


def test_a_trained_member_loads_back_through_its_victim_config_with_identical_logits(member, tmp_path):
    victim, meta = member
    assert meta["train"]["hard_views"] == 9 and meta["heldout_views"] == meta["heldout_hard_views"] == 9
    assert 0 <= meta["heldout_top1"] <= 1 and 0 <= meta["heldout_hard_top1"] <= 1
    out, meta_path = save_member(tmp_path / "zoo_tiny.safetensors", victim, meta)
    assert json.loads(meta_path.read_text())["victim"]["mean"] == [0.5, 0.5, 0.5]
    config = tmp_path / "zoo_tiny.yaml"
    config.write_text(victim_config(meta, out))
    loaded = make(OmegaConf.load(config))
    x = torch.rand(3, 3, 40, 40)
    assert loaded.labels == victim.labels and loaded.input_size == 32
    assert torch.equal(loaded(x), victim(x))            # the weights as stored (float16) are the ones measured


def test_the_command_records_itself_writes_a_victim_config_and_never_overwrites(tmp_path, capsys):
    out, config = tmp_path / "w" / "zoo_tiny.safetensors", tmp_path / "zoo_tiny.yaml"
    argv = ["zoo", f"arch={ARCH}", "name=zoo_tiny", f"out={out}", f"config={config}", "per_class=2",
            "test_per_class=1", "epochs=1", "batch_size=6", "image_size=32", "input_size=32"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "held-out top-1" in text and "hard held-out top-1" in text and "victim=zoo_tiny" in text
    meta = json.loads(out.with_suffix(".json").read_text())
    assert meta["command"] == "python -m physattack.train " + " ".join(argv)
    assert meta["arch"] == ARCH and meta["storage"] == "float16"
    spec = OmegaConf.load(config)
    assert spec.weights == str(out) and spec.arch == ARCH and list(spec.labels) == meta["labels"]
    assert make(spec).labels == tuple(meta["labels"])

    before = out.read_bytes()
    assert main(argv) == 2                              # refused before anything is rendered
    err = capsys.readouterr().err
    assert "already exists" in err and "overwrite=true" in err and err.count("\n") == 1
    assert out.read_bytes() == before


def _colour_shares(images: torch.Tensor) -> dict[str, float]:
    r, g, b = images[:, 0], images[:, 1], images[:, 2]
    masks = {"red": (r > 0.45) & (g < 0.25) & (b < 0.25),
             "orange": (r > 0.6) & (g > 0.25) & (g < 0.6) & (b < 0.2),
             "brown": (r > 0.25) & (r < 0.6) & (g > 0.12) & (g < 0.4) & (b < 0.2) & (r > 1.3 * g)}
    return {k: float(m.float().mean()) for k, m in masks.items()}


def test_hard_backgrounds_hold_clutter_in_the_sign_colours():
    plain, hard = BackgroundBank(8, seed=3), HardBackgroundBank(8, seed=3)
    assert hard.images.shape == plain.images.shape and 0 <= float(hard.images.min()) <= float(hard.images.max()) <= 1
    plain_shares, hard_shares = _colour_shares(plain.images), _colour_shares(hard.images)
    for colour in ("red", "orange", "brown"):
        assert hard_shares[colour] > 0.02 and plain_shares[colour] < 0.005, (colour, hard_shares, plain_shares)
    assert torch.equal(HardBackgroundBank(8, seed=3).images, hard.images)      # a seed makes the same bank


def test_augmentation_keeps_images_in_range_and_replays_from_its_generator():
    x = torch.rand(4, 3, 24, 24)
    a = augment(x, "shift_erase", torch.Generator().manual_seed(1))
    assert a.shape == x.shape and 0 <= float(a.min()) and float(a.max()) <= 1 and not torch.equal(a, x)
    assert torch.equal(a, augment(x, "shift_erase", torch.Generator().manual_seed(1)))
    assert torch.equal(augment(x, "none", torch.Generator()), x)


@pytest.mark.parametrize("argv, words", [
    (["zoo", "epochs=0"], "epochs must be an integer >= 1"),
    (["zoo", "hard_share=1.5"], "hard_share must be in [0, 1]"),
    (["zoo", "hard_frame=[0.9,0.2]"], "hard_frame must be [min, max]"),
    (["zoo", "hard_distance_m=[0,60]"], "hard_distance_m must be [min, max] with 0 < min"),
    (["zoo", "input_size=8"], "input_size must be an integer in [16, 512]"),
    (["zoo", "normalization=imagnet"], "did you mean imagenet"),
    (["zoo", "augment=flip"], "augment must be one of none, shift, erase, shift_erase"),
    (["zoo", "storage=int8"], "storage must be one of float16, float32"),
    (["zoo", "threads=0"], "threads must be an integer >= 1"),
    (["zoo", "name=a/b"], "may hold only letters"),
    (["zoo", "config=victim.yml"], "must name a .yaml file"),
    (["zoo", "arch=resnet10x", "per_class=2", "batch_size=4"], "did you mean resnet10t"),
    (["zoo", "arch=vit_tiny_patch16_224", "model_kwargs={depth:1}", "per_class=2", "batch_size=4"],
     "does not take 64-pixel inputs"),
])
def test_bad_options_are_one_sentence_and_exit_2(tmp_path, capsys, argv, words):
    assert main([*argv, f"out={tmp_path / 'm.safetensors'}"]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1
    assert not (tmp_path / "m.safetensors").exists()


@pytest.mark.parametrize("config", sorted(CONF.glob("zoo_*.yaml")), ids=lambda p: p.stem)
def test_bundled_members_load_and_keep_their_published_figures(config):
    spec = OmegaConf.load(config)
    weights = default_weights().parent / f"{spec.name}.safetensors"
    meta = json.loads(weights.with_suffix(".json").read_text())
    assert weights.stat().st_size <= 10_000_000 and meta["command"].startswith("python -m physattack.train zoo ")
    assert meta["heldout_top1"] >= 0.97 and "heldout_hard_top1" in meta
    victim = make(spec)
    assert list(victim.labels) == meta["labels"] and victim.input_size == meta["input_size"]

    from hydra import compose, initialize_config_module

    from physattack.cli.door import check_constructors
    with initialize_config_module("physattack.conf", version_base="1.3"):
        cfg = compose("config", overrides=["+scene=stop_sign", "attack=yield", f"victim={config.stem}"])
    check_constructors(cfg)                             # victim=<member> passes the door as written
    assert cfg.victim.name == config.stem
