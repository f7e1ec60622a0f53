import json

import pytest
import torch

from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.scene.signs import SIGNS
from physattack.victims import VictimError, load_signnet
from physattack.victims.signnet import SignNet, default_weights


def test_bundled_weights_record_their_heldout_accuracy():
    meta = json.loads(default_weights().with_suffix(".json").read_text())
    assert meta["heldout_top1"] >= 0.97
    assert meta["heldout_views"] >= 1000
    assert len(meta["labels"]) >= 8 and "yield" in meta["labels"] and "stop" in meta["labels"]
    assert default_weights().stat().st_size < 5 * 2**20


def test_bundled_victim_reads_clean_renders_of_every_sign(signnet):
    pipe = ViewPipeline(Renderer(), BackgroundBank(8, seed=4242), (96, 96), object_width_m=0.75)
    sampler = ViewSampler(distance_m=(4.0, 12.0), azimuth_deg=(-30.0, 30.0), background_count=8)
    g = torch.Generator().manual_seed(3)
    correct = total = 0
    with torch.no_grad():
        for label, name in enumerate(SIGNS):
            scene = load_scene(name)
            pred = signnet(pipe(scene, scene.texture, sampler.sample(6, g)).images).argmax(1)
            correct += int((pred == signnet.label_index(scene.class_name)).sum())
            total += len(pred)
    assert correct / total >= 0.9


def test_victim_is_frozen_and_deterministic(signnet):
    assert not signnet.training and all(not p.requires_grad for p in signnet.parameters())
    x = torch.rand(2, 3, 96, 96, requires_grad=True)
    a, b = signnet(x), signnet(x)
    assert torch.equal(a, b)
    a[:, 0].sum().backward()
    assert x.grad.abs().sum() > 0


def test_unknown_label_lists_the_labels(signnet):
    with pytest.raises(VictimError, match="has no label 'banana'.*yield"):
        signnet.label_index("banana")


def test_missing_weights_give_one_clear_sentence(tmp_path):
    with pytest.raises(VictimError, match="python -m physattack.train signnet"):
        load_signnet(tmp_path / "absent.safetensors")


def test_signnet_accepts_any_input_size():
    net = SignNet(["a", "b", "c"]).eval()
    assert net(torch.rand(2, 3, 96, 96)).shape == (2, 3)
    assert net(torch.rand(1, 3, 40, 40)).shape == (1, 3)
