"""Context frames for detectors (physattack/eot/frames.py): framing, replay, multi-sign compositing."""

from __future__ import annotations

import math

import pytest
import torch

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline, ViewSampler
from physattack.eot.frames import FrameGrid, FrameSampler, object_share, render_frames
from physattack.render import Renderer
from physattack.scene import load_scene


def test_share_follows_distance_and_field_of_view_within_bounds():
    d = torch.tensor([2.0, 10.0, 40.0])
    share = object_share(0.75, d, torch.full((3,), 12.0), (0.1, 0.6))
    expected = 0.75 / (2 * 10.0 * math.tan(math.radians(6.0)))
    assert share.tolist() == pytest.approx([0.6, expected, 0.1], rel=1e-4)


def test_sampler_keeps_the_view_ranges_and_reframes(stop_scene):
    view = ViewSampler(background_count=4, distance_m=(5.0, 20.0))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    a, b = FrameSampler(view).sample(32, g1), FrameSampler(view).sample(32, g2)
    assert torch.equal(a.frame, b.frame) and torch.equal(a.shift_x, b.shift_x)        # replayable
    assert ((a.distance_m >= 5.0) & (a.distance_m <= 20.0)).all()
    assert ((a.frame >= 0.08) & (a.frame <= 0.6)).all() and a.frame.std() > 0.03
    room = 0.5 - a.frame / 2
    assert (a.shift_x.abs() <= room).all() and (a.shift_y.abs() <= room).all() and a.shift_x.abs().max() > 0.1
    pipe = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (96, 96))
    views = pipe(stop_scene, stop_scene.texture, a[:8])
    widths = (views.boxes[:, 2] - views.boxes[:, 0]) / 96
    assert (views.boxes[:, :2] >= 0).all() and (views.boxes[:, 2:] <= 96).all()         # the sign stays in frame
    assert (widths <= a.frame[:8] + 0.03).all()


def test_grid_is_the_eval_grid_reframed_and_fixed():
    grid = FrameGrid(EvalGrid(azimuth_deg=[-30.0, 30.0], distance_m=[4.0, 22.0], lighting=["noon"], background_count=4))
    p, q = grid.params(), grid.params()
    assert len(grid) == len(p) == 4 and grid.conditions() == grid.grid.conditions()
    assert torch.equal(p.shift_x, q.shift_x) and torch.equal(p.frame, q.frame)
    near, far = p.frame[p.distance_m == 4.0], p.frame[p.distance_m == 22.0]
    assert (near > far).all() and float(far.min()) > 0.1


def test_frames_hold_several_signs_or_none_with_their_boxes():
    scenes = [load_scene("stop_sign"), load_scene("yield_sign")]
    sampler = FrameSampler(ViewSampler(background_count=4, jpeg_share=0.0, distance_m=(4.0, 8.0)),
                           object_share=(0.2, 0.3))
    layout = sampler.sample_layout(6, [max(s.texture_size_m) for s in scenes], torch.Generator().manual_seed(3),
                                   signs_per_frame=(0.3, 0.3, 0.4))
    assert layout.scene_index.shape == (6, 2) and len(layout.params) == 12
    # one light, one set of effects and one background per frame
    assert torch.equal(layout.params.background_index[0::2], layout.params.background_index[1::2])
    frames = render_frames(Renderer(), BackgroundBank(4, seed=0), scenes, layout, (96, 96))
    assert frames.images.shape == (6, 3, 96, 96) and len(frames.boxes) == 6
    counts = (layout.scene_index >= 0).sum(1)
    for i in range(6):
        assert len(frames.boxes[i]) <= int(counts[i])
        placed = [int(s) for s in layout.scene_index[i] if s >= 0]
        assert all(label in placed for label in frames.scene_index[i].tolist())
        for box in frames.boxes[i]:
            assert (box[2:] > box[:2]).all() and (box >= 0).all() and (box <= 96).all()
    assert 0 in counts.tolist() and 2 in counts.tolist() and sum(len(b) for b in frames.boxes) >= 3
    empty = [i for i in range(6) if counts[i] == 0]
    assert all(len(frames.boxes[i]) == 0 for i in empty)


def test_a_nearer_sign_hides_the_one_behind():
    stop = load_scene("stop_sign")
    sampler = FrameSampler(ViewSampler(background_count=4, jpeg_share=0.0, azimuth_deg=(0.0, 0.0),
                                       elevation_deg=(0.0, 0.0), roll_deg=(0.0, 0.0)))
    layout = sampler.sample_layout(1, [0.75], torch.Generator().manual_seed(0), signs_per_frame=(0.0, 0.0, 1.0))
    p = layout.params
    from dataclasses import replace
    same = dict(shift_x=torch.zeros(2), shift_y=torch.zeros(2))
    layout = replace(layout, params=replace(p, distance_m=torch.tensor([5.0, 10.0]), frame=torch.tensor([0.5, 0.25]),
                                            **same))
    frames = render_frames(Renderer(), BackgroundBank(4, seed=0), [stop], layout, (64, 64))
    assert len(frames.boxes[0]) == 1                   # the far sign is wholly behind the near one
    w = float(frames.boxes[0][0, 2] - frames.boxes[0][0, 0])
    assert w == pytest.approx(32, abs=2)
