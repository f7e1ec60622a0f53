"""The Ensemble victim: members of one kind, each with its own preprocessing, labels matched by name."""

import pytest
import torch
from torch import nn

from physattack.victims import Classifier, DetNet, Ensemble, VictimError, build_ensemble
from physattack.victims.base import normalize

LABELS = ("stop", "yield", "no_entry")


class Recorder(Classifier):
    """A tiny classifier that declares an input size and its own normalization but does not resize:
    it records the shape and statistics of what reaches its network."""

    def __init__(self, labels=LABELS, input_size=32, mean=0.5, std=0.25, seed=0):
        super().__init__()
        self.labels, self.input_size, self.mean, self.std = tuple(labels), input_size, mean, std
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(4, len(self.labels)))
        self.seen = []
        self.freeze()

    def logits(self, images):
        x = normalize(images, (self.mean,) * 3, (self.std,) * 3)
        self.seen.append((tuple(x.shape), float(x.detach().mean())))
        return self.net(x)


def one_sentence(msg: str) -> bool:
    return msg.count(". ") == 0 and msg.endswith(".") and "\n" not in msg


def test_each_member_gets_its_own_input_size_and_normalization():
    small, large = Recorder(input_size=32, mean=0.5, std=0.25), Recorder(input_size=48, mean=0.0, std=1.0, seed=1)
    ens = Ensemble([small, large], names=["small", "large"])
    images = torch.full((2, 3, 64, 64), 0.75)
    ens(images)
    assert small.seen == [((2, 3, 32, 32), pytest.approx(1.0))]       # (0.75 - 0.5) / 0.25
    assert large.seen == [((2, 3, 48, 48), pytest.approx(0.75))]      # (0.75 - 0) / 1


def test_forward_gives_the_members_mean_probability_by_label_name():
    a = Recorder(seed=0)
    b = Recorder(labels=("no_entry", "stop", "yield", "keep_right"), seed=1)    # other order, one more label
    ens = Ensemble([a, b], names=["a", "b"])
    x = torch.rand(3, 3, 32, 32)
    pa = torch.softmax(a(x), 1)
    pb = torch.softmax(b(x), 1)[:, [1, 2, 0]]            # b's probabilities of a's labels, by name
    mean = (pa + pb) / 2
    logits = ens(x)
    assert torch.allclose(torch.softmax(logits, 1), mean / mean.sum(1, keepdim=True), atol=1e-6)
    assert torch.allclose(logits.sum(1), torch.zeros(3), atol=1e-5)          # logits, not log-probabilities
    assert ens.labels == LABELS
    assert ens.label_index("yield") == 1 and ens.member_label_indices("yield") == [1, 2]
    assert ens.label_set("stop") == (0,)


def test_mean_and_hardest_weighting():
    mean = Ensemble([Recorder(), Recorder(seed=1)])
    assert torch.allclose(mean.weights([0.1, 3.0]), torch.tensor([0.5, 0.5], dtype=torch.float64))
    hardest = Ensemble([Recorder(), Recorder(seed=1), Recorder(seed=2)], weighting="hardest", temperature=0.5)
    w = hardest.weights([0.1, 3.0, 1.0])
    assert float(w.sum()) == pytest.approx(1.0)
    assert w[1] > w[2] > w[0]                            # the member fooled least weighs most
    assert torch.allclose(w, torch.softmax(torch.tensor([0.1, 3.0, 1.0], dtype=torch.float64) / 0.5, 0))


def test_emphasis_multiplies_a_members_weight_after_the_weighting():
    mean = build_ensemble({"a": Recorder(), "b": Recorder(seed=1)}, emphasis={"b": 3})
    assert torch.allclose(mean.weights([0.1, 3.0]), torch.tensor([0.25, 0.75], dtype=torch.float64))
    hardest = build_ensemble({"a": Recorder(), "b": Recorder(seed=1), "c": Recorder(seed=2)}, weighting="hardest",
                             temperature=0.5, emphasis={"a": 4.0})
    soft = torch.softmax(torch.tensor([0.1, 3.0, 1.0], dtype=torch.float64) / 0.5, 0) * torch.tensor([4.0, 1, 1])
    assert torch.allclose(hardest.weights([0.1, 3.0, 1.0]), soft / soft.sum())
    assert torch.allclose(hardest.emphasize(None).weights([0.1, 3.0, 1.0]), hardest.emphasize({}).weights(
        [0.1, 3.0, 1.0])) and float(hardest.weights([0.1, 3.0, 1.0])[0]) < 0.1      # None: the weighting alone


