"""The differentiable verdict (physattack/drive/surrogate.py) agrees with the judge's hard k-of-n rule on planted
readings (a drive that stops, one that runs, ones on the boundary, and many random ones) and sends its
gradient to the frames of the windows that would stop the car."""

from __future__ import annotations

import pytest
import torch

from physattack.drive.judge import first_recognition
from physattack.drive.surrogate import soft_stop, usable_frames
from physattack.errors import InputError

K, N = 3, 5


def hard_stops(correct: torch.Tensor, usable: torch.Tensor) -> bool:
    """The judge's verdict: recognised at a frame at which the sign is still at the braking distance or farther."""
    at = first_recognition(correct, K, N)
    return at is not None and bool(usable[at])


def planted(hits: list[int], t: int = 60) -> torch.Tensor:
    correct = torch.zeros(t)
    correct[hits] = 1.0
    return correct


USABLE = torch.arange(60) < 40          # the braking point falls after frame 39


@pytest.mark.parametrize("hits, stops", [
    ([0, 1, 2], True),                  # recognised at once
    ([], False),                        # never read as a stop sign
    ([5, 7, 9, 20, 22, 24, 50, 51, 52], True),   # k of n in the first windows
    ([37, 38, 39], True),               # the k-th reading on the last usable frame: stops
    ([38, 39, 40], False),              # the k-th reading one frame past the braking point: runs
    (list(range(0, 40, 3)), False),     # every window holds at most 2 of 5: runs
    ([41, 42, 43, 44, 45], False),      # recognised, but only past the braking point
])
def test_agrees_with_the_hard_rule_on_planted_drives(hits, stops):
    correct = planted(hits)
    assert hard_stops(correct.bool(), USABLE) is stops
    assert (float(soft_stop(correct, USABLE, K, N)) > 0.5) is stops


def test_agrees_with_the_hard_rule_on_random_drives_of_every_length():
    g = torch.Generator().manual_seed(0)
    for trial in range(300):
        t = int(torch.randint(N, 400, (1,), generator=g))
        correct = torch.rand(t, generator=g) < torch.rand(1, generator=g) * 0.6
        usable = torch.arange(t) < int(torch.randint(0, t + 1, (1,), generator=g))
        soft = float(soft_stop(correct.float(), usable, K, N))
        assert (soft > 0.5) is hard_stops(correct, usable), (trial, t, soft)
        assert 0.0 <= soft <= 1.0


def test_batches_and_a_drive_with_no_usable_frame():
    correct = torch.stack([planted([0, 1, 2]), planted([])])
    out = soft_stop(correct, USABLE, K, N)
    assert out.shape == (2,) and out[0] > 0.9 and out[1] < 0.01
    assert float(soft_stop(planted([0, 1, 2]), torch.zeros(60, dtype=torch.bool), K, N)) == 0.0


def test_the_gradient_goes_to_the_window_that_would_stop_the_car():
    p = torch.full((60,), 0.05)
    p[[10, 11, 12]] = 0.45                      # the window closest to stopping the car
    p[[50, 51, 52]] = 0.95                      # reads well, but past the braking point: cannot stop it
    p.requires_grad_(True)
    soft_stop(p, USABLE, K, N).backward()
    g = p.grad
    assert g[10:13].min() > 0
    assert g[50:53].abs().max() == 0            # frames only in windows past the braking point
    assert g[10:13].min() > 20 * g[30:35].abs().max()


def test_bad_windows_and_braking_points_name_the_key():
    with pytest.raises(InputError, match="drive.settings.k"):
        soft_stop(planted([]), USABLE, 6, 5)
    with pytest.raises(InputError, match="longer than the drive"):
        soft_stop(torch.zeros(4), torch.ones(4, dtype=torch.bool), 3, 5)
    with pytest.raises(InputError, match="beyond the drive's first frame"):
        usable_frames(torch.tensor([40.0, 30.0, 20.0]), braking_m=51.0)
    assert usable_frames(torch.tensor([80.0, 52.0, 50.0]), 51.0).tolist() == [True, True, False]


def test_gradients_reach_the_texture_through_the_detectors_crop_and_lower_the_soft_verdict(stop_scene, signnet):
    """An approach window of real frames read by the two-stage stack (the bundled DetNet's boxes, detached; SignNet
    on the crops): the soft verdict has a gradient on the texture, and a few signed steps on it lower the verdict."""
    from physattack.drive.stacks import StackSettings, TiledDetector, TwoStageStack
    from physattack.drive.render import DriveRenderer
    from physattack.drive.trajectories import Dashcam, DriveSet
    from physattack.eot import BackgroundBank
    from physattack.render import Renderer
    from physattack.victims import load_detnet

    cam = Dashcam()
    tiled = TiledDetector(load_detnet().eval(), cam, stop_scene.texture_size_m, StackSettings())
    stack = TwoStageStack(tiled, signnet.eval(), signnet.label_set("stop"), 0.3, 0.62, 96, {})
    drive = DriveSet(speeds_kmh=[50.0], lighting=["noon"], lane_offsets_m=[3.5], background_count=2,
                     noise_std=0.0).drives()[0]
    frames = drive.frames(cam, stop_scene.texture_size_m)
    start = int(torch.argmin((frames.distance_m - 36.0).abs()))
    window = frames[start:start + N + 1]                    # six consecutive frames, 36 to ~33 m
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=3000), cam)
    usable = torch.ones(len(window), dtype=torch.bool)
    texture = stop_scene.texture.clone().requires_grad_(True)

    def verdict():
        views = renderer.render(stop_scene, texture, window, region=tiled.region)
        p = stack.soft_read(views.images, views.region, views.boxes)
        return p, soft_stop(p, usable, K, N)

    p, before = verdict()
    assert (p > 0.5).sum() >= K and before > 0.9          # the clean sign is recognised in this window
    before.backward()
    grad = texture.grad
    assert grad.abs().sum() > 0 and torch.isfinite(grad).all()
    for _ in range(4):
        with torch.no_grad():
            texture -= 0.06 * texture.grad.sign()
            texture.clamp_(0, 1)
            texture.grad = None
        p, after = verdict()
        after.backward()
    before, after = float(before.detach()), float(after.detach())
    assert after < before - 0.2, (before, after, p.detach().tolist())
