"""The fixed evaluation grid: azimuth × distance × lighting presets, on held-out backgrounds.

The grid never reuses the optimizer's draws: its values are fixed, its backgrounds come from a bank
made with a different seed, and its lighting presets are named conditions rather than random draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor

from physattack.errors import InputError, check_range, check_values
from physattack.eot.params import SceneParams
from physattack.eot.sampler import sensor_pixels

LIGHTING_PRESETS: dict[str, dict[str, float]] = {
    "noon": {"ambient": 0.45, "diffuse": 0.8, "light_azimuth_deg": 20.0, "light_elevation_deg": 70.0,
             "color_temp_k": 5800.0},
    "overcast": {"ambient": 0.75, "diffuse": 0.15, "light_azimuth_deg": 0.0, "light_elevation_deg": 60.0,
                 "color_temp_k": 7000.0},
    "low_sun": {"ambient": 0.3, "diffuse": 0.85, "light_azimuth_deg": -70.0, "light_elevation_deg": 12.0,
                "color_temp_k": 3800.0},
}

def preset_lights(count: int, generator: torch.Generator) -> dict[str, Tensor]:
    """Lighting fields of ``count`` views, each under one of the named presets drawn at random."""
    names = list(LIGHTING_PRESETS)
    pick = torch.randint(len(names), (count,), generator=generator).tolist()
    return {k: torch.tensor([LIGHTING_PRESETS[names[i]][k] for i in pick]) for k in LIGHTING_PRESETS["noon"]}


# Camera-effect presets of the held-out grid: SceneParams fields each preset sets. "default" keeps the
# grid's own ``blur_sigma_px`` and ``noise_std`` (and is the only preset of a grid that names none).
CAMERA_EFFECT_PRESETS: dict[str, dict[str, float]] = {
    "default": {},
    "sharp": {"blur_sigma_px": 0.0, "noise_std": 0.0},
    "defocus": {"blur_sigma_px": 1.2},
    "motion": {"motion_px": 5.0, "motion_angle_deg": 0.0},
    "jpeg": {"jpeg_quality": 45.0},
    "dim": {"exposure": 0.6, "noise_std": 0.035},
    "bright": {"exposure": 1.35, "contrast": 0.85},
}


def _check_presets(name: str, chosen, presets: dict) -> None:
    if isinstance(chosen, str) or not chosen:
        raise InputError(f"{name} must be a non-empty list of presets from {sorted(presets)}; got {chosen!r}.")
    unknown = [c for c in chosen if c not in presets]
    if unknown:
        raise InputError(f"{name} has unknown preset(s) {unknown}; choose from {sorted(presets)}.")


@dataclass
class EvalGrid:
    """Held-out views. Elevation follows from a camera at ``camera_height_m`` looking up at an
    object mounted at ``mount_height_m`` (or is an axis of its own, ``elevation_deg``); each view
    gets a held-out background.

    The grid is azimuth × distance × lighting presets × ``elevation_deg`` (None: the dashcam's) ×
    ``camera_effects`` presets (``CAMERA_EFFECT_PRESETS``) × ``backgrounds_per_view`` held-out
    backgrounds per condition. With the defaults of the last three it is the original
    azimuth × distance × lighting grid, view for view.
    """

    azimuth_deg: list[float] = field(default_factory=lambda: [-52.5, -37.5, -22.5, -7.5, 7.5, 22.5, 37.5, 52.5])
    distance_m: list[float] = field(default_factory=lambda: [4.0, 7.0, 11.0, 16.0, 22.0])
    lighting: list[str] = field(default_factory=lambda: ["noon", "overcast", "low_sun"])
    object_width_m: float = 0.75
    camera_height_m: float = 1.4
    mount_height_m: float = 2.1
    frame: float = 0.62
    sensor_focal_px: float = 1400.0
    blur_sigma_px: float = 0.4
    noise_std: float = 0.01
    background_count: int = 24
    seed: int = 1000
    elevation_deg: list[float] | None = None
    camera_effects: list[str] = field(default_factory=lambda: ["default"])
    backgrounds_per_view: int = 1

    def __post_init__(self) -> None:
        # The grid's own keys live under eot.grid (evaluation.grid copies them); the protocol's
        # extra axes are evaluation.grid's alone.
        key, protocol = "eot.grid.", "evaluation.grid."
        positive = dict(lo=0.0, lo_open=True)
        check_values(key + "azimuth_deg", self.azimuth_deg, -180.0, 180.0)
        check_values(key + "distance_m", self.distance_m, **positive, why="camera distances in metres")
        _check_presets(key + "lighting", self.lighting, LIGHTING_PRESETS)
        check_range(key + "object_width_m", self.object_width_m, **positive, why="the width the view frames, metres")
        check_range(key + "camera_height_m", self.camera_height_m, why="metres")
        check_range(key + "mount_height_m", self.mount_height_m, why="metres")
        check_range(key + "frame", self.frame, 0.0, 1.0, lo_open=True,
                    why="the share of the view's width the object fills")
        check_range(key + "sensor_focal_px", self.sensor_focal_px, **positive,
                    why="the camera's focal length in pixels")
        check_range(key + "blur_sigma_px", self.blur_sigma_px, 0.0, why="Gaussian blur sigma in pixels")
        check_range(key + "noise_std", self.noise_std, 0.0, why="sensor noise standard deviation")
        check_range(key + "background_count", self.background_count, 1, integer=True,
                    why="images in the held-out background bank")
        check_range(key + "seed", self.seed, integer=True)
        if self.elevation_deg is not None:
            check_values(protocol + "elevation_deg", self.elevation_deg, -90.0, 90.0, lo_open=True, hi_open=True,
                         why="or null for the dashcam's elevation per distance")
        _check_presets(protocol + "camera_effects", self.camera_effects, CAMERA_EFFECT_PRESETS)
        check_range(protocol + "backgrounds_per_view", self.backgrounds_per_view, 1, integer=True,
                    why="held-out backgrounds per condition")

    def _elevation(self, distance_m: float, elevation_deg: float | None) -> float:
        if elevation_deg is not None:
            return float(elevation_deg)
        return math.degrees(math.atan((self.camera_height_m - self.mount_height_m) / distance_m))

    def conditions(self) -> list[dict]:
        """One dict per view, in grid order: its azimuth, distance and lighting preset name, and its
        elevation, camera-effect preset and background repeat (0 … ``backgrounds_per_view`` − 1)."""
        elevations = self.elevation_deg if self.elevation_deg is not None else [None]
        return [{"azimuth_deg": a, "distance_m": d, "lighting": li,
                 "elevation_deg": round(self._elevation(d, el), 2), "effects": fx, "background": b}
                for fx in self.camera_effects for b in range(self.backgrounds_per_view) for el in elevations
                for li in self.lighting for d in self.distance_m for a in self.azimuth_deg]

    def params(self) -> SceneParams:
        conds = self.conditions()
        n = len(conds)
        g = torch.Generator().manual_seed(self.seed)
        t = lambda values: torch.tensor(values, dtype=torch.float32)  # noqa: E731
        full = lambda v: torch.full((n,), float(v))  # noqa: E731
        dist = t([c["distance_m"] for c in conds])
        elev = torch.rad2deg(torch.atan((self.camera_height_m - self.mount_height_m) / dist))
        if self.elevation_deg is not None:
            elev = t([c["elevation_deg"] for c in conds])
        fx = lambda key, default: t([CAMERA_EFFECT_PRESETS[c["effects"]].get(key, default) for c in conds])  # noqa: E731
        # one background per view; the repeats of a condition take consecutive bank images
        reps = self.backgrounds_per_view
        inner = n // (len(self.camera_effects) * reps)
        i = torch.arange(n)
        bg_order = ((i // (reps * inner)) * inner + i % inner) * reps + torch.tensor([c["background"] for c in conds])
        light = {k: t([LIGHTING_PRESETS[c["lighting"]][k] for c in conds]) for k in LIGHTING_PRESETS["noon"]}
        frame = full(self.frame)
        return SceneParams(
            distance_m=dist, azimuth_deg=t([c["azimuth_deg"] for c in conds]), elevation_deg=elev,
            roll_deg=full(0), frame=frame, shift_x=full(0), shift_y=full(0), **light,
            sensor_px=sensor_pixels(self.object_width_m, dist, frame, self.sensor_focal_px),
            blur_sigma_px=fx("blur_sigma_px", self.blur_sigma_px), motion_px=fx("motion_px", 1),
            motion_angle_deg=fx("motion_angle_deg", 0), exposure=fx("exposure", 1), contrast=fx("contrast", 1),
            noise_std=fx("noise_std", self.noise_std), jpeg_quality=fx("jpeg_quality", 100),
            noise_seed=torch.randint(0, 2**31 - 1, (n,), generator=g),
            background_index=bg_order % max(1, self.background_count),
            bg_x=torch.rand(n, generator=g), bg_y=torch.rand(n, generator=g),
            bg_scale=0.5 + 0.5 * torch.rand(n, generator=g),
        )

    def __len__(self) -> int:
        return (len(self.azimuth_deg) * len(self.distance_m) * len(self.lighting) * len(self.camera_effects)
                * self.backgrounds_per_view * (len(self.elevation_deg) if self.elevation_deg is not None else 1))

