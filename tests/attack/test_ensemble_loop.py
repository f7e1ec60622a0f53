"""Ensemble EOT in the loop: one render per step, members asked one at a time with their own
preprocessing, the ensemble's gradient the weighted mean of the members', held-out victims untouched."""

import os
import signal
from importlib import resources
from pathlib import Path

import pytest
import torch
from torch import nn

from physattack.attack import AttackSetup, EOTAttack
from physattack.attack.loop import LoopState
from physattack.config import RunConfig
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.eot.frames import FrameSampler
from physattack.patch import sticker_for_scene
from physattack.printing import load_palette
from physattack.render import Renderer
from physattack.victims import Classifier, DetNet, Ensemble, build_ensemble, load_detnet, load_signnet


def bundled(name: str):
    return load_signnet(Path(str(resources.files("physattack.assets"))) / f"{name}.safetensors")


@pytest.fixture(scope="module")
def signnets():
    return {name: bundled(name) for name in ("signnet", "signnet_seed1", "signnet_w8_seed2")}


@pytest.fixture(scope="module")
def parts(stop_scene):
    return {"scene": stop_scene, "pipeline": ViewPipeline(Renderer(), BackgroundBank(8, seed=0), (48, 48)),
            "sampler": ViewSampler(background_count=8, jpeg_share=0.0), "palette": load_palette()}


class CountingPipeline:
    def __init__(self, pipeline):
        self.pipeline, self.calls = pipeline, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.pipeline(*args, **kwargs)


class Spy(Classifier):
    """A held-out victim: calling it fails the test."""

    def __init__(self, labels):
        super().__init__()
        self.labels = tuple(labels)

    def logits(self, images):
        raise AssertionError("a held-out victim was called during optimization")


class Recorder(Classifier):
    """A classifier with its own input size and normalization (it does not resize itself) and its
    labels in another order than SignNet's; it records what reaches its network."""

    def __init__(self, labels, input_size=32):
        super().__init__()
        self.labels, self.input_size = tuple(reversed(labels)), input_size
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(4, len(self.labels)))
        self.seen = []
        self.freeze()

    def logits(self, images):
        x = images * 2 - 1
        self.seen.append((tuple(x.shape), float(x.detach().min()) >= -1.0))
        return self.net(x)


class Tracker:
    def __init__(self):
        self.logged = []

    def log(self, values, step):
        self.logged.append(dict(values))


def attack_run(parts, victim, tmp_path, steps=2, objective="targeted", target="yield", pipeline=None, sampler=None,
               tracker=None, search=0, batch_size=4, shape="bars"):
    patch = sticker_for_scene(parts["scene"], shape=shape)
    attack = EOTAttack(objective=objective, target=target, steps=steps, batch_size=batch_size, lr=0.2,
                       checkpoint_every=0, mask_search_steps=search)
    setup = AttackSetup(scene=parts["scene"], patch=patch, victim=victim, pipeline=pipeline or parts["pipeline"],
                        sampler=sampler or parts["sampler"], palette=parts["palette"])
    return attack.run(setup, RunConfig(seed=0, progress=False), tmp_path, tracker=tracker)


def count_calls(module: nn.Module) -> list:
    calls = []
    module.register_forward_pre_hook(lambda m, args: calls.append(tuple(args[0].shape)))
    return calls


def test_one_render_per_step_for_three_members(parts, signnets, tmp_path):
    members = {name: bundled(name) for name in signnets}          # fresh modules: hooks stay in this test
    calls = {name: count_calls(m) for name, m in members.items()}
    pipeline = CountingPipeline(parts["pipeline"])
    result = attack_run(parts, build_ensemble(members), tmp_path, steps=2, pipeline=pipeline)
    assert result.steps_done == 2 and result.zero_grad_steps == 0
    assert pipeline.calls == 2
    assert {name: len(c) for name, c in calls.items()} == {name: 2 for name in members}


