"""The feature-level terms (attack.features): ILA's projection, its place in each member's loss, that it moves the
features past the guide's; FIA's aggregate gradient and that it moves the features against it; the refusals."""

from importlib import resources
from pathlib import Path

import pytest
import torch

from physattack.attack import AttackError, AttackSetup, EOTAttack
from physattack.attack.intermediate import FeatureLevel
from physattack.attack.intermediate import Guide, cut, feature_module, importance, projection, tapped
from physattack.attack.loop import LoopState
from physattack.config import RunConfig
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.patch import sticker_for_scene
from physattack.printing import load_palette
from physattack.render import Renderer
from physattack.victims import Ensemble, load_detnet, load_signnet

LAYERS = {"victim": "features.3", "a": "features.3", "b": "features.3"}


def bundled(name: str):
    return load_signnet(Path(str(resources.files("physattack.assets"))) / f"{name}.safetensors")


@pytest.fixture(scope="module")
def parts(stop_scene):
    return {"scene": stop_scene, "pipeline": ViewPipeline(Renderer(), BackgroundBank(8, seed=0), (48, 48)),
            "sampler": ViewSampler(background_count=8, jpeg_share=0.0), "palette": load_palette()}


def setup_for(parts, victim, placed=True):
    return AttackSetup(scene=parts["scene"], patch=sticker_for_scene(parts["scene"], shape="bars"), victim=victim,
                       pipeline=parts["pipeline"], sampler=parts["sampler"], palette=parts["palette"], placed=placed)


def attack(weight, steps=4, term="ila", **kw):
    return EOTAttack(target="yield", steps=steps, batch_size=4, lr=0.2, checkpoint_every=0, mask_search_steps=0,
                     features={"method": term, "weight": weight, "layers": LAYERS, "masks": 2}, **kw)


def first_step(parts, victim, weight):
    setup = setup_for(parts, victim)
    torch.manual_seed(0)
    a = attack(weight)
    loop = a._start(setup, RunConfig(seed=0, progress=False), torch.Generator().manual_seed(0))
    return a._step(loop, LoopState(best_state={}))


def test_the_projection_is_one_at_the_guide_zero_at_the_clean_sign_and_blind_to_orthogonal_change():
    torch.manual_seed(0)
    clean, guide = torch.randn(3, 4, 5, 5), torch.randn(3, 4, 5, 5)
    g = guide - clean
    assert torch.allclose(projection(guide, clean, guide), torch.ones(3))
    assert torch.allclose(projection(clean, clean, guide), torch.zeros(3))
    assert torch.allclose(projection(clean + 2.5 * g, clean, guide), torch.full((3,), 2.5))
    side = torch.randn_like(g)
    side -= (side.flatten(1) * g.flatten(1)).sum(1).view(3, 1, 1, 1) / g.flatten(1).pow(2).sum(1).view(3, 1, 1, 1) * g
    assert torch.allclose(projection(guide + side, clean, guide), torch.ones(3), atol=1e-5)


def test_at_the_guide_each_members_loss_falls_by_the_weight(parts):
    """On the first step the patch is the guide itself: the projection is 1, so every member's loss is its
    objective's minus the weight, and the members are still asked one at a time."""
    members = lambda: Ensemble([bundled("signnet"), bundled("signnet_seed1")], names=["a", "b"])   # noqa: E731
    plain, guided = first_step(parts, members(), 0.0), first_step(parts, members(), 3.0)
    for name in ("a", "b"):
        assert guided["member_loss"][name] == pytest.approx(plain["member_loss"][name] - 3.0, abs=1e-4)
    assert guided["member_success"] == plain["member_success"]


def test_the_term_moves_a_victims_features_past_the_guides(parts, tmp_path):
    """Optimized with the term, the patch moves SignNet's mid-layer features further along the guide's direction
    than the same steps without it do (on views of a draw neither run saw)."""
    signnet = bundled("signnet")
    draw = parts["sampler"].sample(8, torch.Generator().manual_seed(123))
    layer = feature_module(signnet, "victim", LAYERS)

    def features(texture):
        with torch.no_grad(), tapped(layer) as seen:
            signnet(parts["pipeline"](parts["scene"], texture, draw).images)
        return seen[0]

    clean = features(parts["scene"].texture)
    reached = {}
    for weight in (0.0, 5.0):
        setup = setup_for(parts, signnet)
        guide = features(setup.patch.apply(parts["scene"].texture).detach())
        result = attack(weight, steps=6).run(setup, RunConfig(seed=0, progress=False), tmp_path / str(weight))
        setup.patch.load_state_dict(result.best_state)
        with torch.no_grad():
            reached[weight] = float(projection(features(setup.patch.apply(parts["scene"].texture)), clean, guide).mean())
    assert reached[5.0] > 1.0
    assert reached[5.0] > reached[0.0] + 0.05, reached


