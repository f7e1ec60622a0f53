"""The stack detector's term of a classifier's approach windows (physattack/drive/seen.py, eot.sampler.seen): its rows
are the window frames on the stack's tiles that hold the sign whole, the sign where each tile has it; its hinge
rises when the sign is hidden from the detector and its gradient reaches the texture; the loop adds it and records
the share of tiles the detector reads; bad settings name their key."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from physattack.drive.approach import ApproachSampler
from physattack.drive.framing import DetectorFraming
from physattack.attack.seen import SeenSettings, SeenTerm
from physattack.drive.trajectories import Dashcam
from physattack.eot import BackgroundBank, ViewPipeline
from physattack.errors import InputError


@pytest.fixture(scope="module")
def tiles():
    from physattack.drive.stacks import SearchTiles, StackSettings

    return SearchTiles(160, Dashcam(), (0.75, 0.75), StackSettings())


def _sampler(tiles, **seen) -> ApproachSampler:
    framing = DetectorFraming(SimpleNamespace(search=tiles), None)
    return ApproachSampler(drives=3, segments=2, background_count=4, framing=framing, seen=seen or None)


def test_its_rows_are_window_frames_on_the_tiles_that_hold_the_sign_whole(stop_scene, tiles):
    """``frames`` window frames a step, each on every tile of the stack's search that holds its sign whole (a far
    sign at 2x and 1x): rendered at the detector's 160 px the sign lies inside each tile, at its tile's scale. Off
    (the default), nothing is rendered and nothing more drawn: the windows are those of a sampler without it."""
    from physattack.render import Renderer

    s = _sampler(tiles, weight=1.0, frames=6)
    w = s.windows(torch.Generator().manual_seed(0))
    assert w.seen is not None and 6 <= len(w.seen) <= 6 * len(tiles.tiles)
    rows = w.seen.params
    assert torch.equal(w.seen.frame.unique(), torch.arange(6))           # every drawn frame has a tile holding it
    assert set(rows.sensor_px.round().tolist()) <= {80.0, 160.0}
    with torch.no_grad():
        views = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (160, 160))(stop_scene, stop_scene.texture, rows,
                                                                                 effects=False)
    assert (views.boxes[:, :2] >= -0.5).all() and (views.boxes[:, 2:] <= 160.5).all()
    assert ((views.boxes[:, 2] - views.boxes[:, 0]) - rows.frame * 160).abs().max() < 1.5
    off = _sampler(tiles).windows(torch.Generator().manual_seed(0))
    plain = ApproachSampler(drives=3, segments=2, background_count=4,
                            framing=DetectorFraming(SimpleNamespace(search=tiles), None))
    assert off.seen is None
    assert torch.equal(off.params.distance_m, plain.windows(torch.Generator().manual_seed(0)).params.distance_m)
    assert _sampler(tiles, weight=1.0).windows(torch.Generator().manual_seed(0)).seen is not None
    assert ApproachSampler(drives=2, background_count=4, seen={"weight": 1.0}).windows(
        torch.Generator().manual_seed(0)).seen is None                    # no detector framing: no tiles to read


def test_the_hinge_rises_when_the_sign_is_hidden_and_its_gradient_reaches_the_texture(stop_scene, tiles):
    """Through the bundled DetNet: the clean sign on the tiles of near window frames reads at or above the kept
    reading (the hinge near 0, most tiles read); the face painted grey reads far less (the hinge well above), and the
    term's gradient reaches the face's texels."""
    from physattack.render import Renderer
    from physattack.victims import load_detnet

    detnet = load_detnet().eval()
    s = ApproachSampler(drives=4, segments=1, background_count=4, start_m=30.0, speed_kmh=(30.0, 40.0),
                        framing=DetectorFraming(SimpleNamespace(search=tiles), None), seen={"weight": 1.0,
                                                                                            "frames": 8})
    rows = s.windows(torch.Generator().manual_seed(1)).seen
    term = SeenTerm(s.seen, detnet, ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (160, 160)))
    clean, seen_clean = term(stop_scene, stop_scene.texture, rows)
    hidden, seen_hidden = term(stop_scene, torch.full_like(stop_scene.texture, 0.5), rows)   # a grey octagon
    assert float(clean) < 0.1 and seen_clean >= 0.75, (float(clean), seen_clean)
    assert float(hidden) > float(clean) + 0.5 and seen_hidden < seen_clean, (float(hidden), seen_hidden)
    t = torch.full_like(stop_scene.texture, 0.5).requires_grad_(True)
    loss, _ = term(stop_scene, t, rows)
    loss.backward()
    assert t.grad is not None and float(t.grad.abs().sum()) > 0


def test_a_frame_is_seen_when_its_best_tile_reads_the_sign():
    """The hinge is on each drawn frame's best tile (the stack needs one box on the whole sign): a frame whose 2x
    tile reads the sign at 0.9 costs nothing though its 1x tile reads 0.1; a frame read at 0.2 on its only tile costs
    log(0.75 / 0.2); the share seen counts frames, not tiles."""
    import math

    from physattack.drive.seen import SeenRows
    from physattack.victims.detection import DetectorOutput, Detections

    box = torch.tensor([[40.0, 40.0, 80.0, 80.0]])
    scores = torch.tensor([0.9, 0.1, 0.2])           # odds over a threshold of 0.5 equal the scores

    def detector(images):
        n = len(images)
        dets = [Detections(box, scores[i:i + 1], torch.zeros(1, dtype=torch.long)) for i in range(n)]
        return DetectorOutput(box.expand(n, 1, 4), scores[:, None, None] + images.sum() * 0, torch.ones(n, 1,
                              dtype=torch.bool), dets, 0.5)

    def pipeline(scene, texture, params):
        return SimpleNamespace(images=texture.expand(3, 1, 1, 1), boxes=box.expand(3, 4))

    rows = SeenRows(params=[0, 1, 2], frame=torch.tensor([4, 4, 9]))
    loss, seen = SeenTerm(SeenSettings(weight=2.0), detector, pipeline)(None, torch.ones(1, 1, 1), rows)
    assert float(loss) == pytest.approx(2.0 * math.log(0.75 / 0.2) / 2, rel=1e-4)
    assert seen == 0.5


def test_only_a_box_on_the_whole_sign_reads_it():
    """A candidate on the part of the sign a tile's edge leaves (IoU 0.4 with its box) does not read it, however
    high its score: the stack would crop that part; one on the whole sign (IoU 0.8) reads it at its odds, whatever
    class the detector gives it (the stack crops a box of any class)."""
    from physattack.attack.seen import whole_reading
    from physattack.victims.detection import DetectorOutput

    sign = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    boxes = torch.tensor([[[0.0, 0.0, 4.0, 10.0], [0.0, 0.0, 8.0, 10.0]]])         # IoU 0.4 and 0.8
    for scores, expected in (([[0.9, 0.0], [0.0, 0.0]], 0.0), ([[0.9, 0.0], [0.5, 0.1]], 0.5),
                             ([[0.0, 0.9], [0.1, 0.5]], 0.5)):              # (stop, yield) per candidate: any class
        out = DetectorOutput(boxes, torch.tensor(scores)[None], torch.ones(1, 2, dtype=torch.bool), [], 0.5)
        assert float(whole_reading(out, sign)) == pytest.approx(expected, abs=1e-4)


def test_with_label_target_only_a_box_of_the_target_class_reads_it(tiles):
    """``eot.sampler.seen.label=target``: the whole-sign box must read the attack's target (class 1 here): a *stop*
    box at 0.9 reads nothing, a *yield* box at 0.5 reads 0.5; the builder looks the target up in the detector's
    labels, and an attack without a target is refused in one sentence."""
    from physattack.attack.seen import whole_reading
    from physattack.cli.build import seen_term
    from physattack.victims.detection import DetectorOutput

    sign = torch.tensor([[0.0, 0.0, 10.0, 10.0]])
    boxes = torch.tensor([[[0.0, 0.0, 8.0, 10.0]]])
    for scores, expected in (([[0.9, 0.0]], 0.0), ([[0.9, 0.5]], 0.5)):
        out = DetectorOutput(boxes, torch.tensor(scores)[None], torch.ones(1, 1, dtype=torch.bool), [], 0.5)
        assert float(whole_reading(out, sign, label=1)) == pytest.approx(expected, abs=1e-4)
    sampler = _sampler(tiles, weight=1.0, label="target")
    sampler.framing.tiled.detector = SimpleNamespace(input_size=160, label_index=["stop", "yield"].index)
    term = seen_term(sampler, SimpleNamespace(targeted=True, target="yield", placement=None),
                     renderer=None, backgrounds=BackgroundBank(2, seed=0), colour_model=SimpleNamespace(has_camera=False))
    assert term.label == 1
    with pytest.raises(InputError, match="eot.sampler.seen.label=any"):
        seen_term(sampler, SimpleNamespace(targeted=False, target=None, placement=None), renderer=None,
                  backgrounds=None, colour_model=None)



def test_the_loop_adds_it_and_records_what_the_detector_reads(stop_scene, signnet, tmp_path, tiles):
    """In the EOT loop a classifier's step adds the term's loss to its own and records ``detector_seen``; without
    the term (``AttackSetup.seen`` None) the record has no such key."""
    from physattack.attack import AttackSetup, EOTAttack
    from physattack.config import RunConfig
    from physattack.patch import sticker_for_scene
    from physattack.printing import load_palette
    from physattack.render import Renderer

    calls = []

    def term(scene, texture, rows):
        calls.append(len(rows))
        return texture.mean() * 0 + 1.0, 0.5

    pipe = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (64, 64))
    records = {}
    for name, seen in (("with", term), ("without", None)):
        torch.manual_seed(0)
        sampler = _sampler(tiles, weight=1.0, frames=3)
        sampler.refit_due = lambda step: False            # the hand framing: no detector to fit here
        setup = AttackSetup(scene=stop_scene, patch=sticker_for_scene(stop_scene, shape="bars"), victim=signnet.eval(),
                            pipeline=pipe, sampler=sampler, palette=load_palette(None), seen=seen)
        result = EOTAttack(steps=2, checkpoint_every=0, mask_search_steps=0).run(
            setup, RunConfig(seed=0, progress=False), tmp_path / name)
        records[name] = result.history
    assert len(calls) == 2 and all(c >= 3 for c in calls)
    assert all(r["detector_seen"] == 0.5 and r["seen_loss"] == 1.0 for r in records["with"])
    assert all("detector_seen" not in r for r in records["without"])
    assert records["with"][0]["loss"] == pytest.approx(records["without"][0]["loss"] + 1.0, abs=1e-4)


def test_projected_its_gradient_never_points_against_the_attacks():
    """``eot.sampler.seen.project``: where the term's gradient points against the attack's (a negative dot product)
    it joins less its component along the attack's, so the sum no longer undoes the attack's descent; where they
    agree it joins whole. The cosine before the projection is returned."""
    from physattack.attack.seen import add_projected

    for side, expected, cosine in ((torch.tensor([-2.0, 1.0]), torch.tensor([1.0, 1.0]), -2 / 5 ** 0.5),
                                   (torch.tensor([2.0, 1.0]), torch.tensor([3.0, 1.0]), 2 / 5 ** 0.5)):
        p = torch.zeros(2, requires_grad=True)
        p.grad = torch.tensor([1.0, 0.0])                     # the attack's gradient
        assert add_projected([p], (side,)) == pytest.approx(cosine)
        assert torch.allclose(p.grad, expected)
        assert float(p.grad @ torch.tensor([1.0, 0.0])) >= 1.0 - 1e-6      # the attack's descent kept in full
    q = torch.zeros(2, requires_grad=True)                    # no gradient of the attack's: the term's alone
    assert add_projected([q], (torch.tensor([0.0, 3.0]),)) == 0.0 and torch.equal(q.grad, torch.tensor([0.0, 3.0]))


def test_the_loop_projects_the_terms_gradient_when_asked(stop_scene, signnet, tmp_path, tiles):
    """With a term whose ``project`` is true the loop records the cosine of the two gradients before the projection
    (``seen_cosine``, in [-1, 1]) and the step's loss still counts the term; the patch moves."""
    from physattack.attack import AttackSetup, EOTAttack
    from physattack.config import RunConfig
    from physattack.patch import sticker_for_scene
    from physattack.printing import load_palette
    from physattack.render import Renderer

    class Term:
        project = True

        def __call__(self, scene, texture, rows):
            return (texture - 1.0).pow(2).mean(), 0.5        # asks for a white face

    torch.manual_seed(0)
    sampler = _sampler(tiles, weight=1.0, frames=3)
    sampler.refit_due = lambda step: False
    patch = sticker_for_scene(stop_scene, shape="bars")
    before = copy_state(patch)
    setup = AttackSetup(scene=stop_scene, patch=patch, victim=signnet.eval(),
                        pipeline=ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (64, 64)), sampler=sampler,
                        palette=load_palette(None), seen=Term())
    attack = EOTAttack(steps=2, checkpoint_every=0, mask_search_steps=0)
    history = attack.run(setup, RunConfig(seed=0, progress=False), tmp_path / "p").history
    assert all(-1.0 <= r["seen_cosine"] <= 1.0 and r["seen_loss"] > 0 for r in history)
    for r in history:
        rest = r["adv_loss"] + attack.nps_weight * r["nps"] + attack.tv_weight * r["tv"]
        assert r["loss"] == pytest.approx(rest + r["seen_loss"], rel=1e-4)
    assert any(not torch.equal(before[k], v) for k, v in patch.state_dict().items())


