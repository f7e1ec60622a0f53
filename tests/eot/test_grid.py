"""The fixed evaluation grid (physattack/eot/grid.py)."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
import torch

from physattack.eot import LIGHTING_PRESETS, EvalGrid, SceneParams, ViewSampler
from physattack.errors import InputError


@pytest.fixture(scope="module")
def small() -> EvalGrid:
    return EvalGrid(azimuth_deg=[-30.0, 0.0, 45.0], distance_m=[5.0, 12.0], lighting=["low_sun", "noon"],
                    background_count=4, seed=7)


def test_length_is_the_product_of_the_lists(small):
    assert len(small) == 3 * 2 * 2
    assert len(small.conditions()) == len(small)
    assert len(small.params()) == len(small)
    default = EvalGrid()
    assert len(default) == 8 * 5 * 3 == len(default.params())


def test_conditions_cover_every_combination_once(small):
    combos = {(c["azimuth_deg"], c["distance_m"], c["lighting"]) for c in small.conditions()}
    assert len(combos) == len(small)
    assert {c[0] for c in combos} == {-30.0, 0.0, 45.0}
    assert {c[2] for c in combos} == {"low_sun", "noon"}


def test_conditions_order_matches_params(small):
    conds, p = small.conditions(), small.params()
    for i, c in enumerate(conds):
        assert float(p.azimuth_deg[i]) == c["azimuth_deg"]
        assert float(p.distance_m[i]) == c["distance_m"]
        preset = LIGHTING_PRESETS[c["lighting"]]
        for key, value in preset.items():
            assert float(getattr(p, key)[i]) == pytest.approx(value), (i, key)


def test_elevation_looks_up_from_camera_height(small):
    p = small.params()
    expected = torch.rad2deg(torch.atan((1.4 - 2.1) / p.distance_m))
    torch.testing.assert_close(p.elevation_deg, expected)
    assert torch.all(p.elevation_deg < 0)
    near = p.elevation_deg[p.distance_m == 5.0]
    assert float(near[0]) == pytest.approx(math.degrees(math.atan(-0.7 / 5.0)), abs=1e-4)


def test_fixed_camera_effects_and_backgrounds(small):
    p = small.params()
    n = len(small)
    assert torch.all(p.jpeg_quality == 100) and torch.all(p.motion_px == 1)
    assert torch.all(p.exposure == 1) and torch.all(p.contrast == 1) and torch.all(p.roll_deg == 0)
    assert torch.all(p.blur_sigma_px == small.blur_sigma_px) and torch.all(p.noise_std == small.noise_std)
    assert p.background_index.tolist() == [i % 4 for i in range(n)]
    assert torch.all(p.background_index < small.background_count)
    for name in ("bg_x", "bg_y"):
        v = getattr(p, name)
        assert float(v.min()) >= 0 and float(v.max()) <= 1
    assert float(p.bg_scale.min()) >= 0.5 and float(p.bg_scale.max()) <= 1.0
    expected_px = small.sensor_focal_px * (small.object_width_m / small.frame) / p.distance_m
    torch.testing.assert_close(p.sensor_px, expected_px)


def test_params_are_deterministic(small):
    a, b = small.params(), small.params()
    for f in fields(SceneParams):
        assert torch.equal(getattr(a, f.name), getattr(b, f.name)), f.name
    again = EvalGrid(azimuth_deg=[-30.0, 0.0, 45.0], distance_m=[5.0, 12.0], lighting=["low_sun", "noon"],
                     background_count=4, seed=7).params()
    assert torch.equal(again.noise_seed, a.noise_seed) and torch.equal(again.bg_x, a.bg_x)
    other = EvalGrid(azimuth_deg=[-30.0, 0.0, 45.0], distance_m=[5.0, 12.0], lighting=["low_sun", "noon"],
                     background_count=4, seed=8).params()
    assert not torch.equal(other.noise_seed, a.noise_seed)
    torch.testing.assert_close(other.azimuth_deg, a.azimuth_deg)     # the grid's values do not move


def test_unknown_lighting_preset_raises_input_error():
    with pytest.raises(InputError, match="dusk") as info:
        EvalGrid(lighting=["noon", "dusk"])
    for name in LIGHTING_PRESETS:
        assert name in str(info.value)


def test_grid_azimuths_are_not_what_a_sampler_draws():
    grid = EvalGrid()
    drawn = ViewSampler().sample(2048, torch.Generator().manual_seed(1000)).azimuth_deg
    grid_az = torch.tensor(grid.azimuth_deg)
    assert not torch.isin(drawn, grid_az).any()
    # The grid spans the sampler's azimuth range symmetrically.
    assert grid_az.min() == -grid_az.max() and float(grid_az.abs().max()) <= 60.0
