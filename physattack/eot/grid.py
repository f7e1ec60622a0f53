"""The fixed evaluation grid: azimuth × distance × lighting presets, on held-out backgrounds.

The grid never reuses the optimizer's draws: its values are fixed, its backgrounds come from a bank
made with a different seed, and its lighting presets are named conditions rather than random draws.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from physattack.errors import InputError
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


@dataclass
class EvalGrid:
    """Held-out views. Elevation follows from a camera at ``camera_height_m`` looking up at an
    object mounted at ``mount_height_m``; each view gets a held-out background."""

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

    def __post_init__(self) -> None:
        unknown = [name for name in self.lighting if name not in LIGHTING_PRESETS]
        if unknown:
            raise InputError(f"Unknown lighting preset(s) {unknown}; choose from {sorted(LIGHTING_PRESETS)}.")

    def conditions(self) -> list[dict]:
        """One dict per view: its azimuth, distance and lighting preset name, in grid order."""
        return [{"azimuth_deg": a, "distance_m": d, "lighting": li}
                for li in self.lighting for d in self.distance_m for a in self.azimuth_deg]

    def params(self) -> SceneParams:
        conds = self.conditions()
        n = len(conds)
        g = torch.Generator().manual_seed(self.seed)
        t = lambda values: torch.tensor(values, dtype=torch.float32)  # noqa: E731
        full = lambda v: torch.full((n,), float(v))  # noqa: E731
        dist = t([c["distance_m"] for c in conds])
        elev = torch.rad2deg(torch.atan((self.camera_height_m - self.mount_height_m) / dist))
        light = {k: t([LIGHTING_PRESETS[c["lighting"]][k] for c in conds]) for k in LIGHTING_PRESETS["noon"]}
        frame = full(self.frame)
        return SceneParams(
            distance_m=dist, azimuth_deg=t([c["azimuth_deg"] for c in conds]), elevation_deg=elev,
            roll_deg=full(0), frame=frame, shift_x=full(0), shift_y=full(0), **light,
            sensor_px=sensor_pixels(self.object_width_m, dist, frame, self.sensor_focal_px),
            blur_sigma_px=full(self.blur_sigma_px), motion_px=full(1), motion_angle_deg=full(0),
            exposure=full(1), contrast=full(1), noise_std=full(self.noise_std), jpeg_quality=full(100),
            noise_seed=torch.randint(0, 2**31 - 1, (n,), generator=g),
            background_index=torch.arange(n) % max(1, self.background_count),
            bg_x=torch.rand(n, generator=g), bg_y=torch.rand(n, generator=g),
            bg_scale=0.5 + 0.5 * torch.rand(n, generator=g),
        )

    def __len__(self) -> int:
        return len(self.azimuth_deg) * len(self.distance_m) * len(self.lighting)