def test_a_classifier_ensembles_mask_search_asks_the_members_mean_probability(parts, signnets, tmp_path,
                                                                              monkeypatch):
    """RP2's first stage through Ensemble.forward, as measured best for transfer (README)."""
    members = {name: bundled(name) for name in ("signnet", "signnet_seed1")}
    calls = {name: count_calls(m) for name, m in members.items()}
    forwards = []
    forward = Ensemble.forward
    monkeypatch.setattr(Ensemble, "forward", lambda self, images: forwards.append(1) or forward(self, images))
    result = attack_run(parts, build_ensemble(members), tmp_path, steps=1, search=3, shape="search")
    assert result.steps_done == 1 and result.zero_grad_steps == 0
    assert len(forwards) == 3
    assert {name: len(c) for name, c in calls.items()} == {name: 4 for name in members}   # 3 search + 1 step


def tiny_detector_ensemble():
    bundled_detnet = load_detnet()
    torch.manual_seed(1)
    other = DetNet(tuple(reversed(bundled_detnet.labels)), width=4, neck=8, input_size=64).freeze()
    return Ensemble([bundled_detnet, other], names=["detnet", "tiny"])


def detector_parts(ensemble):
    size = (ensemble.input_size,) * 2
    sampler = FrameSampler(ViewSampler(background_count=8, jpeg_share=0.0, distance_m=(4.0, 12.0)))
    return sampler, CountingPipeline(ViewPipeline(Renderer(), BackgroundBank(8, seed=0), size))


def test_a_detector_ensembles_mask_search_asks_every_member_as_the_steps_do(parts, tmp_path, monkeypatch):
    """A detector ensemble's forward is its first member: the search must not place the stickers for it alone."""
    ensemble = tiny_detector_ensemble()
    calls = {name: count_calls(m) for name, m in zip(ensemble.names, ensemble.members)}

    def not_here(self, images):
        raise AssertionError("the mask search went through Ensemble.forward")

    monkeypatch.setattr(Ensemble, "forward", not_here)
    sampler, pipeline = detector_parts(ensemble)
    result = attack_run(parts, ensemble, tmp_path / "ens", steps=1, objective="hide", target=None, search=2,
                        shape="search", pipeline=pipeline, sampler=sampler, batch_size=2)
    assert result.steps_done == 1 and pipeline.calls == 3
    assert {name: len(c) for name, c in calls.items()} == {"detnet": 3, "tiny": 3}     # 2 search + 1 step
    monkeypatch.undo()
    # one member: the same mask as the detector alone, so the members' image gradient reaches the search
    masks = []
    for victim, out in ((ensemble.members[0], "alone"), (Ensemble([ensemble.members[0]]), "one")):
        patch = sticker_for_scene(parts["scene"], shape="search")
        attack = EOTAttack(objective="hide", target=None, steps=1, batch_size=2, lr=0.2, checkpoint_every=0,
                           mask_search_steps=2)
        sampler, pipeline = detector_parts(ensemble)
        attack.run(AttackSetup(scene=parts["scene"], patch=patch, victim=victim, pipeline=pipeline, sampler=sampler,
                               palette=parts["palette"]), RunConfig(seed=0, progress=False), tmp_path / out)
        masks.append(patch.mask)
    assert masks[0].sum() > 0
    assert torch.equal(masks[0], masks[1])


def test_each_member_gets_its_own_input_size_and_labels_in_the_loop(parts, signnets, tmp_path):
    signnet = bundled("signnet")
    reaching_signnet = []
    signnet.features.register_forward_pre_hook(lambda m, args: reaching_signnet.append(tuple(args[0].shape)))
    recorder = Recorder(signnet.labels, input_size=32)
    ensemble = Ensemble([signnet, recorder], names=["signnet", "recorder"])
    assert ensemble.member_label_indices("yield") == [1, len(signnet.labels) - 2]
    result = attack_run(parts, ensemble, tmp_path, steps=2)               # views are 48 px
    assert reaching_signnet == [(4, 3, 64, 64)] * 2
    assert recorder.seen == [((4, 3, 32, 32), True)] * 2
    assert set(result.history[-1]["member_success"]) == {"signnet", "recorder"}


