"""ViewSampler (physattack/eot/sampler.py) and the SceneParams it returns (params.py)."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
import torch

from physattack.eot import SceneParams, ViewSampler, color_temperature_rgb
from physattack.eot.sampler import sensor_pixels
from physattack.errors import InputError

N = 4000

UNIFORM_FIELDS = {
    "azimuth_deg": "azimuth_deg", "elevation_deg": "elevation_deg", "roll_deg": "roll_deg",
    "frame": "frame", "shift_x": "shift", "shift_y": "shift", "ambient": "ambient", "diffuse": "diffuse",
    "light_azimuth_deg": "light_azimuth_deg", "light_elevation_deg": "light_elevation_deg",
    "color_temp_k": "color_temp_k", "blur_sigma_px": "blur_sigma_px", "exposure": "exposure",
    "contrast": "contrast", "noise_std": "noise_std", "bg_scale": "bg_scale",
}


def _sample(sampler: ViewSampler, n: int, seed: int) -> SceneParams:
    return sampler.sample(n, torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def sampler() -> ViewSampler:
    # Narrower ranges than the defaults, so the test sees the configured values, not the defaults.
    return ViewSampler(distance_m=(2.0, 32.0), azimuth_deg=(-30.0, 50.0), motion_px=(1, 7),
                       jpeg_quality=(55.0, 80.0), jpeg_share=0.4, background_count=5, bg_scale=(0.5, 0.6))


@pytest.fixture(scope="module")
def draw(sampler) -> SceneParams:
    return _sample(sampler, N, seed=3)


def _assert_equal(a: SceneParams, b: SceneParams) -> None:
    for f in fields(SceneParams):
        assert torch.equal(getattr(a, f.name), getattr(b, f.name)), f.name


def test_same_seed_gives_identical_params(sampler):
    _assert_equal(_sample(sampler, 64, seed=11), _sample(sampler, 64, seed=11))


def test_different_seeds_give_different_params(sampler):
    a, b = _sample(sampler, 64, seed=11), _sample(sampler, 64, seed=12)
    for f in fields(SceneParams):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name in ("fog_beta", "headlights"):        # a view sampler draws neither: clear air, daylight
            assert not bool(x.any()) and not bool(y.any()), f.name
        elif f.name in ("motion_px", "background_index", "jpeg_quality"):
            assert not torch.equal(x, y), f.name        # discrete or mostly-constant: some differ
        else:
            assert bool((x != y).all()), f.name


def test_sampling_keeps_no_state_and_advances_the_generator(sampler):
    g = torch.Generator().manual_seed(5)
    first, second = sampler.sample(8, g), sampler.sample(8, g)
    assert not torch.equal(first.azimuth_deg, second.azimuth_deg)
    _assert_equal(first, _sample(sampler, 8, seed=5))       # a fresh generator replays the first draw


def test_every_field_has_batch_shape_and_no_grad(draw):
    for f in fields(SceneParams):
        t = getattr(draw, f.name)
        assert t.shape == (N,), f.name
        assert not t.requires_grad, f.name
    assert len(draw) == N


@pytest.mark.parametrize("name", sorted(UNIFORM_FIELDS))
def test_uniform_fields_cover_their_configured_range(sampler, draw, name):
    lo, hi = getattr(sampler, UNIFORM_FIELDS[name])
    x = getattr(draw, name)
    assert float(x.min()) >= lo and float(x.max()) <= hi
    # Uniform over the whole range: both ends are reached and the mean is central.
    span = hi - lo
    assert float(x.min()) < lo + 0.01 * span and float(x.max()) > hi - 0.01 * span
    assert float(x.mean()) == pytest.approx((lo + hi) / 2, abs=0.03 * span)


def test_distance_is_log_uniform_in_range(sampler, draw):
    lo, hi = sampler.distance_m
    d = draw.distance_m
    assert float(d.min()) >= lo and float(d.max()) <= hi
    # Log-uniform: log-distance is uniform, so the median is the geometric mean (8 m), not 17 m.
    assert float(d.median()) == pytest.approx(math.sqrt(lo * hi), rel=0.08)
    logs = torch.log(d)
    assert float(logs.mean()) == pytest.approx((math.log(lo) + math.log(hi)) / 2, abs=0.05)
    # Each factor-of-two band (2-4, 4-8, 8-16, 16-32 m) holds about a quarter of the views.
    counts = torch.histc(torch.log2(d), bins=4, min=1.0, max=5.0)
    assert torch.all((counts / N - 0.25).abs() < 0.03)


def test_motion_lengths_come_from_the_allowed_set(sampler, draw):
    values = set(draw.motion_px.unique().tolist())
    assert values == {1.0, 7.0}
    assert float((draw.motion_px == 7).float().mean()) == pytest.approx(0.5, abs=0.05)


def test_jpeg_quality_is_100_except_on_the_jpeg_share(sampler, draw):
    q = draw.jpeg_quality
    on = q < 100
    assert float(on.float().mean()) == pytest.approx(sampler.jpeg_share, abs=0.03)
    assert torch.all(q[~on] == 100.0)
    assert float(q[on].min()) >= 55.0 and float(q[on].max()) <= 80.0


def test_background_and_crop_fields(draw):
    assert draw.background_index.dtype == torch.long
    assert int(draw.background_index.min()) == 0 and int(draw.background_index.max()) == 4
    for name in ("bg_x", "bg_y"):
        x = getattr(draw, name)
        assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
    assert float(draw.motion_angle_deg.min()) >= 0.0 and float(draw.motion_angle_deg.max()) <= 180.0
    assert draw.noise_seed.dtype == torch.long and len(draw.noise_seed.unique()) > N * 0.99


def test_sensor_pixels_follow_distance_and_frame(sampler, draw):
    expected = sampler.sensor_focal_px * (sampler.object_width_m / draw.frame) / draw.distance_m
    torch.testing.assert_close(draw.sensor_px, expected)
    # A 0.75 m sign 14 m from a 1400-px-focal camera spans 75 px; framed at 0.5 the crop is 150 px.
    assert float(sensor_pixels(0.75, torch.tensor([14.0]), torch.tensor([0.5]), 1400.0)) == pytest.approx(150.0)


def test_default_sampler_stays_in_its_ranges():
    s = ViewSampler()
    p = _sample(s, 512, seed=0)
    assert float(p.distance_m.min()) >= 3.0 and float(p.distance_m.max()) <= 25.0
    assert set(p.motion_px.unique().tolist()) <= {1.0, 3.0, 5.0}
    assert int(p.background_index.max()) < s.background_count


def test_params_slice_cat_and_to():
    p = _sample(ViewSampler(), 10, seed=1)
    one = p[3]
    assert len(one) == 1 and float(one.azimuth_deg[0]) == float(p.azimuth_deg[3])
    mask = p.azimuth_deg > 0
    assert len(p[mask]) == int(mask.sum())
    _assert_equal(SceneParams.cat([p[:4], p[4:]]), p)
    _assert_equal(p.to("cpu"), p)
    d = p.as_dict()
    assert set(d) == {f.name for f in fields(SceneParams)} and len(d["distance_m"]) == 10


def test_params_build_cameras_that_frame_the_object():
    p = _sample(ViewSampler(roll_deg=(0.0, 0.0), shift=(0.0, 0.0)), 6, seed=2)
    cams = p.cameras(0.75, (64, 80))
    assert len(cams) == 6 and cams.image_size == (64, 80)
    torch.testing.assert_close(cams.centers.norm(dim=-1), p.distance_m, rtol=1e-5, atol=1e-5)
    uv, _ = cams.project(torch.zeros(1, 3))
    torch.testing.assert_close(uv[:, 0], torch.tensor([[40.0, 32.0]]).expand(6, 2), atol=1e-3, rtol=0)


def test_lights_point_where_the_params_say():
    p = _sample(ViewSampler(), 5, seed=4)
    lights = p.lights()
    torch.testing.assert_close(lights.direction.norm(dim=-1), torch.ones(5))
    el = torch.rad2deg(torch.asin(lights.direction[:, 1]))
    torch.testing.assert_close(el, p.light_elevation_deg, atol=1e-3, rtol=0)
    torch.testing.assert_close(lights.ambient, p.ambient)


def test_color_temperature_is_warm_to_cool_with_unit_luminance():
    rgb = color_temperature_rgb(torch.tensor([3000.0, 6500.0, 12000.0]))
    lum = rgb @ torch.tensor([0.2126, 0.7152, 0.0722])
    torch.testing.assert_close(lum, torch.ones(3))
    ratio = rgb[:, 2] / rgb[:, 0]                    # blue over red grows with temperature
    assert float(ratio[0]) < 1.0 < float(ratio[2]) and float(ratio[0]) < float(ratio[1]) < float(ratio[2])


def test_daylight_ties_colour_temperature_to_the_light_elevation():
    """With ``daylight`` every view's colour temperature follows its light's elevation (a low sun warm, a high one
    white) within the configured range; without it the two are independent and a seed draws what it always drew."""
    plain, tied = ViewSampler(), ViewSampler(daylight=1.0)
    a, b = _sample(plain, N, seed=5), _sample(tied, N, seed=5)
    assert torch.equal(a.light_elevation_deg, b.light_elevation_deg)       # only the colour temperature changes
    assert torch.equal(a.color_temp_k, _sample(ViewSampler(daylight=0.0), N, seed=5).color_temp_k)
    low, high = b.light_elevation_deg < 15, b.light_elevation_deg > 45
    assert float(b.color_temp_k[low].max()) < 4900 < float(b.color_temp_k[high].min())
    assert float(b.color_temp_k.min()) >= 3500 and float(b.color_temp_k.max()) <= 9000
    warm = lambda p: ((p.light_elevation_deg < 20) & (p.color_temp_k < 4300)).float().mean()  # noqa: E731
    assert float(warm(b)) > 3 * float(warm(a))        # the low, warm light independent draws seldom give
    half = _sample(ViewSampler(daylight=0.5), N, seed=5)
    assert 0.3 < float((half.color_temp_k != a.color_temp_k).float().mean()) < 0.7


def test_daylight_share_out_of_range_names_the_key():
    with pytest.raises(InputError, match="eot.sampler.daylight"):
        ViewSampler(daylight=1.5)


@pytest.mark.parametrize("part", ["view", "views"])
def test_a_nested_view_samplers_errors_name_the_key_written(part):
    from physattack.drive.approach import ApproachSampler

    with pytest.raises(InputError, match=rf"^eot\.sampler\.{part}\.daylight "):
        ApproachSampler(**{part: {"daylight": 1.5}})