@pytest.mark.parametrize("emphasis, message", [({"zoo": 2}, "not a member of the ensemble"),
                                               ({"b": 0}, r"victim.emphasis.b must be > 0"),
                                               ({"b": "x"}, r"victim.emphasis.b must be a number")])
def test_bad_emphasis_names_the_key(emphasis, message):
    with pytest.raises(VictimError, match=message) as e:
        build_ensemble({"a": Recorder(), "b": Recorder(seed=1)}, emphasis=emphasis)
    assert one_sentence(str(e.value))


def test_ensemble_is_frozen_and_moves_as_one_module():
    ens = build_ensemble({"a": Recorder(), "b": Recorder(seed=1)})
    assert not ens.training and all(not p.requires_grad for p in ens.parameters())
    assert len(list(ens.parameters())) == 2 * len(list(Recorder().parameters()))
    assert ens.names == ("a", "b") and not ens.is_detector


def test_an_empty_ensemble_is_refused():
    with pytest.raises(VictimError, match="at least one member") as e:
        Ensemble([])
    assert one_sentence(str(e.value))
    with pytest.raises(VictimError, match="at least one member"):
        build_ensemble({})


def test_a_member_lacking_the_target_is_named():
    ens = Ensemble([Recorder(), Recorder(labels=("stop", "no_entry"), seed=1)], names=["signnet", "narrow"])
    with pytest.raises(VictimError) as e:
        ens.label_index("yield")
    msg = str(e.value)
    assert "'narrow'" in msg and "'yield'" in msg and "stop, no_entry" in msg and "victim.members" in msg
    assert one_sentence(msg)
    ens.label_index("stop")                             # what every member has is fine


def test_mixing_a_detector_and_a_classifier_is_refused():
    with pytest.raises(VictimError) as e:
        Ensemble([Recorder(), DetNet(LABELS, width=4, neck=8, input_size=64).freeze()], names=["signnet", "detnet"])
    msg = str(e.value)
    assert "'detnet' is a detector" in msg and "'signnet' is a classifier" in msg and one_sentence(msg)


@pytest.mark.parametrize("kwargs, words", [
    ({"names": ["a"]}, "2 members but 1 names"),
    ({"names": ["a", "a"]}, "'a' is used twice"),
    ({"weighting": "max"}, "victim.weighting must be one of mean, hardest"),
    ({"temperature": 0.0}, "victim.temperature must be > 0"),
    ({"diversity": 1.5}, "victim.diversity must be"),
    ({"diversity_scale": 0.0}, r"victim.diversity_scale must be in \(0, 1\]"),
])
def test_bad_settings_are_one_sentence(kwargs, words):
    with pytest.raises(VictimError, match=words) as e:
        Ensemble([Recorder(), Recorder(seed=1)], **kwargs)
    assert "\n" not in str(e.value)


def test_detector_ensemble_renders_at_the_largest_input_and_answers_as_its_first_member():
    first, second = (DetNet(LABELS, width=4, neck=8, input_size=s).freeze() for s in (64, 96))
    ens = Ensemble([first, second], names=["d64", "d96"])
    assert ens.is_detector and ens.input_size == 96 and ens.score_threshold == first.score_threshold
    x = torch.rand(1, 3, 96, 96)
    assert torch.equal(ens(x).candidate_scores, first(x).candidate_scores)


def test_the_config_composes_passes_the_door_and_builds_its_members():
    from hydra import compose, initialize_config_module

    from physattack.cli.build import make
    from physattack.cli.door import check_constructors

    with initialize_config_module("physattack.conf", version_base="1.3"):
        cfg = compose("config", overrides=["+scene=stop_sign", "attack=yield", "victim=ensemble"])
    check_constructors(cfg)
    ens = make(cfg.victim)
    assert isinstance(ens, Ensemble) and ens.names[0] == "signnet_clear" and len(ens.names) >= 3
    families = {cfg.evaluation.families[n] for n in ens.names}
    assert families == {"vgg", "resnet", "mobilenet"}                  # the attack side of the zoo's split
    assert ens.weighting == "mean" and ens.diversity == 0.0
    held_out = set(cfg.evaluation.victims) - set(ens.names)      # other families, and SignNet's siblings
    assert {"zoo_tinynet_e", "zoo_convnext_atto", "signnet_seed1"} <= held_out
    assert ens.label_index("yield") == ens.members[0].label_index("yield")