def copy_state(module) -> dict:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@pytest.mark.parametrize("key, value", [("weight", -1.0), ("frames", 0), ("reading", 1.0), ("label", "yeild")])
def test_bad_settings_name_their_key(key, value):
    with pytest.raises(InputError, match=f"eot.sampler.seen.{key}"):
        SeenSettings(**{key: value})


def test_the_builder_refuses_it_where_it_cannot_apply(tiles):
    """A detector's windows (attack=hide reads its own tiles), a query attack (no gradient) and per-view placement
    error each get one sentence."""
    from physattack.cli.build import seen_term

    hide = ApproachSampler(drives=2, background_count=4, seen={"weight": 1.0}).for_detector(160)
    with pytest.raises(InputError, match="attack=hide"):
        seen_term(hide, SimpleNamespace(placement=None), renderer=None, backgrounds=None,
                  colour_model=None)
    with pytest.raises(InputError, match="attack.placement=null"):
        seen_term(_sampler(tiles, weight=1.0), SimpleNamespace(placement={"sigma": 1}), renderer=None,
                  backgrounds=None, colour_model=None)
    with pytest.raises(InputError, match="attack.method=query"):
        seen_term(_sampler(tiles, weight=1.0), SimpleNamespace(method="query", placement=None), renderer=None,
                  backgrounds=None, colour_model=None)
    assert seen_term(_sampler(tiles), None, renderer=None, backgrounds=None, colour_model=None) is None
