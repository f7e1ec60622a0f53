"""Fog on training renders (``physattack.eot.fog``): Koschmieder's law by each sign's own distance, the
draws of a training set otherwise unchanged, and a bad share refused in one sentence."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from physattack.eot import BackgroundBank, ViewSampler
from physattack.eot.fog import AIRLIGHT_ALBEDO, Fog, FogDraw, airlight
from physattack.eot.frames import FrameSampler, render_frames
from physattack.errors import InputError
from physattack.render import Renderer
from physattack.scene import load_scene
from physattack.train.classifier import SignNetTraining, render_set
from physattack.train.detector import DetNetTraining, FrameDraws
from physattack.train.detector import render_set as render_frame_set
from physattack.train.world import ViewSource


def test_koschmieder_mixes_the_layer_with_the_airlight_by_its_transmission():
    air = torch.tensor([[0.6, 0.7, 0.8]])
    fog = Fog(beta=torch.tensor([math.log(2) / 10]), background_m=torch.tensor([20.0]), air=air)
    image, alpha = torch.full((1, 3, 2, 2), 0.2), torch.ones(1, 1, 2, 2)
    half = fog.over(image, alpha, torch.tensor([10.0]))            # t = 1/2 at 10 m
    assert torch.allclose(half, (0.2 + air.view(1, 3, 1, 1)) / 2)
    quarter = fog.background(image)                                # t = 1/4 at 20 m
    assert torch.allclose(quarter, 0.25 * 0.2 + 0.75 * air.view(1, 3, 1, 1))
    clear = Fog(beta=torch.zeros(1), background_m=torch.tensor([1e9]), air=air)
    assert torch.equal(clear.over(image, alpha, torch.tensor([10.0])), image)
    white = airlight(torch.tensor([0.5]), torch.tensor([0.6]), torch.ones(1, 3))
    assert torch.allclose(white, 0.8 * torch.tensor([AIRLIGHT_ALBEDO]))


def test_a_foggy_frame_keeps_its_layout_and_boxes_and_the_far_sign_loses_more_contrast():
    stop = load_scene("stop_sign")
    plain = ViewSampler(background_count=4, jpeg_share=0.0, noise_std=(0.0, 0.0), exposure=(1.0, 1.0),
                        contrast=(1.0, 1.0), azimuth_deg=(0.0, 0.0), elevation_deg=(0.0, 0.0), roll_deg=(0.0, 0.0))
    sampler = FrameSampler(plain,
                           fog=FogDraw(share=1.0, transmission=(0.3, 0.3), background=(2.0, 2.0)))
    layout = sampler.sample_layout(1, [0.75], torch.Generator().manual_seed(0), signs_per_frame=(0.0, 0.0, 1.0))
    two = dict(distance_m=torch.tensor([6.0, 12.0]), frame=torch.tensor([0.3, 0.15]),
               shift_x=torch.tensor([-0.25, 0.25]), shift_y=torch.zeros(2))
    layout = replace(layout, params=replace(layout.params, **two))
    foggy = sampler.sample_fog(layout, torch.Generator().manual_seed(1))
    assert float(foggy.fog.transmission(torch.tensor(12.0))) == pytest.approx(0.3)       # set by the farthest sign
    assert float(foggy.fog.background_m) == pytest.approx(24.0)
    bank, renderer = BackgroundBank(4, seed=0), Renderer()
    clear, fogged = (render_frames(renderer, bank, [stop], lay, (64, 64)) for lay in (layout, foggy))
    assert len(clear.boxes[0]) == len(fogged.boxes[0]) == 2
    assert torch.equal(clear.boxes[0], fogged.boxes[0])
    air = foggy.fog.air.view(3, 1, 1)
    for box, t in zip(clear.boxes[0], (math.sqrt(0.3), 0.3)):            # the near sign at half the distance
        cx, cy = int(box[0] + box[2]) // 2, int(box[1] + box[3]) // 2
        mid = (slice(None), slice(cy - 1, cy + 2), slice(cx - 1, cx + 2))
        c, f = clear.images[0][mid], fogged.images[0][mid]
        assert torch.allclose(f, (c * t + air * (1 - t)).clamp(0, 1), atol=0.02)


def test_fog_on_a_training_set_changes_nothing_but_the_fogged_views():
    g = torch.Generator().manual_seed(5)
    sampler = FrameSampler(ViewSampler(background_count=4, jpeg_share=0.0))
    bank, scenes = BackgroundBank(4, seed=0), [load_scene("stop_sign"), load_scene("yield_sign")]
    clear = render_frame_set(scenes, FrameDraws(sampler, bank), 6, g.manual_seed(5), 48)
    half = render_frame_set(scenes, FrameDraws(replace(sampler, fog=FogDraw(share=0.5)), bank), 6, g.manual_seed(5), 48)
    assert all(torch.equal(a, b) for a, b in zip(clear.boxes, half.boxes))
    changed = [not torch.equal(a, b) for a, b in zip(clear.images, half.images)]
    assert any(changed) and not all(changed)

    steady = ViewSampler(background_count=4, jpeg_share=0.0, exposure=(1.0, 1.0), contrast=(1.0, 1.0))
    source = ViewSource(Renderer(), steady, bank)
    crops, labels = render_set(["stop_sign"], 6, source, torch.Generator().manual_seed(2), 32)
    none, _ = render_set(["stop_sign"], 6, source, torch.Generator().manual_seed(2), 32, fog=FogDraw(share=0.0))
    thick, same = render_set(["stop_sign"], 6, source, torch.Generator().manual_seed(2), 32,
                             fog=FogDraw(share=1.0, transmission=(0.1, 0.1), background=(4.0, 4.0)))
    assert torch.equal(crops, none) and torch.equal(labels, same)
    spread = lambda x: x.float().std(dim=(2, 3)).mean(1)                 # noqa: E731 (each view's contrast)
    assert (spread(thick) < 0.5 * spread(crops)).all()


@pytest.mark.parametrize("make", [lambda: SignNetTraining(fog_share=1.5), lambda: DetNetTraining(fog_share=-0.1)])
def test_a_fog_share_outside_zero_to_one_is_one_sentence(make):
    with pytest.raises(InputError, match="fog_share") as err:
        make()
    assert str(err.value).count(".") >= 1 and "\n" not in str(err.value)