def one_step_gradient(parts, victim, weighting_record=None):
    """The patch's gradient after one step on the first draw of seed 0 (the same draw for any victim)."""
    patch = sticker_for_scene(parts["scene"], shape="bars")
    attack = EOTAttack(target="yield", steps=4, batch_size=4, lr=0.2, checkpoint_every=0, mask_search_steps=0)
    setup = AttackSetup(scene=parts["scene"], patch=patch, victim=victim, pipeline=parts["pipeline"],
                        sampler=parts["sampler"], palette=parts["palette"])
    torch.manual_seed(0)
    loop = attack._start(setup, RunConfig(seed=0, progress=False), torch.Generator().manual_seed(0))
    record = attack._step(loop, LoopState(best_state={}))
    return torch.cat([p.grad.flatten() for p in patch.parameters()]), record


@pytest.mark.parametrize("weighting", ["mean", "hardest"])
def test_the_ensemble_gradient_is_the_weighted_mean_of_the_members_gradients(parts, signnets, weighting):
    names = ["signnet", "signnet_seed1", "signnet_w8_seed2"]
    ensemble = Ensemble([signnets[n] for n in names], names=names, weighting=weighting, temperature=2.0)
    together, record = one_step_gradient(parts, ensemble)
    alone = [one_step_gradient(parts, signnets[n]) for n in names]
    weights = record.get("member_weight", {n: 1 / len(names) for n in names})
    if weighting == "hardest":
        assert len(set(round(w, 6) for w in weights.values())) == 3        # the weights really differ
    expected = sum(weights[n] * grad for n, (grad, _) in zip(names, alone))
    assert together.abs().sum() > 0
    assert torch.allclose(together, expected, atol=1e-6, rtol=1e-4), float((together - expected).abs().max())
    for n, (_, single) in zip(names, alone):                                # same draw, same per-member figures
        assert record["member_loss"][n] == pytest.approx(single["adv_loss"], rel=1e-5)
        assert record["member_success"][n] == single["batch_success"]
    assert record["batch_success"] == pytest.approx(sum(record["member_success"].values()) / 3)


def test_per_member_success_is_logged_and_picks_the_best_patch_by_its_mean(parts, signnets, tmp_path):
    tracker = Tracker()
    ensemble = build_ensemble({"a": signnets["signnet"], "b": signnets["signnet_seed1"]}, weighting="hardest")
    result = attack_run(parts, ensemble, tmp_path, steps=2, objective="untargeted", target=None, tracker=tracker)
    last = tracker.logged[-1]
    assert {"train/success/a", "train/success/b", "train/member_loss/a", "train/member_weight/b"} <= set(last)
    assert all(not isinstance(v, dict) for v in last.values())
    h = result.history[-1]
    assert h["batch_success"] == pytest.approx((h["member_success"]["a"] + h["member_success"]["b"]) / 2)
    assert sum(h["member_weight"].values()) == pytest.approx(1.0)


@pytest.mark.parametrize("objective, target", [("hide", None), ("mislabel", "yield")])
def test_detector_ensembles_hide_and_mislabel(parts, tmp_path, objective, target):
    ensemble = tiny_detector_ensemble()
    sampler, pipeline = detector_parts(ensemble)
    result = attack_run(parts, ensemble, tmp_path, steps=2, objective=objective, target=target, pipeline=pipeline,
                        sampler=sampler, batch_size=2)
    assert result.steps_done == 2 and result.zero_grad_steps == 0 and pipeline.calls == 2
    assert set(result.history[-1]["member_success"]) == {"detnet", "tiny"}


class SigtermAt:
    """A sampler that sends this process SIGTERM during its n-th draw."""

    def __init__(self, sampler, n):
        self.sampler, self.n, self.calls = sampler, n, 0

    def sample(self, n, generator):
        self.calls += 1
        if self.calls == self.n:
            os.kill(os.getpid(), signal.SIGTERM)
        return self.sampler.sample(n, generator)


def test_an_interrupted_ensemble_run_resumes_to_the_bit_identical_patch(parts, signnets, tmp_path):
    ensemble = build_ensemble({"a": signnets["signnet"], "b": signnets["signnet_seed1"]}, weighting="hardest")

    def go(folder, sampler=None, resume=None):
        patch = sticker_for_scene(parts["scene"], shape="bars")
        attack = EOTAttack(target="yield", steps=3, batch_size=4, lr=0.2, checkpoint_every=1, mask_search_steps=0)
        setup = AttackSetup(scene=parts["scene"], patch=patch, victim=ensemble, pipeline=parts["pipeline"],
                            sampler=sampler or parts["sampler"], palette=parts["palette"])
        run = RunConfig(seed=0, progress=False, resume=resume and str(resume))
        return patch, attack.run(setup, run, tmp_path / folder)

    full, _ = go("full")
    _, stopped = go("part", sampler=SigtermAt(parts["sampler"], 2))
    assert stopped.interrupted and stopped.steps_done == 2
    resumed, result = go("resumed", resume=tmp_path / "part")
    assert result.steps_done == 3 and set(result.history[0]["member_success"]) == {"a", "b"}
    assert torch.equal(full.logits, resumed.logits)


