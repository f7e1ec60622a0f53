"""Camera effects (physattack/eot/effects.py): identity at the "no change" values, each effect does
what it says, noise replays, and gradients reach the input through every effect."""

from __future__ import annotations

from dataclasses import fields, replace

import pytest
import torch
import torch.nn.functional as F

from physattack.eot import SceneParams, apply_camera_effects

H = W = 32


def _params(b: int, **overrides) -> SceneParams:
    """B views at the "no change" value of every camera effect; ``overrides`` are per-field lists."""
    base = dict(distance_m=5.0, azimuth_deg=0.0, elevation_deg=0.0, roll_deg=0.0, frame=0.6, shift_x=0.0,
                shift_y=0.0, ambient=0.5, diffuse=0.5, light_azimuth_deg=0.0, light_elevation_deg=45.0,
                color_temp_k=6500.0, sensor_px=float(W), blur_sigma_px=0.0, motion_px=1.0,
                motion_angle_deg=0.0, exposure=1.0, contrast=1.0, noise_std=0.0, jpeg_quality=100.0,
                bg_x=0.5, bg_y=0.5, bg_scale=1.0, fog_beta=0.0, headlights=0.0)
    values = {}
    for f in fields(SceneParams):
        if f.name in ("noise_seed", "background_index"):
            v = overrides.get(f.name, [7 + i for i in range(b)] if f.name == "noise_seed" else [0] * b)
            values[f.name] = torch.as_tensor(v, dtype=torch.long)
        else:
            v = overrides.get(f.name, [base[f.name]] * b)
            values[f.name] = torch.as_tensor(v, dtype=torch.float32)
    return SceneParams(**values)


