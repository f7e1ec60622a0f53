"""Random restarts (attack.restarts): the best start carries on as if it had been the only one."""

import signal

import pytest
import torch

from physattack.attack import AttackError, AttackSetup, EOTAttack
from physattack.attack.restarts import restart_seed
from physattack.config import RunConfig
from physattack.eot import BackgroundBank, ViewPipeline
from physattack.patch import sticker_for_scene
from physattack.printing import load_palette
from physattack.tracking import NullTracker

from tests.attack.test_loop import SigtermAfter, parts  # noqa: F401  (parts: test_loop's scene and pipeline)


class Planted(EOTAttack):
    """An attack whose steps succeed exactly when torch was seeded ``winner`` (each start seeds it with its own)."""

    winner: int = -1

    def _track_best(self, patch, state, success, loss, progress):
        super()._track_best(patch, state, float(torch.initial_seed() == self.winner), loss, progress)


class Recorder(NullTracker):
    def __init__(self):
        self.steps, self.summaries = [], {}

    def log(self, metrics, step=None):
        self.steps.append(step)

    def summary(self, metrics):
        self.summaries.update(metrics)


def run(parts, signnet, path, seed=0, restarts=1, sampler=None, resume=None, winner=None, tracker=None, judge=None,
        colours="free", progress=False):
    patch = sticker_for_scene(parts["scene"], colours=colours)
    attack = (EOTAttack if winner is None else Planted)(target="yield", steps=5, batch_size=6, lr=0.2,
                                                        checkpoint_every=2, mask_search_steps=3, restarts=restarts,
                                                        restart_steps=2, restart_judge=judge and judge.settings)
    attack.winner = winner
    setup = AttackSetup(scene=parts["scene"], patch=patch, victim=signnet, pipeline=parts["pipeline"],
                        sampler=sampler or parts["sampler"], palette=parts["palette"], validation=judge)
    result = attack.run(setup, RunConfig(seed=seed, resume=resume and str(resume), progress=progress), path, tracker)
    return patch, result


@pytest.mark.parametrize("winner", [0, 2])
def test_the_best_start_carries_on_as_the_only_run_at_its_seed(parts, signnet, tmp_path, winner):
    seed = restart_seed(3, winner)
    tracker = Recorder()
    patch, result = run(parts, signnet, tmp_path / "r", seed=3, restarts=3, winner=seed, tracker=tracker)
    assert tracker.steps == [1, 2, 3, 4, 5]                     # the chosen start's steps, once, in order
    assert tracker.summaries["train/start_chosen"] == winner and len(tracker.summaries) == 4
    starts = result.restarts
    assert [s["seed"] for s in starts] == [restart_seed(3, r) for r in range(3)] and starts[0]["seed"] == 3
    assert len({s["seed"] for s in starts}) == 3 and all(s["steps"] == 2 for s in starts)
    assert [s["chosen"] for s in starts] == [r == winner for r in range(3)]
    assert [s["running_success"] > 0 for s in starts] == [r == winner for r in range(3)]
    assert result.steps_done == 5 and [h["step"] for h in result.history] == [1, 2, 3, 4, 5]
    alone, single = run(parts, signnet, tmp_path / "alone", seed=seed, winner=seed)
    assert single.restarts is None
    assert torch.equal(patch.mask, alone.mask) and torch.equal(patch.logits, alone.logits)
    assert [h["loss"] for h in result.history] == [h["loss"] for h in single.history]


def test_starts_differ_where_they_are_placed(parts, signnet, tmp_path):
    first, _ = run(parts, signnet, tmp_path / "a", seed=restart_seed(0, 0))
    other, _ = run(parts, signnet, tmp_path / "b", seed=restart_seed(0, 1))
    assert not torch.equal(first.mask, other.mask)                 # the mask search draws its own views


def test_a_restarted_run_resumes_bit_identically(parts, signnet, tmp_path):
    full, _ = run(parts, signnet, tmp_path / "full", restarts=2)
    # each start draws 3 mask-search batches and 2 steps; draw 12 is the chosen start's step 4
    _, stopped = run(parts, signnet, tmp_path / "part", restarts=2, sampler=SigtermAfter(parts["sampler"], 12))
    assert stopped.interrupted and stopped.signal == signal.SIGTERM and stopped.steps_done == 4
    resumed, result = run(parts, signnet, tmp_path / "again", restarts=2, resume=tmp_path / "part")
    assert result.steps_done == 5 and not result.interrupted and result.restarts == stopped.restarts
    assert sum(s["chosen"] for s in result.restarts) == 1                  # the starts' record survives the resume
    assert torch.equal(full.mask, resumed.mask) and torch.equal(full.logits, resumed.logits)


class Drives:
    """The red team's own drives, planted: the n-th start's patch runs ``weakest[n]`` of them for its weakest member
    (0.95 for the other); it draws from torch's generator, as rendering drives may."""

    def __init__(self, weakest, accept=None):
        self.weakest, self.textures = weakest, []
        self.settings = {"by": "drives", "accept": accept}

    def __call__(self, texture):
        self.textures.append(texture)
        torch.rand(100)
        return {"signnet": self.weakest[len(self.textures) - 1], "other": 0.95}


