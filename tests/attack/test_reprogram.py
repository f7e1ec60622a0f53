"""Adversarial reprogramming: label remapping, the task input, and where gradients go."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from physattack.atomic import load_torch
from physattack.attack.loop import AttackError, AttackSetup
from physattack.attack.reprogram import ReprogramAttack
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.config import RunConfig
from physattack.eot.tasks import DigitTask
from physattack.patch.frame import frame_for_scene
from physattack.printing import load_palette
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.victims import VictimError
from physattack.victims.base import remap_logits


@pytest.fixture(scope="module")
def board():
    return load_scene("reprogram_board")


def window_px(scene):
    x0, y0, x1, y1 = scene.regions["window"]
    h, w = scene.texture.shape[-2:]
    return int(round(x0 * w)), int(round(y0 * h)), int(round(x1 * w)), int(round(y1 * h))


def test_remapping_picks_the_victim_logit_of_each_task_class():
    logits = torch.tensor([[0.0, 1.0, 2.0, 3.0], [3.0, 2.0, 1.0, 0.0]])
    task = remap_logits(logits, torch.tensor([3, 0]))       # digit 0 <- label 3, digit 1 <- label 0
    assert torch.equal(task, torch.tensor([[3.0, 0.0], [0.0, 3.0]]))


def test_label_map_defaults_to_the_first_labels_and_refuses_unknown_ones(board, signnet):
    attack = ReprogramAttack(classes=4, steps=1)
    attack.label(signnet, board)
    assert attack.label_map.tolist() == [0, 1, 2, 3]
    custom = ReprogramAttack(classes=2, label_map=["yield", "stop"])
    custom.label(signnet, board)
    assert custom.label_map.tolist() == [signnet.label_index("yield"), signnet.label_index("stop")]
    with pytest.raises(VictimError, match="banana"):
        ReprogramAttack(classes=2, label_map=["banana", "stop"]).label(signnet, board)
    with pytest.raises(AttackError, match="one victim label per digit"):
        ReprogramAttack(classes=3, label_map=["yield", "stop"]).label(signnet, board)


def test_reprogramming_needs_a_scene_with_a_window(stop_scene, signnet):
    with pytest.raises(AttackError, match="reprogram_board"):
        ReprogramAttack(classes=3).label(signnet, stop_scene)


def test_digit_split_is_disjoint_and_digits_land_in_the_window_only(board):
    task = DigitTask(classes=9, seed=0)
    train, held = task.split["train"][0].flatten(1), task.split["heldout"][0].flatten(1)
    assert len(train) + len(held) == 1617 and 0.25 < len(held) / (len(train) + len(held)) < 0.35
    assert torch.cdist(held[:50], train).amin(1).gt(0).float().mean() > 0.9   # split by sample, not by copy
    digits, _ = task.sample(2, torch.Generator().manual_seed(0))
    tex = DigitTask.print_into(board.texture, digits, board.regions["window"])
    x0, y0, x1, y1 = window_px(board)
    outside = torch.ones_like(board.texture[0], dtype=torch.bool)
    outside[y0:y1, x0:x1] = False
    assert torch.equal(tex[:, :, outside], board.texture[:, outside].expand(2, -1, -1))
    assert float(tex[:, :, y0:y1, x0:x1].amin()) < 0.3                      # ink in the window


def test_program_gets_gradient_while_window_and_victim_stay_untouched(board, signnet, tmp_path):
    patch = frame_for_scene(board)
    x0, y0, x1, y1 = window_px(board)
    assert float(patch.mask[:, y0:y1, x0:x1].sum()) == 0                   # the frame never covers the window
    victim_before = copy.deepcopy(signnet.state_dict())
    attack = ReprogramAttack(classes=9, steps=3, batch_size=4, lr=0.1)
    pipe = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (64, 64), object_width_m=0.21)
    sampler = ViewSampler(object_width_m=0.21, distance_m=(0.8, 2.0), background_count=4)
    before = patch.weights.detach().clone()
    setup = AttackSetup(scene=board, patch=patch, victim=signnet, pipeline=pipe, sampler=sampler, palette=load_palette())
    result = attack.run(setup, RunConfig(seed=0, progress=False), tmp_path)
    assert result.steps_done == 3 and result.zero_grad_steps == 0
    assert not torch.equal(before, patch.weights)                          # the program learned
    for k, v in signnet.state_dict().items():
        assert torch.equal(v, victim_before[k]), f"victim parameter {k} changed"
    digits, _ = attack.task.sample(3, torch.Generator().manual_seed(1))
    base = DigitTask.print_into(board.texture, digits, board.regions["window"])
    out = patch.apply(base).detach()
    assert torch.equal(out[:, :, y0:y1, x0:x1], base[:, :, y0:y1, x0:x1])  # the task input is untouched


def test_curriculum_starts_from_an_easy_view_and_ends_on_the_full_ranges():
    sampler = ViewSampler(object_width_m=0.21, distance_m=(0.6, 3.0), background_count=4)
    attack = ReprogramAttack(classes=4, curriculum=0.5, curriculum_start=0.1)
    easy = attack.sampler_now(sampler, 0.0)
    assert easy.azimuth_deg == pytest.approx((-6.0, 6.0)) and easy.noise_std[1] == pytest.approx(0.004)
    assert easy.motion_px == (1,) and easy.jpeg_share == 0.0
    assert 0.6 < easy.distance_m[0] < easy.distance_m[1] < 3.0
    # half-way through the curriculum: 55 % of the width
    assert attack.sampler_now(sampler, 0.25).azimuth_deg == pytest.approx((-33.0, 33.0))
    assert attack.sampler_now(sampler, 0.5) is sampler      # the full ranges from then on
    with pytest.raises(AttackError, match="curriculum"):
        ReprogramAttack(curriculum=1.5)


def test_the_best_program_is_picked_only_from_full_range_draws():
    attack = ReprogramAttack(classes=4, steps=100, curriculum=0.3, ema=0.9)
    for progress, final in [(0.0, False), (0.3, False), (0.45, False), (0.5, True), (0.99, True)]:
        assert attack.draws_final(progress) is final, progress  # the running success needs ~20 steps to settle
    assert ReprogramAttack(classes=4, curriculum=0.0).draws_final(0.0)


def test_a_fixed_seed_gives_the_same_program(board, signnet, tmp_path):
    pipe = ViewPipeline(Renderer(), BackgroundBank(2, seed=0), (48, 48))
    sampler = ViewSampler(object_width_m=0.21, distance_m=(0.8, 2.0), background_count=2)
    programs = []
    for i in range(2):
        patch = frame_for_scene(board)
        attack = ReprogramAttack(classes=4, steps=3, batch_size=2, lr=0.1, curriculum=0.5)
        attack.label(signnet, board)
        setup = AttackSetup(scene=board, patch=patch, victim=signnet, pipeline=pipe, sampler=sampler,
                            palette=load_palette())
        attack.run(setup, RunConfig(seed=0, progress=False), tmp_path / str(i))
        programs.append(patch.weights.detach())
    assert torch.equal(programs[0], programs[1]) and programs[0].abs().sum() > 0


def test_auto_label_map_matches_each_digit_to_a_distinct_likely_label_then_freezes(board, signnet):
    attack = ReprogramAttack(classes=3, label_map="auto", steps=100, curriculum=0.3, remap_every=10)
    attack.label(signnet, board)
    assert attack.label_map.tolist() == [0, 1, 2]                  # before any matching: the first labels
    objective = attack.objective_for(signnet)
    out = torch.full((3, 9), -5.0)
    out[0, 5], out[0, 2] = 5.0, 4.0                                # digit 0 likes label 5, then 2
    out[1, 5] = 6.0                                                # digit 1 likes only label 5
    out[2, 7] = 5.0
    attack.observe(out, torch.tensor([0, 1, 2]), 0.05)             # a step during the matching: gathered
    attack.rematch()
    assert attack.label_map.tolist() == [2, 5, 7]                  # one-to-one: digit 1 keeps 5, digit 0 takes 2
    loss = objective.loss(out, torch.tensor([0, 1, 2]), None)      # the loss follows the new map
    assert float(loss[1:].max()) < 1e-3 and float(loss[0]) == pytest.approx(math.log(1 + math.e), abs=1e-4)
    gathered = float(attack._counts.sum())
    attack.observe(-out, torch.tensor([0, 1, 2]), 0.3)             # frozen: nothing more is gathered
    assert float(attack._counts.sum()) == gathered and attack.mapping(0.05) and not attack.mapping(0.3)
    assert not attack.draws_final(0.35)                            # the running success still remembers old maps
    assert attack.draws_final(0.6)
    with pytest.raises(AttackError, match="'auto'"):
        ReprogramAttack(label_map="digits")


def test_a_learned_label_map_survives_a_resume(board, signnet, tmp_path):
    pipe = ViewPipeline(Renderer(), BackgroundBank(2, seed=0), (48, 48))
    sampler = ViewSampler(object_width_m=0.21, distance_m=(0.8, 2.0), background_count=2)
    kw = dict(classes=4, label_map="auto", steps=6, batch_size=4, lr=0.1, curriculum=0.5, remap_every=1)
    attack = ReprogramAttack(**kw)
    attack.label(signnet, board)
    setup = AttackSetup(scene=board, patch=frame_for_scene(board), victim=signnet, pipeline=pipe, sampler=sampler,
                        palette=load_palette())
    attack.run(setup, RunConfig(seed=0, progress=False), tmp_path)
    learned = attack.label_map.clone()
    assert len(set(learned.tolist())) == 4 and learned.max() < len(signnet.labels)
    fresh = ReprogramAttack(**kw)
    fresh.label(signnet, board)
    fresh.load_checkpoint_state(load_torch(tmp_path / "checkpoint.pt", "checkpoint")["attack"])
    assert torch.equal(fresh.label_map, learned)