def test_input_diversity_shrinks_and_shifts_each_view_from_the_generator_and_passes_gradients():
    from physattack.victims.ensemble import diverse_inputs

    x = torch.rand(6, 3, 32, 32, requires_grad=True)
    assert torch.equal(diverse_inputs(x, 0.0, 0.8, torch.Generator().manual_seed(0)), x)
    a = diverse_inputs(x, 1.0, 0.6, torch.Generator().manual_seed(0))
    b = diverse_inputs(x, 1.0, 0.6, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and a.shape == x.shape
    border = torch.cat([a[..., 0, :], a[..., -1, :], a[..., :, 0], a[..., :, -1]], dim=-1)
    assert (border.abs().amax(dim=(1, 2)) == 0).sum() >= 1        # a view shrunk off an edge leaves it zero
    assert not torch.equal(a[0], a[1]) or not torch.equal(a[0], x[0])
    a.sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_attack_inputs_apply_diversity_only_when_asked_and_never_to_evaluation():
    ens = Ensemble([Recorder(), Recorder(seed=1)], diversity=1.0, diversity_scale=0.5)
    x = torch.rand(2, 3, 32, 32)
    member = ens.members[0]
    assert torch.equal(ens.attack_inputs(member, x), ens.member_inputs(member, x))      # no generator: no draw
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    assert not torch.equal(ens.attack_inputs(member, x, g), x) and not torch.equal(g.get_state(), state)
    off = Ensemble([Recorder(), Recorder(seed=1)])
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    assert torch.equal(off.attack_inputs(off.members[0], x, g), x) and torch.equal(g.get_state(), state)


class Relu(Recorder):
    """A Recorder whose network has a ReLU layer for erosion to drop."""

    def __init__(self, seed=0):
        super().__init__(seed=seed)
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                 nn.Linear(8, len(self.labels)))
        self.freeze()


def test_erosion_drops_activations_from_the_generator_only_inside_the_block():
    ens = Ensemble([Relu(), Relu(seed=1)], erosion=0.5)
    member, x = ens.members[0], torch.rand(4, 3, 32, 32)
    clean = member(x)
    g = torch.Generator().manual_seed(5)
    with ens.eroded(member, g) as layers:
        a = member(x)
    assert layers == 1 and not torch.allclose(a, clean)
    with ens.eroded(member, torch.Generator().manual_seed(5)):
        b = member(x)
    assert torch.equal(a, b)                                        # the same draws give the same network
    assert torch.equal(member(x), clean)                            # the hooks are gone after the block
    with ens.eroded(member, torch.Generator().manual_seed(6)):
        assert not torch.equal(member(x), a)
    xg = x.clone().requires_grad_()
    with ens.eroded(member, torch.Generator().manual_seed(5)):
        member(xg)[:, 1].sum().backward()
    assert xg.grad is not None and xg.grad.abs().sum() > 0          # gradients pass the dropped layers


def test_erosion_off_or_without_a_generator_draws_nothing():
    off = Ensemble([Relu(), Relu(seed=1)])
    g = torch.Generator().manual_seed(3)
    state = g.get_state()
    with off.eroded(off.members[0], g) as layers:
        off.members[0](torch.rand(2, 3, 32, 32))
    assert layers == 0 and torch.equal(g.get_state(), state)
    on = Ensemble([Relu(), Relu(seed=1)], erosion=0.3)
    with on.eroded(on.members[0], None) as layers:
        assert layers == 0
    with pytest.raises(VictimError, match=r"victim.erosion must be in \[0, 1\)"):
        Ensemble([Relu()], erosion=1.0)


def test_the_convnext_ensemble_holds_out_three_families_no_member_shares():
    from hydra import compose, initialize_config_module

    from physattack.cli.door import check_constructors

    with initialize_config_module("physattack.conf", version_base="1.3"):
        cfg = compose("config", overrides=["+scene=stop_sign", "attack=yield", "victim=ensemble_convnext"])
    check_constructors(cfg)
    families = cfg.evaluation.families
    members = list(cfg.victim.members)
    assert members[0] == "signnet_clear" and {families[n] for n in members} == {"vgg", "resnet", "convnext"}
    held_out_families = {families[n] for n in cfg.evaluation.victims if n not in members} - {families[n] for n in members}
    assert held_out_families == {"efficientnet", "mobilenet", "vit"}
    assert cfg.victim.weighting == "hardest"
