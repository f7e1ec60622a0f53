import os
import signal

import pytest
import torch

from physattack.attack import AttackError, AttackSetup, EOTAttack, targeted, untargeted
from physattack.config import RunConfig
from physattack.errors import InputError
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.patch import sticker_for_scene
from physattack.printing import load_palette
from physattack.render import Renderer


def test_objectives_point_the_right_way():
    logits = torch.tensor([[3.0, 1.0, 0.0], [0.0, 4.0, 0.0]])
    t = targeted(logits, 1)
    assert t[1] < t[0]                      # the view already on the target costs less
    u = untargeted(logits, 0)
    assert u[0] > 0 > u[1]                  # still true-label: positive; already fooled: negative


@pytest.fixture(scope="module")
def parts(stop_scene):
    bank = BackgroundBank(8, seed=0)
    return {"scene": stop_scene, "pipeline": ViewPipeline(Renderer(), bank, (64, 64)),
            "sampler": ViewSampler(background_count=8, jpeg_share=0.0), "palette": load_palette()}


class SigtermAfter:
    """A sampler that sends this process SIGTERM (or ``sig``) during its n-th draw, as Slurm or a user would."""

    def __init__(self, sampler, n, sig=signal.SIGTERM):
        self.sampler, self.n, self.calls, self.sig = sampler, n, 0, sig

    def sample(self, n, generator):
        self.calls += 1
        if self.calls == self.n:
            os.kill(os.getpid(), self.sig)
        return self.sampler.sample(n, generator)


def run(parts, signnet, tmp_path, steps, resume=None, seed=0, patch=None, sampler=None, search=3):
    patch = patch or sticker_for_scene(parts["scene"])
    attack = EOTAttack(target="yield", steps=steps, batch_size=6, lr=0.2, checkpoint_every=2,
                       mask_search_steps=search)
    setup = AttackSetup(scene=parts["scene"], patch=patch, victim=signnet, pipeline=parts["pipeline"],
                        sampler=sampler or parts["sampler"], palette=parts["palette"])
    result = attack.run(setup, RunConfig(seed=seed, resume=resume and str(resume), progress=False), tmp_path)
    return patch, result


def mean_target_prob(parts, signnet, patch):
    params = ViewSampler(background_count=8, jpeg_share=0.0).sample(24, torch.Generator().manual_seed(99))
    with torch.no_grad():
        views = parts["pipeline"](parts["scene"], patch.apply(parts["scene"].texture), params)
        return float(torch.softmax(signnet(views.images), 1)[:, signnet.label_index("yield")].mean())


def test_targeted_attack_raises_the_target_probability(parts, signnet, tmp_path):
    patch = sticker_for_scene(parts["scene"])
    before = mean_target_prob(parts, signnet, patch)
    patch, result = run(parts, signnet, tmp_path, steps=20, patch=patch, search=10)
    assert result.steps_done == 20 and result.zero_grad_steps == 0
    after = mean_target_prob(parts, signnet, patch)
    assert after > before + 0.05, (before, after)
    assert (tmp_path / "checkpoint.pt").is_file()


def test_sigterm_stops_cleanly_and_resume_gives_the_bit_identical_patch(parts, signnet, tmp_path):
    full, _ = run(parts, signnet, tmp_path / "full", steps=5)
    # the 3 mask-search draws come first, so the 5th draw is optimizer step 2
    _, stopped = run(parts, signnet, tmp_path / "part", steps=5, sampler=SigtermAfter(parts["sampler"], 5))
    assert stopped.interrupted and stopped.signal == signal.SIGTERM and stopped.steps_done == 2
    resumed, result = run(parts, signnet, tmp_path / "part2", steps=5, resume=tmp_path / "part", seed=123)
    assert result.steps_done == 5 and not result.interrupted and result.signal is None
    assert torch.equal(full.mask, resumed.mask)
    assert torch.equal(full.logits, resumed.logits)


def test_ctrl_c_stops_after_the_step_and_says_which_signal(parts, signnet, tmp_path):
    _, stopped = run(parts, signnet, tmp_path, steps=4, search=0,
                     sampler=SigtermAfter(parts["sampler"], 2, signal.SIGINT))
    assert stopped.interrupted and stopped.signal == signal.SIGINT == 2 and stopped.steps_done == 2
    assert (tmp_path / "checkpoint.pt").is_file()


def test_bad_attack_settings_say_what_to_do():
    with pytest.raises(AttackError, match="attack.target"):
        EOTAttack(objective="targeted", target=None)
    with pytest.raises(AttackError, match="Unknown objective"):
        EOTAttack(objective="sideways")


