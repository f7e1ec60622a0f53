"""Gradient-free EOT through a query-only victim: planted score functions whose optimum is known are found
within a stated budget, with scores (NES) and with labels only (random search); no backward pass is ever
taken and the images asked about are counted exactly."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from physattack.attack import AttackError, AttackSetup, EOTAttack
from physattack.config import RunConfig
from physattack.errors import InputError
from physattack.patch.sticker import StickerPatch
from physattack.victims.base import Classifier
from physattack.victims.detection import Detections, Detector, DetectorOutput

BEST = torch.tensor([0.9, 0.2, 0.6])        # the planted optimum: the sticker colour that reads as yield


class Planted(Classifier):
    """Reads the mean colour of the sticker square: yield the nearer it is to ``BEST`` (within ``radius``)."""

    labels = ("stop", "yield")

    def __init__(self, radius: float = 0.2):
        super().__init__()
        self.radius = radius
        self.register_buffer("best", BEST.clone())

    def logits(self, images):
        colour = images[:, :, 4:12, 4:12].mean((2, 3))
        d2 = ((colour - self.best) ** 2).sum(-1)
        return torch.stack([torch.full_like(d2, -8 * self.radius ** 2), -8 * d2], -1) * 10


class Shifts:
    """EOT views: each view is the texture under its own colour shift (a light), drawn from the generator."""

    def __init__(self, std: float):
        self.std = std

    def sample(self, n, generator):
        return torch.randn(n, 3, 1, 1, generator=generator) * self.std


def pipeline(scene, texture, params):
    return SimpleNamespace(images=(texture[None] + params).clamp(0, 1))


def setup_for(victim, std: float) -> AttackSetup:
    mask = torch.zeros(1, 16, 16)
    mask[:, 4:12, 4:12] = 1
    scene = SimpleNamespace(texture=torch.full((3, 16, 16), 0.5), class_name="stop", texture_size_m=(0.75, 0.75),
                            face_mask=torch.ones(1, 16, 16))
    return AttackSetup(scene=scene, patch=StickerPatch(mask), victim=victim, pipeline=pipeline, sampler=Shifts(std),
                       palette=torch.eye(3), victim_name="planted")


def sticker_colour(setup) -> torch.Tensor:
    with torch.no_grad():
        return setup.patch.colors()[:, 4:12, 4:12].mean((1, 2))


@pytest.fixture
def no_backward(monkeypatch):
    """Any backward pass or autograd.grad during the test fails it."""
    def refuse(*args, **kwargs):
        raise AssertionError("a query attack called backward")
    monkeypatch.setattr(torch.Tensor, "backward", refuse)
    monkeypatch.setattr(torch.autograd, "backward", refuse)
    monkeypatch.setattr(torch.autograd, "grad", refuse)


def test_scores_find_the_planted_optimum_within_the_budget(tmp_path, no_backward):
    setup = setup_for(Planted(), std=0.02)
    attack = EOTAttack(method="query", queries=12_000,
                       query={"answers": "scores", "samples": 8, "views": 8, "sigma": 0.05, "lr": 0.05, "margin": 50.0,
                              "cell_mm": None})
    result = attack.run(setup, RunConfig(progress=False), tmp_path)
    q = result.queries
    assert q["optimizer"] == "nes" and q["gradient_calls"] == 0
    per_step = 8 * 2 * 8
    assert q["images_per_step"] == per_step and q["images"] == q["steps"] * per_step <= 12_000
    assert q["images"] > 12_000 - per_step                       # the budget is spent, never exceeded
    assert torch.linalg.norm(sticker_colour(setup) - BEST) < 0.08


@pytest.mark.parametrize("optimizer, settings", [
    ("search", {"samples": 4, "epsilon": 0.3, "change": 0.5}),
    ("nes", {"samples": 4, "sigma": 0.1, "lr": 0.05}),
])
def test_labels_only_find_it_too_through_the_share_of_views_won(optimizer, settings, tmp_path, no_backward):
    victim = Planted(radius=0.3)
    setup = setup_for(victim, std=0.15)
    start = torch.linalg.norm(sticker_colour(setup) - BEST)
    attack = EOTAttack(method="query", queries=15_000,
                       query={"answers": "labels", "optimizer": optimizer, "views": 16, "cell_mm": None, **settings})
    result = attack.run(setup, RunConfig(progress=False), tmp_path)
    assert result.queries["optimizer"] == optimizer and result.queries["answers"] == "labels"
    per_step = 16 * (5 if optimizer == "search" else 8)
    assert result.queries["images"] == result.queries["steps"] * per_step
    end = torch.linalg.norm(sticker_colour(setup) - BEST)
    assert end < 0.15 < 0.5 < start


def test_the_grey_basis_moves_each_block_by_one_brightness(tmp_path, no_backward):
    """``basis=grey``: one number per block, the same on R, G and B; a planted grey optimum is found and the sticker
    stays grey (from the grey texture it started on)."""
    victim = Planted()
    victim.best = torch.tensor([0.85, 0.85, 0.85])
    setup = setup_for(victim, std=0.02)
    result = EOTAttack(method="query", queries=6_000, query={"samples": 4, "views": 8, "sigma": 0.05, "lr": 0.05,
                                                             "margin": 50.0, "cell_mm": None, "basis": "grey"}).run(
        setup, RunConfig(progress=False), tmp_path)
    colour = sticker_colour(setup)
    assert result.queries["basis"] == "grey" and float(colour.max() - colour.min()) < 1e-4
    assert abs(float(colour.mean()) - 0.85) < 0.08 < abs(0.5 - 0.85)


def test_select_hands_back_the_best_patch_its_counted_checks_saw(tmp_path, no_backward):
    """From the optimum, the random search drifts along ties (a child no worse on the step's views is taken);
    ``select`` checks the patch on a held-aside draw every 256 images, counts those images, and hands back the best
    patch checked: here the start."""
    def run(select: int):
        setup = setup_for(Planted(radius=0.3), std=0.15)
        with torch.no_grad():
            colours = setup.patch.colors().clone()
            colours[:, 4:12, 4:12] = BEST[:, None, None]
            setup.patch.set_colors(colours)
        query = {"answers": "labels", "optimizer": "search", "views": 16, "cell_mm": None, "samples": 4,
                 "epsilon": 0.3, "change": 0.5, "select": select}
        result = EOTAttack(method="query", queries=6_000, query=query).run(setup, RunConfig(progress=False), tmp_path)
        return result.queries, float(torch.linalg.norm(sticker_colour(setup) - BEST))

    last, drift = run(0)
    assert drift > 0.05 and last["checks"] == [] and last["selected"] is None
    q, kept = run(256)
    assert kept < 1e-4 and q["selected"]["images"] == q["checks"][0]["images"] == 32      # the start, checked first
    assert q["images"] == q["steps"] * 16 * 5 + len(q["checks"]) * 2 * 16 <= 6_000         # every check counted
    assert len(q["checks"]) > 10 and q["checks"][-1]["step"] == q["steps"]                 # the last patch checked too
    with pytest.raises(AttackError, match="attack.query.select_draws"):
        EOTAttack(method="query", query={"select": 100, "select_draws": 0})
    with pytest.raises(AttackError, match="leaves no step between the first and last checks"):
        EOTAttack(method="query", queries=130, query={"optimizer": "search", "views": 16, "cell_mm": None,
                                                      "samples": 4, "select": 64}).run(
            setup_for(Planted(), std=0.1), RunConfig(progress=False), tmp_path)


def test_decision_based_mode_never_sees_a_score(tmp_path, monkeypatch):
    from physattack.victims import query

    seen = []
    original = query.QueryVictim.__call__
    monkeypatch.setattr(query.QueryVictim, "__call__", lambda self, x: seen.append(original(self, x)) or seen[-1])
    setup = setup_for(Planted(), std=0.25)
    EOTAttack(method="query", queries=400, query={"answers": "labels", "samples": 2, "views": 8}).run(
        setup, RunConfig(progress=False), tmp_path)
    assert seen and all(a.dtype == torch.long and a.dim() == 1 for a in seen)


def test_bad_settings_are_one_sentence():
    with pytest.raises(AttackError, match="attack.method must be gradient or query"):
        EOTAttack(method="magic")
    with pytest.raises(AttackError, match="attack.query.basis must be rgb or grey"):
        EOTAttack(method="query", query={"basis": "hsv"})
    with pytest.raises(AttackError, match="attack.query.start must be patch or clean"):
        EOTAttack(method="query", query={"start": "random"})
    with pytest.raises(AttackError, match="attack.query.sampels is not a setting"):
        EOTAttack(method="query", query={"sampels": 3})
    attack = EOTAttack(method="query", queries=100, query={"samples": 8, "views": 8})
    with pytest.raises(AttackError, match=r"attack.queries=100 is below one step's 128 images"):
        attack.check_budget(Shifts(0.1))


def test_a_patch_takes_the_colours_the_optimizer_hands_back():
    mask = torch.zeros(1, 8, 8)
    mask[:, 2:6, 2:6] = 1
    colours = torch.rand(3, 8, 8)
    free = StickerPatch(mask)
    free.set_colors(colours)
    assert torch.allclose(free.colors()[:, 2:6, 2:6], colours[:, 2:6, 2:6], atol=1e-4)
    palette = torch.tensor([[1.0, 1, 1], [0, 0, 0], [1, 0, 0]])
    printable = StickerPatch(mask, palette=palette)
    printable.set_colors(torch.tensor([0.9, 0.1, 0.2]).view(3, 1, 1).expand(3, 8, 8))
    printable.anneal(0.2)                                  # even a soft temperature keeps the colour chosen
    assert torch.allclose(printable.colors()[:, 3, 3], palette[2], atol=1e-3)


class PlantedElsewhere(Planted):
    """Reads yield when the cell at texels 8:12 (one down and right of the sticker's cell) is ``BEST``."""

    def logits(self, images):
        d2 = ((images[:, :, 8:12, 8:12].mean((2, 3)) - self.best) ** 2).sum(-1)
        return torch.stack([torch.full_like(d2, -8 * self.radius ** 2), -8 * d2], -1) * 10


def test_layout_steps_move_a_sticker_where_the_victim_looks_and_keep_the_area(tmp_path, no_backward):
    """The sticker (one 4-texel cell, already ``BEST``) sits where the victim does not look: colours alone cannot
    win, a layout step moves the cell (with its colours) beside it, onto the cell read; the area never changes and
    every image of both kinds of step is counted."""
    query = {"answers": "labels", "samples": 4, "views": 8, "sigma": 0.05, "lr": 0.02, "cell_mm": None}

    def run(layout_every):
        setup = setup_for(PlantedElsewhere(), std=0.02)
        mask = torch.zeros(1, 16, 16)
        mask[:, 4:8, 4:8] = 1
        setup.patch, setup.placed = StickerPatch(mask, mask_search={"area": 0.0625, "cell_px": 4}), True
        with torch.no_grad():
            setup.patch.set_colors(BEST.view(3, 1, 1).expand(3, 16, 16))
        attack = EOTAttack(method="query", queries=2_000, query={**query, "layout_every": layout_every})
        result = attack.run(setup, RunConfig(progress=False), tmp_path)
        return setup.patch, result.queries

    still, q0 = run(0)
    assert q0["layout"] is None and float(still.mask[:, 8:12, 8:12].sum()) == 0
    moved, q = run(2)
    layout = q["layout"]
    assert layout["steps"] == q["steps"] // 2 and layout["taken"] >= 1 and layout["moved"] == layout["taken"]
    assert float(moved.mask.sum()) == 16 and float(moved.mask[:, 8:12, 8:12].sum()) == 16
    assert torch.allclose(moved.colors()[:, 8:12, 8:12].mean((1, 2)), BEST, atol=0.1)
    nes = q["steps"] - layout["steps"]
    assert q["images"] == nes * 8 * 8 + layout["steps"] * 8 * 5 and q["gradient_calls"] == 0
    with pytest.raises(AttackError, match="attack.query.layout_every moves whole sticker cells of 4 texels"):
        EOTAttack(method="query", queries=2_000, query={**query, "layout_every": 2}).run(
            bars_setup(), RunConfig(progress=False), tmp_path)


class Chance(Planted):
    """Reads yield by a fixed pseudo-random function of where every texel's colour is: no layout is better than
    another, yet on one draw of views the best of several moved layouts often beats the patch by chance."""

    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.rand(3, 16, 16, generator=torch.Generator().manual_seed(5)))

    def logits(self, images):
        read = torch.sin(997.0 * (images * self.w).sum((1, 2, 3)))
        return torch.stack([torch.zeros_like(read), 10 * read], -1)


def test_a_fresh_draw_refuses_the_moves_that_won_their_own_draw_by_chance(tmp_path, no_backward):
    """``layout_confirm``: the best child is asked again with the patch on a second draw of the step and taken only
    if it wins there too; on a victim indifferent to the layout that refuses moves the first draw took, and
    every image of the second draw is counted."""
    query = {"answers": "labels", "samples": 4, "views": 8, "sigma": 0.05, "lr": 0.02, "cell_mm": None,
             "layout_every": 2}

    def run(confirm):
        setup = setup_for(Chance(), std=0.02)
        mask = torch.zeros(1, 16, 16)
        mask[:, 4:8, 4:8] = 1
        setup.patch, setup.placed = StickerPatch(mask, mask_search={"area": 0.0625, "cell_px": 4}), True
        attack = EOTAttack(method="query", queries=2_000, query={**query, "layout_confirm": confirm})
        return attack.run(setup, RunConfig(progress=False), tmp_path).queries

    plain, confirmed = run(False), run(True)
    assert plain["layout"]["refused"] == 0 and plain["layout"]["confirm"] is False
    layout = confirmed["layout"]
    assert layout["confirm"] is True and layout["refused"] >= 1
    assert layout["taken"] / layout["steps"] < plain["layout"]["taken"] / plain["layout"]["steps"]
    nes = confirmed["steps"] - layout["steps"]
    asked_twice = layout["taken"] + layout["refused"]
    assert confirmed["images"] == nes * 8 * 8 + layout["steps"] * 8 * 5 + asked_twice * 8 * 2
    with pytest.raises(AttackError, match="attack.query.layout_confirm must be true or false"):
        EOTAttack(method="query", query={"layout_confirm": "yes"})


def bars_setup():
    """A sticker that is not made of whole 4-texel cells (a 6-texel square)."""
    setup = setup_for(Planted(), std=0.02)
    mask = torch.zeros(1, 16, 16)
    mask[:, 4:10, 4:10] = 1
    setup.patch, setup.placed = StickerPatch(mask, mask_search={"area": 0.14, "cell_px": 4}), True
    return setup


def test_keep_holds_the_init_victims_while_the_victim_asked_never_sees_a_gradient(tmp_path):
    """``keep``: the init= run's victim (held white-box) pulls the patch towards what fools it; the victim asked is
    only ever given plain images (its wrapper refuses any that carry a gradient) and is counted exactly. Here the
    victim asked wants ``BEST`` and the init run's victim another colour: keep moves the result towards the latter."""
    def end(keep):
        setup = setup_for(Planted(), std=0.02)
        held = Planted()
        held.best = torch.tensor([0.2, 0.8, 0.3])
        setup.guide = held
        result = EOTAttack(method="query", queries=3_000, query={"answers": "scores", "samples": 4, "views": 8,
                                                                  "sigma": 0.05, "lr": 0.05, "margin": 50.0,
                                                                  "cell_mm": None, "keep": keep}).run(
            setup, RunConfig(progress=False), tmp_path)
        colour = sticker_colour(setup)
        return torch.linalg.norm(colour - BEST), torch.linalg.norm(colour - held.best), result.queries

    (asked0, held0, q0), (asked1, held1, q1) = end(0.0), end(4.0)
    assert q0["kept"] == [] and q1["kept"] == ["init"] and q1["keep"] == 4.0
    assert q1["gradient_calls"] == 0 and q1["images"] == q1["steps"] * 8 * 8
    assert held1 < held0 - 0.1 and asked1 > asked0


def test_bad_keep_is_one_sentence(tmp_path):
    with pytest.raises(AttackError, match="attack.query.keep must be"):
        EOTAttack(method="query", query={"keep": -1})
    with pytest.raises(AttackError, match="attack.query.keep steers nes's steps"):
        EOTAttack(method="query", query={"optimizer": "search", "keep": 0.5})
    setup = setup_for(Planted(), std=0.02)
    with pytest.raises(AttackError, match=r"attack.query.keep uses the gradients of the init= run's victims; give init="):
        EOTAttack(method="query", queries=400, query={"keep": 1.0, "views": 8, "cell_mm": None}).run(
            setup, RunConfig(progress=False), tmp_path)


class PlantedDetector(Detector):
    """Finds the sign (one box over the frame) unless the sticker square's mean colour is near ``BEST``."""

    labels = ("stop",)
    score_threshold = 0.5

    def detect(self, images):
        colour = images[:, :, 4:12, 4:12].mean((2, 3))
        score = 1 - torch.exp(-((colour - BEST) ** 2).sum(-1) / 0.08)
        box = torch.tensor([0.0, 0.0, 16.0, 16.0])
        dets = [Detections(box[None], s[None], torch.zeros(1, dtype=torch.long)) for s in score]
        return DetectorOutput(box.expand(len(images), 1, 4), score[:, None, None],
                              torch.ones(len(images), 1, dtype=torch.bool), dets, self.score_threshold)


def framed(scene, texture, params):
    images = (texture[None] + params).clamp(0, 1)
    return SimpleNamespace(images=images, boxes=torch.tensor([0.0, 0.0, 16.0, 16.0]).expand(len(images), 4))


@pytest.mark.parametrize("answers, optimizer, budget", [("scores", "nes", 8_000), ("labels", "search", 8_000)])
def test_a_detector_asked_only_for_its_detections_is_made_to_miss_the_sign(answers, optimizer, budget, tmp_path,
                                                                            no_backward):
    setup = setup_for(PlantedDetector(), std=0.05)
    setup.pipeline = framed
    attack = EOTAttack(objective="hide", target=None, method="query", queries=budget,
                       query={"answers": answers, "optimizer": optimizer, "samples": 4, "views": 8, "sigma": 0.1,
                              "lr": 0.05, "cell_mm": None, "epsilon": 0.3, "change": 0.5})
    def sign_score() -> float:
        with torch.no_grad():
            images = framed(None, setup.patch.apply(setup.scene.texture), torch.zeros(1, 3, 1, 1)).images
            return float(PlantedDetector().detect(images).detections[0].scores[0])

    start = sign_score()
    result = attack.run(setup, RunConfig(progress=False), tmp_path)
    assert result.queries["images"] <= budget and result.queries["answers"] == answers
    assert start > 0.5 > sign_score()                 # found before, missed after


def test_a_stricter_threshold_reads_a_detectors_windows_as_the_gradient_attack_does_and_a_classifier_refuses_it(
        tmp_path):
    """``eot.sampler.decision.threshold_scale`` in a query attack: a detector's frame reads ½ at its threshold times
    the scale, as ``sign_reading`` has it (a score just under the real threshold still reads more than ½); a classifier,
    which has no threshold, is refused at start-up with the key named, before any query."""
    from physattack.attack.detection_objectives import sign_reading
    from physattack.attack.query import DetectorGoal

    goal = DetectorGoal(label=0, threshold=0.5, margin=2.0)
    scores = torch.tensor([0.3, 0.45, 0.6])
    assert goal.reading(torch.tensor([0.3]), 0.6)[0] == pytest.approx(0.5)
    assert goal.reading(scores, 0.6)[1] > 0.5 > goal.reading(scores)[1]
    out = PlantedDetector().detect(torch.zeros(3, 3, 16, 16))
    out = DetectorOutput(out.candidate_boxes, scores[:, None, None], out.candidate_valid, out.detections, 0.5)
    views = SimpleNamespace(boxes=torch.tensor([0.0, 0.0, 16.0, 16.0]).expand(3, 4))
    assert torch.allclose(goal.reading(scores, 0.6), sign_reading(out, 0, views, threshold_scale=0.6), atol=1e-5)
    setup = setup_for(Planted(), std=0.02)
    setup.sampler.decision = SimpleNamespace(threshold_scale=0.6)
    with pytest.raises(InputError, match="eot.sampler.decision.threshold_scale=0.6 applies to a detector"):
        EOTAttack(method="query", queries=400, query={"views": 8, "cell_mm": None}).run(
            setup, RunConfig(progress=False), tmp_path)


def test_a_query_attack_on_a_detector_only_hides():
    with pytest.raises(AttackError, match="attack.method=query on a detector makes it miss the sign"):
        EOTAttack(objective="mislabel", target="yield", method="query").objective_for(PlantedDetector())



def test_the_report_line_says_how_many_moves_a_fresh_draw_refused():
    from physattack.cli.kinds.query import layout_line

    plain = {"layout": {"every": 2, "cells": 1, "confirm": False, "steps": 59, "taken": 40, "moved": 40, "refused": 0}}
    confirmed = {"layout": {**plain["layout"], "confirm": True, "taken": 17, "moved": 17, "refused": 16}}
    assert layout_line(plain) == "; 40 of 59 layout steps moved stickers (40 cells moved, the area unchanged)"
    assert layout_line(confirmed) == ("; 17 of 59 layout steps moved stickers (17 cells moved, the area unchanged, "
                                      "16 best moves refused by a fresh draw)")
    assert layout_line({"layout": None}) == ""
