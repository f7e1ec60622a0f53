"""Distributions of viewing conditions: ``ViewSampler.sample(n, generator) -> SceneParams``.

Sampling is apart from applying: a sampler draws plain tensors under ``no_grad`` and keeps nothing;
``ViewPipeline`` applies a draw (render, composite, camera effects) as a pure, differentiable
function, so any draw, or a fixed evaluation grid, can be replayed exactly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from physattack.eot.params import SceneParams
from physattack.errors import InputError, check_interval, check_range, check_values

Range = tuple[float, float]


def _uniform(n: int, bounds: Range, g: torch.Generator) -> Tensor:
    lo, hi = bounds
    return lo + (hi - lo) * torch.rand(n, generator=g)


def _log_uniform(n: int, bounds: Range, g: torch.Generator) -> Tensor:
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    return torch.exp(lo + (hi - lo) * torch.rand(n, generator=g))


#: daylight's colour temperature (K) with the sun at the two elevations (degrees) between which it climbs: the beam of a
#: low sun crosses more air, which scatters its blue away; ``ViewSampler.daylight`` draws around this line,
#: ``DAYLIGHT_SPREAD_K`` either side (the grid's presets lie within it: low sun 3800 K at 12 degrees, noon 5800 K at 70)
DAYLIGHT_K = ((5.0, 3500.0), (40.0, 6000.0))
DAYLIGHT_SPREAD_K = 700.0


def daylight_temperature(elevation_deg: Tensor, generator: torch.Generator) -> Tensor:
    """A colour temperature (K) for each light elevation: ``DAYLIGHT_K``'s line at it (flat beyond its two ends),
    plus a uniform draw of ``DAYLIGHT_SPREAD_K`` either side."""
    (e0, k0), (e1, k1) = DAYLIGHT_K
    centre = k0 + (k1 - k0) * ((elevation_deg - e0) / (e1 - e0)).clamp(0.0, 1.0)
    return centre + _uniform(len(elevation_deg), (-DAYLIGHT_SPREAD_K, DAYLIGHT_SPREAD_K), generator)


def sensor_pixels(object_width_m: float, distance_m: Tensor, frame: Tensor, sensor_focal_px: float) -> Tensor:
    """How many pixels of a real camera with focal length ``sensor_focal_px`` the crop spans."""
    return sensor_focal_px * (object_width_m / frame) / distance_m


def check_motion_lengths(name: str, lengths) -> list[int]:
    """Motion-blur kernel lengths: 1 (no blur) or odd lengths of 3 and more, as kornia needs."""
    why = "motion-blur kernel lengths in pixels, 1 = none"
    lengths = check_values(name, lengths, 1, integer=True, why=why)
    if any(n > 1 and n % 2 == 0 for n in lengths):
        raise InputError(f"{name} must be a non-empty list of odd integers >= 1 ({why}); got {lengths}.")
    return lengths


@dataclass
class ViewSampler:
    """Uniform ranges (log-uniform for distance) of every SceneParams field.

    ``sensor_focal_px`` describes the real camera the crops come from (1400 px: a 1920-px-wide
    dashcam with a 69° field of view); with ``object_width_m`` it sets each crop's native resolution.
    ``jpeg_share`` of the views are JPEG-compressed (it is the costliest effect). ``daylight`` of the views take
    their colour temperature from their light's elevation as daylight does (``daylight_temperature``: a low sun is
    warm, a high one white; kept within ``color_temp_k``) instead of independently of it: independent draws seldom
    give a low, warm, raking light together (about 3 % of views under 4300 K with the light below 20 degrees).
    """

    object_width_m: float = 0.75
    distance_m: Range = (3.0, 25.0)
    azimuth_deg: Range = (-60.0, 60.0)
    elevation_deg: Range = (-15.0, 20.0)
    roll_deg: Range = (-8.0, 8.0)
    frame: Range = (0.45, 0.85)
    shift: Range = (-0.08, 0.08)
    ambient: Range = (0.25, 0.7)
    diffuse: Range = (0.2, 0.9)
    light_azimuth_deg: Range = (-90.0, 90.0)
    light_elevation_deg: Range = (5.0, 80.0)
    color_temp_k: Range = (3500.0, 9000.0)
    daylight: float = 0.0
    sensor_focal_px: float = 1400.0
    blur_sigma_px: Range = (0.0, 1.2)
    motion_px: tuple[int, ...] = (1, 1, 3, 5)
    exposure: Range = (0.7, 1.3)
    contrast: Range = (0.75, 1.25)
    noise_std: Range = (0.0, 0.04)
    jpeg_quality: Range = (40.0, 95.0)
    jpeg_share: float = 0.25
    background_count: int = 48
    bg_scale: Range = (0.35, 1.0)

    @classmethod
    def under(cls, key: str, settings: dict) -> "ViewSampler":
        """A view sampler nested in another sampler's settings at ``key`` (e.g. ``eot.sampler.view.``): its
        errors name the key the user wrote."""
        try:
            return cls(**settings)
        except InputError as e:
            raise type(e)(str(e).replace("eot.sampler.", key, 1)) from None

    def __post_init__(self) -> None:
        key = "eot.sampler."
        positive = dict(lo=0.0, lo_open=True)
        check_range(key + "object_width_m", self.object_width_m, **positive, why="the width the crop frames, metres")
        check_interval(key + "distance_m", self.distance_m, **positive, why="camera distances in metres")
        check_interval(key + "azimuth_deg", self.azimuth_deg, -180.0, 180.0)
        check_interval(key + "elevation_deg", self.elevation_deg, -90.0, 90.0, lo_open=True, hi_open=True)
        check_interval(key + "roll_deg", self.roll_deg, -180.0, 180.0)
        check_interval(key + "frame", self.frame, 0.0, 1.0, lo_open=True,
                       why="the share of the crop's width the object fills")
        check_interval(key + "shift", self.shift, -0.5, 0.5, why="the object's offset from the crop centre, "
                                                                 "as a share of the crop")
        check_interval(key + "ambient", self.ambient, 0.0, why="light intensity")
        check_interval(key + "diffuse", self.diffuse, 0.0, why="light intensity")
        check_interval(key + "light_azimuth_deg", self.light_azimuth_deg, -180.0, 180.0)
        check_interval(key + "light_elevation_deg", self.light_elevation_deg, -90.0, 90.0)
        check_interval(key + "color_temp_k", self.color_temp_k, 3000.0, 15000.0,
                       why="kelvin; the black-body table spans 3000-15000 K")
        check_range(key + "daylight", self.daylight, 0.0, 1.0,
                    why="the share of views whose colour temperature follows their light's elevation")
        check_range(key + "sensor_focal_px", self.sensor_focal_px, **positive,
                    why="the real camera's focal length in pixels")
        check_interval(key + "blur_sigma_px", self.blur_sigma_px, 0.0, why="Gaussian blur sigma in pixels")
        check_motion_lengths(key + "motion_px", self.motion_px)
        check_interval(key + "exposure", self.exposure, **positive, why="exposure gain")
        check_interval(key + "contrast", self.contrast, 0.0, why="contrast factor")
        check_interval(key + "noise_std", self.noise_std, 0.0, why="sensor noise standard deviation")
        check_interval(key + "jpeg_quality", self.jpeg_quality, 1.0, 100.0)
        check_range(key + "jpeg_share", self.jpeg_share, 0.0, 1.0, why="the share of views JPEG-compressed")
        check_range(key + "background_count", self.background_count, 1, integer=True,
                    why="images in the background bank")
        check_interval(key + "bg_scale", self.bg_scale, 0.0, 1.0, lo_open=True,
                       why="the background crop's side as a share of the bank image")

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator) -> SceneParams:
        g = generator
        u = lambda bounds: _uniform(n, bounds, g)  # noqa: E731
        distance = _log_uniform(n, self.distance_m, g)
        frame = u(self.frame)
        motion = torch.tensor(self.motion_px)[torch.randint(len(self.motion_px), (n,), generator=g)]
        jpeg_on = torch.rand(n, generator=g) < self.jpeg_share
        params = SceneParams(
            distance_m=distance, azimuth_deg=u(self.azimuth_deg), elevation_deg=u(self.elevation_deg),
            roll_deg=u(self.roll_deg), frame=frame, shift_x=u(self.shift), shift_y=u(self.shift),
            ambient=u(self.ambient), diffuse=u(self.diffuse), light_azimuth_deg=u(self.light_azimuth_deg),
            light_elevation_deg=u(self.light_elevation_deg), color_temp_k=u(self.color_temp_k),
            sensor_px=sensor_pixels(self.object_width_m, distance, frame, self.sensor_focal_px),
            blur_sigma_px=u(self.blur_sigma_px), motion_px=motion.float(),
            motion_angle_deg=u((0.0, 180.0)), exposure=u(self.exposure), contrast=u(self.contrast),
            noise_std=u(self.noise_std),
            jpeg_quality=torch.where(jpeg_on, u(self.jpeg_quality), torch.full((n,), 100.0)),
            noise_seed=torch.randint(0, 2**31 - 1, (n,), generator=g),
            background_index=torch.randint(0, max(1, self.background_count), (n,), generator=g),
            bg_x=u((0.0, 1.0)), bg_y=u((0.0, 1.0)), bg_scale=u(self.bg_scale),
        )
        if self.daylight == 0:
            return params
        # drawn after the rest, so that without daylight a seed draws what it always drew
        tied = torch.rand(n, generator=g) < self.daylight
        warmth = daylight_temperature(params.light_elevation_deg, g).clamp(*self.color_temp_k)
        return replace(params, color_temp_k=torch.where(tied, warmth, params.color_temp_k))