def test_starts_judged_by_the_red_teams_drives(parts, signnet, tmp_path):
    """The drives outrank the running success (restart 2 wins the steps, restart 1 the drives); the chosen start
    carries on as the only run at its seed; the judge saw each start's patch in its final colours."""
    judge, tracker = Drives([0.5, 0.9, 0.7]), Recorder()
    patch, result = run(parts, signnet, tmp_path / "r", seed=3, restarts=3, winner=restart_seed(3, 2), judge=judge,
                        tracker=tracker, colours="palette")
    starts = result.restarts
    assert [s["chosen"] for s in starts] == [False, True, False] and starts[2]["running_success"] > 0
    assert [s["drives_weakest"] for s in starts] == [0.5, 0.9, 0.7] and starts[1]["drives"] == {"signnet": 0.9,
                                                                                              "other": 0.95}
    assert tracker.summaries["train/start_chosen"] == 1 and tracker.summaries["train/start_1/drives_weakest"] == 0.9
    alone, single = run(parts, signnet, tmp_path / "alone", seed=restart_seed(3, 1), winner=restart_seed(3, 2),
                        colours="palette")
    assert torch.equal(patch.mask, alone.mask) and torch.equal(patch.logits, alone.logits)
    assert [h["loss"] for h in result.history] == [h["loss"] for h in single.history]
    for texture in judge.textures:                      # the palette's own colours under the stickers, not a blend
        on = texture[:, (texture != parts["scene"].texture).any(0)].T
        assert len(on) and (on[:, None] - patch.palette[None]).abs().amax(-1).min(1).values.max() < 1e-6


def test_a_start_that_reaches_accept_is_carried_on_at_once(parts, signnet, tmp_path, capsys):
    """The starts not tried come off the progress bar, which ends full (5 of 5 steps, not 5 of 9)."""
    judge = Drives([0.85, 1.0], accept=0.8)
    _, result = run(parts, signnet, tmp_path / "r", seed=3, restarts=3, judge=judge, progress=True)
    assert len(judge.textures) == 1 and [s["chosen"] for s in result.restarts] == [True]
    assert result.steps_done == 5 and [h["step"] for h in result.history] == [1, 2, 3, 4, 5]
    last = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "5/5" in last, last


def test_a_signal_during_a_start_judges_no_more(parts, signnet, tmp_path):
    """Drives take minutes: a start a signal cut short is not judged, and the best judged before it is kept."""
    judge = Drives([0.5, 1.0, 1.0])
    # each start draws 3 mask-search batches and 2 steps: draw 8 is start 1's first step
    _, result = run(parts, signnet, tmp_path / "r", seed=3, restarts=3, judge=judge,
                    sampler=SigtermAfter(parts["sampler"], 8))
    assert result.interrupted and len(judge.textures) == 1
    assert [(s["restart"], s["chosen"], "drives" in s) for s in result.restarts] == [(0, True, True), (1, False, False)]


def test_starts_judged_by_drives_need_the_drives(parts, signnet, tmp_path):
    attack = EOTAttack(target="yield", steps=5, batch_size=6, mask_search_steps=3, restarts=2, restart_steps=2,
                       restart_judge={"by": "drives"})
    setup = AttackSetup(scene=parts["scene"], patch=sticker_for_scene(parts["scene"]), victim=signnet,
                        pipeline=parts["pipeline"], sampler=parts["sampler"], palette=parts["palette"])
    with pytest.raises(AttackError, match="restart_judge.by=drives"):
        attack.run(setup, RunConfig(seed=0, progress=False), tmp_path, None)


@pytest.mark.parametrize("settings, key", [
    ({"restarts": 0}, "attack.restarts"),
    ({"restarts": 2, "restart_judge": {"by": "views"}}, "attack.restart_judge.by"),
    ({"restarts": 2, "restart_judge": {"accept": 1.5}}, "attack.restart_judge.accept"),
    ({"restarts": 2, "restart_steps": 0}, "attack.restart_steps"),
    ({"restarts": 2, "restart_steps": 5, "steps": 5}, "attack.restart_steps"),
    ({"restarts": 2, "method": "query"}, "attack.restarts"),
])
def test_restarts_it_cannot_make_are_refused_by_key(settings, key):
    with pytest.raises(AttackError, match=key.replace(".", r"\.")):
        EOTAttack(**settings)


def test_a_winning_first_start_over_approach_windows_is_the_run_without_restarts(stop_scene, signnet, tmp_path):
    """The preset's path: the later starts refit the detector framing and fill the sampler; the first start, carried
    on, frames and draws as it would have alone."""
    from physattack.drive.approach import ApproachSampler
    from physattack.drive.framing import DetectorFraming
    from physattack.drive.render import DriveRenderer
    from physattack.drive.stacks import StackSettings, TiledDetector
    from physattack.drive.trajectories import Dashcam
    from physattack.render import Renderer
    from physattack.victims import load_detnet

    detnet = load_detnet().eval()

    def go(restarts, path):
        cam = Dashcam()
        framing = DetectorFraming(TiledDetector(detnet, cam, stop_scene.texture_size_m, StackSettings()),
                                  DriveRenderer(Renderer(), BackgroundBank(4, seed=0), cam), drives=2, frames_per_drive=5)
        sampler = ApproachSampler(drives=2, segments=2, background_count=4, dashcam=cam, framing=framing, refit_every=3,
                                  views_per_step=4, views={"frame": (0.55, 0.7)})
        patch = sticker_for_scene(stop_scene)
        setup = AttackSetup(scene=stop_scene, patch=patch, victim=signnet, sampler=sampler, palette=load_palette(None),
                            pipeline=ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (64, 64)))
        attack = Planted(steps=5, lr=0.3, checkpoint_every=0, mask_search_steps=2, batch_size=4, restarts=restarts,
                         restart_steps=2)
        attack.winner = 1
        return patch, attack.run(setup, RunConfig(seed=1, progress=False), path)

    alone, single = go(1, tmp_path / "alone")
    patch, result = go(3, tmp_path / "r")
    assert [s["chosen"] for s in result.restarts] == [True, False, False]
    assert torch.equal(patch.mask, alone.mask) and torch.equal(patch.logits, alone.logits)
    assert [h["loss"] for h in result.history] == [h["loss"] for h in single.history]
