"""Weather over a drive: fog that takes contrast with distance, and rain.

**Fog** follows Koschmieder's law: a surface ``d`` metres away reaches the camera as ``I·t + A·(1 − t)`` with
transmission ``t = exp(−β·d)`` and ``β = 3.912 / V`` for a meteorological visibility ``V`` (the distance at
which a black object's contrast falls to 2 %); ``A`` is the airlight, the colour of the fog under the drive's
light (the horizon's haze). The sign is fogged by its distance, the street by each pixel's depth (the ground
plane's row by row, every other surface by its own), a background image as if 200 m away. kornia has no fog
(NOTES.md); this is the analytic model it points to.

**Rain** adds streaks (kornia's ``RandomRain``, drawn from the frame's noise seed, as many per pixel in a
region as in the full frame) over a light fog (``visibility_m`` 1000 m: rain takes contrast too). Wet roads and
a wiper are not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

BACKDROP_DEPTH_M = 200.0       # a background image's depth for fog
FULL_FRAME_PX = 1920 * 1080    # rain density: drops per this many pixels


@dataclass(frozen=True)
class Weather:
    """A weather preset: fog of ``visibility_m`` (None: clear air) and ``drops`` rain streaks per full frame."""

    name: str
    visibility_m: float | None = None
    drops: int = 0

    @property
    def beta(self) -> float:
        return 0.0 if self.visibility_m is None else 3.912 / self.visibility_m


WEATHER: dict[str, Weather] = {w.name: w for w in (
    Weather("clear"),
    Weather("fog", visibility_m=150.0),
    Weather("haze", visibility_m=400.0),
    Weather("rain", visibility_m=1000.0, drops=1500),
)}


def airlight(ambient: float, diffuse: float, color) -> np.ndarray:
    """The fog's colour under a light (ambient and diffuse intensities, RGB colour): the street's horizon haze."""
    lit = float(np.clip(ambient + 0.5 * diffuse, 0.02, 1.3))
    return np.array([0.78, 0.80, 0.82], np.float32) * lit * np.asarray(color, np.float32)


def transmission(depth_m, weather: Weather):
    """``exp(−β·depth)`` (1 in clear air) of a depth in metres (a number, an array or a tensor)."""
    if isinstance(depth_m, Tensor):
        return torch.exp(-weather.beta * depth_m)
    return np.exp(-weather.beta * np.asarray(depth_m, dtype=np.float32))


def fog_layer(images: Tensor, alpha: Tensor, depth_m: float, weather: Weather, air: Tensor) -> Tensor:
    """A premultiplied layer (images B×3×h×w, its cover ``alpha`` B×1×h×w) seen through fog at ``depth_m``."""
    t = math.exp(-weather.beta * depth_m)
    return images * t + air.view(1, 3, 1, 1) * alpha * (1 - t)


def fogged(layer: Tensor, alpha: Tensor, depth_m: float, weather: Weather, params) -> Tensor:
    """A premultiplied layer seen through ``weather``'s fog at ``depth_m``, in the airlight of the light of
    ``params`` (``SceneParams``, its first view's)."""
    air = airlight(float(params.ambient[0]), float(params.diffuse[0]), params.lights().color[0].cpu().numpy())
    return fog_layer(layer, alpha, depth_m, weather, torch.tensor(air, device=layer.device))


def add_rain(images: Tensor, weather: Weather, seeds: Tensor) -> Tensor:
    """``images`` (B×3×h×w) with rain streaks, each image's from its seed; as many streaks per pixel as
    ``weather.drops`` over a full 1920×1080 frame."""
    if weather.drops <= 0:
        return images
    from kornia.augmentation import RandomRain

    b, _, h, w = images.shape
    n = max(1, round(weather.drops * h * w / FULL_FRAME_PX))
    tall = max(2, min(h - 1, 18))
    out = []
    for i in range(b):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(seeds[i]))
            rain = RandomRain(number_of_drops=(n, n + 1), drop_height=(max(1, tall // 2), tall),
                              drop_width=(-1, 1) if w > 2 else (0, 1), p=1.0)
            out.append(rain(images[i:i + 1].clamp(0, 1)))
    return torch.cat(out).to(images.dtype)


__all__ = ["BACKDROP_DEPTH_M", "WEATHER", "Weather", "add_rain", "airlight", "fog_layer", "fogged", "transmission"]