@pytest.mark.parametrize("key, value", [
    ("steps", -1), ("steps", 0), ("steps", 2.5), ("batch_size", 0), ("lr", 0.0), ("lr", float("nan")),
    ("nps_weight", -0.1), ("tv_weight", -1.0), ("ema", 1.0), ("ema", -0.1), ("checkpoint_every", -1),
    ("mask_search_steps", -1),
])
def test_out_of_range_settings_are_refused_where_the_attack_is_built(key, value):
    with pytest.raises(AttackError, match=rf"attack\.{key} must be") as err:
        EOTAttack(**{key: value})
    assert "\n" not in str(err.value)


def test_reprogram_settings_are_checked_too():
    from physattack.attack.reprogram import ReprogramAttack
    for key, value in [("classes", 1), ("curriculum_start", -0.5), ("remap_every", 0), ("steps", 0)]:
        with pytest.raises(AttackError, match=rf"attack\.{key} must be"):
            ReprogramAttack(**{key: value})


def test_resume_from_nowhere_is_refused(parts, signnet, tmp_path):
    with pytest.raises(AttackError, match="No checkpoint"):
        run(parts, signnet, tmp_path, steps=1, resume=tmp_path / "nothing")


class Recording:
    """A pipeline that keeps the textures it was asked to render."""

    def __init__(self, pipeline):
        self.pipeline, self.textures = pipeline, []

    def __call__(self, scene, texture, params, **kw):
        self.textures.append(texture.detach())
        return self.pipeline(scene, texture, params, **kw)


def test_placement_error_during_optimization_moves_stickers_per_view(parts, signnet, tmp_path):
    from physattack.patch.placement import PlacementError

    patch = sticker_for_scene(parts["scene"])
    pipeline = Recording(parts["pipeline"])
    attack = EOTAttack(target="yield", steps=2, batch_size=4, lr=0.2, mask_search_steps=0,
                       placement={"shift_mm": 5, "rotation_deg": 5})
    assert isinstance(attack.placement, PlacementError) and attack.placement.shift_mm == 5
    setup = AttackSetup(scene=parts["scene"], patch=patch, victim=signnet, pipeline=pipeline,
                        sampler=parts["sampler"], palette=parts["palette"])
    before = patch.logits.detach().clone()
    result = attack.run(setup, RunConfig(seed=0, progress=False), tmp_path)
    assert result.steps_done == 2 and result.zero_grad_steps == 0 and not torch.equal(before, patch.logits)
    first = pipeline.textures[0]
    assert first.shape == (4, 3, 512, 512)                          # one deployment per view
    assert not torch.equal(first[0], first[1])
    assert not torch.equal(first[0], patch.apply(parts["scene"].texture).detach())


def test_placement_error_needs_stickers_and_names_its_keys(parts):
    from physattack.patch import paint_for_scene

    attack = EOTAttack(placement={"shift_mm": 5})
    with pytest.raises(AttackError, match=r"^attack.placement moves stickers, .*patch=sticker"):
        attack.check_patch(paint_for_scene(parts["scene"]))
    attack.check_patch(sticker_for_scene(parts["scene"]))
    EOTAttack(placement=None).check_patch(paint_for_scene(parts["scene"]))
    with pytest.raises(InputError, match=r"^attack.placement.rotation_deg must be in \[0, 180\]"):
        EOTAttack(placement={"rotation_deg": -1})


def test_the_best_state_waits_for_the_running_figure_to_span_its_steps():
    """A run that starts high (``init=``: the first batch reads 0.9, the next ones 0.85) keeps as its best a state
    from once the running success spans 1 / (1 - ema) steps, not its first step; a run shorter than that keeps its
    last; without smoothing (ema 0) any step may be the best, as before."""
    from physattack.attack.checkpoint import LoopState

    class Patch:
        colors_final = True

        def state_dict(self):
            return {}

    def best_step(steps, ema, successes):
        attack, state = EOTAttack(target="yield", steps=steps, ema=ema), LoopState()
        for s in successes:
            state.step += 1
            attack._track_best(Patch(), state, s, 1.0 - s, (state.step - 1) / steps)
        return state.best_step

    assert best_step(30, 0.9, [0.9] + [0.85] * 29) == 10
    assert best_step(30, 0.9, [0.1] * 12 + [0.9] * 18) == 30          # a fresh run rising: its best comes late
    assert best_step(4, 0.9, [0.9, 0.85, 0.85, 0.85]) == 4
    assert best_step(30, 0.0, [0.9] + [0.85] * 29) == 1
