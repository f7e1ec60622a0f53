"""The natural-failure atlas (physattack/evaluate/atlas.py): a planted failure is found; haze and
occlusion do what they say."""

from __future__ import annotations

import pytest
import torch

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline
from physattack.evaluate.atlas import (Atlas, AtlasDesign, apply_haze, build_atlas, default_axes, occlude_with_bar, with_axes)
from physattack.render import Renderer
from physattack.victims.base import Classifier


class FailsWhenTurned(Classifier):
    """Wraps a victim; reads any view whose red face looks narrower than ``min_width_px`` (the stop sign
    seen from beyond about ±50° azimuth at the atlas's framing) as ``yield`` with confidence 0.95."""

    def __init__(self, inner, min_width_px: int = 37):
        super().__init__()
        self.inner, self.labels, self.min_width_px = inner, inner.labels, min_width_px

    def logits(self, images):
        r, g, b = images[:, 0], images[:, 1], images[:, 2]
        red = (r > 0.25) & (r > 1.8 * g) & (r > 1.8 * b)
        width = (red.sum(1) >= 4).sum(1)
        out = self.inner(images)
        trap = torch.zeros_like(out)                  # softmax: 0.95 on yield, the rest shared by the others
        trap[:, self.labels.index("yield")] = torch.log(torch.tensor(0.95 * (len(self.labels) - 1) / 0.05))
        return torch.where((width < self.min_width_px)[:, None], trap, out)


@pytest.fixture(scope="module")
def held_out():
    return ViewPipeline(Renderer(), BackgroundBank(8, seed=1000), (96, 96))


def test_atlas_finds_a_planted_azimuth_failure(stop_scene, signnet, held_out):
    victim = FailsWhenTurned(signnet).eval()
    axes = with_axes(default_axes(), ["azimuth_deg", "distance_m"], distance_m=(4.0, 20.0))
    atlas, samples, probs = build_atlas(stop_scene, victim, held_out, AtlasDesign(per_axis=48, bins=6, seed=3),
                                        axes=axes)
    az = [r for r in atlas.regions if list(r.box) == ["azimuth_deg"]]
    assert az, [r.name for r in atlas.regions]
    # the trap fires beyond about ±50°: both outer sixths of [-85, 85] fail, nothing near head-on does
    lows = sorted(r.box["azimuth_deg"] for r in az)
    assert lows[0][0] == -85.0 and lows[-1][1] == 85.0
    assert all(lo >= 28.0 or hi <= -28.0 for lo, hi in lows)
    for r in az:
        assert r.accuracy < 0.5 and r.top_wrong_label == "yield" and r.confident_failures > 0 and r.examples
    assert not [r for r in atlas.regions if "distance_m" in r.box]           # the unplanted axis stays clean
    # held-out views inside the regions are marked; head-on ones are not
    grid = EvalGrid(azimuth_deg=[-70.0, 0.0, 70.0], distance_m=[8.0], lighting=["noon"])
    assert atlas.contains(grid.params()).tolist() == [True, False, True]
    again = Atlas.from_dict(atlas.to_dict())
    assert again.contains(grid.params()).tolist() == [True, False, True] and again.regions[0].name == atlas.regions[0].name


def test_haze_follows_koschmieder():
    images = torch.full((2, 3, 4, 4), 0.2)
    depth = torch.full((2, 1, 4, 4), 10.0)
    depth[:, :, 0] = float("inf")
    out = apply_haze(images, depth, torch.tensor([0.0, 0.1]), airlight=0.8)
    assert torch.allclose(out[0], images[0])
    t = torch.exp(torch.tensor(-1.0))
    assert out[1, 0, 2, 2] == pytest.approx(float(0.2 * t + 0.8 * (1 - t)))
    far = torch.exp(torch.tensor(-0.1 * 30.0))                          # background: 3× the object's depth
    assert out[1, 0, 0, 0] == pytest.approx(float(0.2 * far + 0.8 * (1 - far)))


def test_occlusion_bar_covers_its_share_of_the_box():
    images = torch.ones(1, 3, 10, 40)
    out = occlude_with_bar(images, torch.tensor([[10.0, 2.0, 30.0, 8.0]]), torch.tensor([0.5]), torch.tensor([0.5]),
                           colour=(0.0, 0.0, 0.0))
    covered = (1 - out[0, 0, 5]).sum()
    assert covered == pytest.approx(10.0) and out[0, 0, 5, 20] == 0 and out[0, 0, 5, 10] == 1