def _images(b: int = 2, seed: int = 0, lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return lo + (hi - lo) * torch.rand(b, 3, H, W, generator=g)


def _hf_energy(x: torch.Tensor) -> torch.Tensor:
    """Per-view energy of the discrete Laplacian: high spatial frequencies."""
    k = torch.tensor([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]).view(1, 1, 3, 3).repeat(3, 1, 1, 1)
    return F.conv2d(x, k, groups=3)[..., 2:-2, 2:-2].pow(2).flatten(1).mean(1)


def test_no_change_values_are_the_identity():
    x = _images(3)
    # sensor_px at or above the width, in several forms.
    p = _params(3, sensor_px=[W, 2 * W, 0.97 * W])
    torch.testing.assert_close(apply_camera_effects(x, p), x, atol=1e-6, rtol=0)


def test_identity_view_is_untouched_beside_a_heavily_processed_one():
    x = _images(2, lo=0.2, hi=0.8)
    p = _params(2, sensor_px=[W, 12.0], blur_sigma_px=[0.0, 1.5], motion_px=[1.0, 5.0],
                motion_angle_deg=[0.0, 30.0], exposure=[1.0, 1.2], contrast=[1.0, 0.8],
                noise_std=[0.0, 0.05], jpeg_quality=[100.0, 40.0])
    out = apply_camera_effects(x, p)
    torch.testing.assert_close(out[0], x[0], atol=1e-6, rtol=0)
    assert float((out[1] - x[1]).abs().mean()) > 0.05
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


@pytest.mark.parametrize("field,values", [
    ("blur_sigma_px", [0.7, 1.5]),
    ("sensor_px", [20.0, 10.0]),
    ("motion_px", [3.0, 7.0]),
])
def test_blurs_remove_high_frequencies_more_as_they_grow(field, values):
    x = _images(1).expand(3, -1, -1, -1).contiguous()
    identity = {"blur_sigma_px": 0.0, "sensor_px": float(W), "motion_px": 1.0}[field]
    out = apply_camera_effects(x, _params(3, **{field: [identity] + values}))
    e = _hf_energy(out)
    assert float(e[1]) < 0.6 * float(e[0])
    assert float(e[2]) < 0.8 * float(e[1])
    # Blurs keep the mean brightness.
    torch.testing.assert_close(out.mean((1, 2, 3)), x.mean((1, 2, 3)), atol=0.01, rtol=0)


def test_motion_blur_smears_along_its_angle():
    ramp = (torch.arange(W) % 2).float()
    stripes_x = ramp.view(1, 1, 1, W).expand(1, 3, H, W)          # varies along x
    stripes_y = ramp.view(1, 1, H, 1).expand(1, 3, H, W)          # varies along y
    x = torch.cat([stripes_x, stripes_y, stripes_x, stripes_y])
    p = _params(4, motion_px=[5.0] * 4, motion_angle_deg=[0.0, 0.0, 90.0, 90.0])
    out = apply_camera_effects(x, p)
    change = (out - x).abs().flatten(1).mean(1)
    # Each angle flattens one stripe pattern and leaves the perpendicular one (almost) alone.
    assert (float(change[0]) > 0.3) != (float(change[1]) > 0.3)
    assert (float(change[2]) > 0.3) != (float(change[3]) > 0.3)
    assert (float(change[0]) > 0.3) != (float(change[2]) > 0.3)
    assert float(change.min()) < 0.05


def test_sensor_resampling_is_the_low_resolution_image():
    x = _images(1)
    out = apply_camera_effects(x, _params(1, sensor_px=[8.0]))
    small = F.interpolate(x, size=(8, 8), mode="area")
    # Downsampling the result again gives back the low-resolution view (up to bilinear blending).
    again = F.interpolate(out, size=(8, 8), mode="area")
    assert float((again - small).abs().mean()) < 0.1 * float((x - x.mean()).abs().mean())


def test_exposure_scales_and_clips():
    x = torch.full((2, 3, H, W), 0.5)
    out = apply_camera_effects(x, _params(2, exposure=[1.2, 3.0]))
    torch.testing.assert_close(out[0], torch.full((3, H, W), 0.6))
    torch.testing.assert_close(out[1], torch.ones(3, H, W))


def test_contrast_scales_deviations_about_the_mean():
    x = _images(1, lo=0.3, hi=0.7)
    out = apply_camera_effects(x, _params(1, contrast=[0.5]))
    torch.testing.assert_close(out.mean(), x.mean(), atol=1e-3, rtol=0)
    assert float(out.std()) == pytest.approx(0.5 * float(x.std()), rel=0.05)


def test_noise_replays_exactly_for_the_same_seed():
    x = torch.full((3, 3, H, W), 0.5)
    p = _params(3, noise_std=[0.05] * 3, noise_seed=[123, 123, 456])
    a, b = apply_camera_effects(x, p), apply_camera_effects(x, p)
    assert torch.equal(a, b)
    assert torch.equal(a[0], a[1])                    # same seed, same noise, whatever the batch slot
    assert not torch.equal(a[0], a[2])
    # The same view alone replays its noise too.
    assert torch.equal(apply_camera_effects(x[2:], p[2:]), a[2:])
    assert float((a[0] - 0.5).std()) == pytest.approx(0.05, rel=0.1)
    assert float((a[0] - 0.5).mean()) == pytest.approx(0.0, abs=0.01)


def test_jpeg_compresses_only_below_quality_100():
    x = _images(3, seed=1)
    out = apply_camera_effects(x, _params(3, jpeg_quality=[100.0, 80.0, 20.0]))
    err = (out - x).abs().flatten(1).mean(1)
    assert float(err[0]) < 1e-6
    assert 0 < float(err[1]) < float(err[2])


@pytest.mark.parametrize("field,value", [
    ("sensor_px", 12.0), ("blur_sigma_px", 1.0), ("motion_px", 5.0), ("exposure", 1.1),
    ("contrast", 0.8), ("noise_std", 0.03), ("jpeg_quality", 50.0),
])
def test_gradient_flows_through_each_effect(field, value):
    x = _images(2, lo=0.25, hi=0.75).requires_grad_(True)
    p = _params(2, **{field: [value, value]})
    out = apply_camera_effects(x, p)
    assert float((out - x).detach().abs().max()) > 1e-3   # the effect did something
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1))
    (out * w).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert float((x.grad != 0).float().mean()) > 0.5


def test_gradient_flows_through_all_effects_at_once():
    x = _images(2, lo=0.25, hi=0.75).requires_grad_(True)
    p = _params(2, sensor_px=[14.0, 20.0], blur_sigma_px=[0.8, 0.5], motion_px=[3.0, 5.0],
                motion_angle_deg=[20.0, 120.0], exposure=[1.1, 0.9], contrast=[0.9, 1.1],
                noise_std=[0.02, 0.01], jpeg_quality=[60.0, 45.0])
    out = apply_camera_effects(x, p)
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert float(x.grad.abs().flatten(1).sum(1).min()) > 0
    # Identity params: the gradient of the sum is one everywhere.
    y = _images(1, lo=0.25, hi=0.75).requires_grad_(True)
    apply_camera_effects(y, _params(1)).sum().backward()
    torch.testing.assert_close(y.grad, torch.ones_like(y), atol=1e-5, rtol=0)


def test_params_of_a_sampler_apply_without_error():
    from physattack.eot import ViewSampler
    p = ViewSampler(jpeg_share=0.5).sample(6, torch.Generator().manual_seed(0))
    p = replace(p, sensor_px=p.sensor_px.clamp(max=2 * W))
    out = apply_camera_effects(_images(6), p)
    assert out.shape == (6, 3, H, W) and torch.isfinite(out).all()
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0