@pytest.mark.parametrize("augmentation", [{"diversity": 0.7}, {"erosion": 0.1}])
def test_input_diversity_and_erosion_draw_from_the_runs_generator_so_resume_stays_bit_identical(
        parts, signnets, tmp_path, augmentation):
    ensemble = build_ensemble({"a": signnets["signnet"], "b": signnets["signnet_seed1"]}, **augmentation)

    def go(folder, sampler=None, resume=None):
        patch = sticker_for_scene(parts["scene"], shape="bars")
        attack = EOTAttack(target="yield", steps=3, batch_size=4, lr=0.2, checkpoint_every=1, mask_search_steps=0)
        setup = AttackSetup(scene=parts["scene"], patch=patch, victim=ensemble, pipeline=parts["pipeline"],
                            sampler=sampler or parts["sampler"], palette=parts["palette"])
        return patch, attack.run(setup, RunConfig(seed=0, progress=False, resume=resume and str(resume)),
                                 tmp_path / folder)

    full, _ = go("full")
    again, _ = go("again")
    _, stopped = go("part", sampler=SigtermAt(parts["sampler"], 2))
    resumed, _ = go("resumed", resume=tmp_path / "part")
    assert torch.equal(full.logits, again.logits) and torch.equal(full.logits, resumed.logits)
    plain = build_ensemble({"a": signnets["signnet"], "b": signnets["signnet_seed1"]})
    ensemble_off = plain
    patch = sticker_for_scene(parts["scene"], shape="bars")
    EOTAttack(target="yield", steps=3, batch_size=4, lr=0.2, checkpoint_every=0, mask_search_steps=0).run(
        AttackSetup(scene=parts["scene"], patch=patch, victim=ensemble_off, pipeline=parts["pipeline"],
                    sampler=parts["sampler"], palette=parts["palette"]), RunConfig(seed=0, progress=False),
        tmp_path / "off")
    assert not torch.equal(full.logits, patch.logits)          # the draws changed what the members saw


def test_erosion_masks_are_drawn_on_the_activations_device_and_repeat_with_the_seed(device):
    """Erosion on the run's device (CUDA under benchmarks/gpu_check.sh): the same seed drops the same
    activations, another seed others, and gradients pass the dropped layers."""
    torch.manual_seed(0)
    member = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                           nn.Linear(8, 2)).to(device)
    ensemble = Ensemble([bundled("signnet"), bundled("signnet_seed1")], erosion=0.5)
    x = torch.rand(4, 3, 32, 32, device=device, requires_grad=True)

    def eroded(seed: int):
        with ensemble.eroded(member, torch.Generator().manual_seed(seed)) as layers:
            assert layers == 1
            return member(x)

    a, b, c = eroded(5), eroded(5), eroded(6)
    assert a.device.type == device.type and torch.equal(a, b) and not torch.equal(a, c)
    assert not torch.allclose(a, member(x))
    a[:, 1].sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_attacks_that_learn_from_one_victims_outputs_refuse_an_ensemble(stop_scene, signnets):
    from physattack.attack import AttackError
    from physattack.attack.reprogram import ReprogramAttack

    ensemble = build_ensemble({"a": signnets["signnet"], "b": signnets["signnet_seed1"]})
    with pytest.raises(AttackError, match="ReprogramAttack .* cannot split its steps over an ensemble") as e:
        ReprogramAttack(steps=1, batch_size=2).members_of(ensemble, stop_scene)
    assert "\n" not in str(e.value)
    members = EOTAttack(objective="untargeted", target=None).members_of(ensemble, stop_scene)
    assert [(m.name, m.label) for m in members] == [("a", 0), ("b", 0)]