def test_refusals_name_what_to_give(parts):
    signnet = bundled("signnet")
    with pytest.raises(AttackError, match="give init="):
        attack(1.0)._start(setup_for(parts, signnet, placed=False), RunConfig(seed=0, progress=False),
                           torch.Generator())
    with pytest.raises(AttackError, match=r"attack.features.layers.victim=nope is not a module of victim; give one of: "
                                          r".*features.3"):
        EOTAttack(target="yield", features={"weight": 1, "layers": {"victim": "nope"}})._start(
            setup_for(parts, signnet), RunConfig(seed=0, progress=False), torch.Generator())
    ensemble = Ensemble([signnet, bundled("signnet_seed1")], names=["a", "c"])
    with pytest.raises(AttackError, match=r"names no layer for c; add attack.features.layers.c="):
        attack(1.0)._start(setup_for(parts, ensemble), RunConfig(seed=0, progress=False), torch.Generator())
    diverse = Ensemble([signnet, bundled("signnet_seed1")], names=["a", "b"], diversity=0.5)
    with pytest.raises(AttackError, match="victim.diversity=0"):
        attack(1.0)._start(setup_for(parts, diverse), RunConfig(seed=0, progress=False), torch.Generator())
    with pytest.raises(AttackError, match="attack.method=gradient"):
        attack(1.0, method="query")
    with pytest.raises(AttackError, match="no key 'weigth'"):
        EOTAttack(target="yield", features={"weigth": 1})
    with pytest.raises(AttackError, match="attack.features.weight"):
        EOTAttack(target="yield", features={"weight": -1})
    with pytest.raises(AttackError, match="attack.features.method must be ila or fia, not 'nia'"):
        EOTAttack(target="yield", features={"method": "nia"})
    with pytest.raises(AttackError, match="attack.features.drop"):
        EOTAttack(target="yield", features={"method": "fia", "drop": 1.0})
    detector = load_detnet()
    with pytest.raises(AttackError, match="victim is a detector"):
        EOTAttack(objective="hide", target=None, features={"weight": 1, "layers": {"victim": "backbone"}})._start(
            setup_for(parts, detector), RunConfig(seed=0, progress=False), torch.Generator())
    attack(1.0, term="fia")._start(setup_for(parts, signnet, placed=False), RunConfig(seed=0, progress=False),
                                     torch.Generator())                  # fia needs no init= run


def test_fias_aggregate_gradient_is_the_sum_over_masked_copies_and_the_term_is_its_normalized_product():
    """Δ is the gradient of (stop's logit - yield's) with respect to the features, summed over the masked copies
    (checked against autograd on each copy, the masks drawn again from the same seed); the term is <Δ/|Δ|, f>/|f0|."""
    signnet = bundled("signnet")
    module = feature_module(signnet, "victim", LAYERS)
    torch.manual_seed(1)
    clean = torch.rand(3, 3, 64, 64)
    stop, target = signnet.label_index("stop"), signnet.label_index("yield")
    guide = Guide(FeatureLevel(method="fia", weight=1.0, layers=LAYERS, masks=3, drop=0.3), None, {}, seed=4)
    delta = guide.aggregate_gradient(module, signnet, clean, target, (stop,))
    again = torch.Generator().manual_seed(4 + 7_919)
    expected = 0
    for _ in range(3):
        keep = (torch.rand(3, 1, 64, 64, generator=again) >= 0.3).float()
        with torch.enable_grad(), cut(module) as leaves:
            logits = signnet(clean * keep)
            expected = expected + torch.autograd.grad((logits[:, stop] - logits[:, target]).sum(), leaves[0])[0]
    assert delta.abs().sum() > 0 and torch.allclose(delta, expected, atol=1e-5)
    with torch.no_grad(), tapped(module) as seen:
        signnet(clean)
    f = seen[0]
    w = delta.flatten(1) / delta.flatten(1).norm(dim=1, keepdim=True)
    assert torch.allclose(importance(f, delta, f), (f.flatten(1) * w).sum(1) / f.flatten(1).norm(dim=1), atol=1e-6)


def test_fia_moves_the_features_against_their_importance_for_the_sign(parts, tmp_path):
    """Optimized with FIA, the patch lowers <Δ/|Δ|, f> (Δ of the clean views) below what the same steps reach
    without it."""
    signnet = bundled("signnet")
    draw = parts["sampler"].sample(8, torch.Generator().manual_seed(123))
    module = feature_module(signnet, "victim", LAYERS)
    clean_views = parts["pipeline"](parts["scene"], parts["scene"].texture, draw).images
    stop, target = signnet.label_index("stop"), signnet.label_index("yield")
    delta = Guide(FeatureLevel(method="fia", weight=1.0, layers=LAYERS, masks=4), None, {}).aggregate_gradient(
        module, signnet, clean_views, target, (stop,))

    def score(texture):
        with torch.no_grad(), tapped(module) as seen:
            signnet(parts["pipeline"](parts["scene"], texture, draw).images)
        return float(importance(seen[0], delta, torch.ones(1, 1)).mean())          # <Δ/|Δ|, f>

    reached = {}
    for weight in (0.0, 20.0):
        setup = setup_for(parts, signnet, placed=False)
        result = attack(weight, steps=6, term="fia").run(setup, RunConfig(seed=0, progress=False),
                                                           tmp_path / str(weight))
        setup.patch.load_state_dict(result.best_state)
        with torch.no_grad():
            reached[weight] = score(setup.patch.apply(parts["scene"].texture))
    assert reached[20.0] < reached[0.0], reached
