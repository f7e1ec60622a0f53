"""Weather over a drive: fog that takes contrast with distance, and rain.

**Fog** follows Koschmieder's law: a surface ``d`` metres away reaches the camera as ``I·t + A·(1 − t)`` with
transmission ``t = exp(−β·d)`` and ``β = 3.912 / V`` for a meteorological visibility ``V`` (the distance at
which a black object's contrast falls to 2 %); ``A`` is the airlight, the colour of the fog under the drive's
light (the horizon's haze). The sign is fogged by its distance, the street by each pixel's depth (the ground
plane's row by row, every other surface by its own), a background image as if 200 m away. kornia has no fog
(NOTES.md); this is the analytic model it points to.

**Rain** adds streaks (kornia's ``RandomRain``, drawn from the frame's noise seed, as many per pixel in a
region as in the full frame) over a light fog (``visibility_m`` 1000 m: rain takes contrast too), on a wet street.

**A wet street** (``wetness`` > 0: ``rain``, and ``wet``, the street after the rain) has a film of water on its road,
markings, kerbs and sidewalks. Wet, a rough surface is darker (``WET_DARKENING`` of its dry albedo: light trapped
in the film is absorbed more; Lekner and Dorf, "Why some things are darker when wet", Applied Optics 27(7), 1988),
and the film mirrors what stands above it: the street, the sky and the sign, upside down below them (``street.py``
renders the street mirrored about the ground; ``render.py`` flips the sign's own window about its foot, which is
exact for a level camera on a level road). The mirror is weighted by water's Fresnel reflectance at each road
pixel's angle (Schlick's approximation, n = 1.33: 2 % looking straight down, over half at a dashcam's grazing
angles) times ``wetness`` (how much of the road is smooth film rather than rough, wet asphalt), and streaked along
the view (a rough film blurs a reflection far more along the road than across it: ``STREAK_RAD``). The reflected
light travels the object's whole mirrored distance through fog, so the mirror is fogged by that depth. A wiper is
not modelled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from physattack.eot.fog import BACKDROP_DEPTH_M, airlight as fog_airlight

FULL_FRAME_PX = 1920 * 1080    # rain density: drops per this many pixels
WET_DARKENING = 0.55           # a wet road's albedo over its dry one (Lekner and Dorf 1988: about half for asphalt)
WATER_R0 = ((1.33 - 1) / (1.33 + 1)) ** 2      # water's reflectance at normal incidence (Schlick's R0), 0.020
STREAK_RAD = (0.012, 0.002)    # a wet road's blur of its reflection, along the view and across it (std, radians)


@dataclass(frozen=True)
class Weather:
    """A weather preset: fog of ``visibility_m`` (None: clear air), ``drops`` rain streaks per full frame and a wet
    street's ``wetness`` (0: dry; the share of the road's Fresnel reflection a film of water gives it)."""

    name: str
    visibility_m: float | None = None
    drops: int = 0
    wetness: float = 0.0

    @property
    def wet(self) -> bool:
        """Whether the street is wet (its paved surfaces darker, and mirrors)."""
        return self.wetness > 0

    @property
    def beta(self) -> float:
        return 0.0 if self.visibility_m is None else 3.912 / self.visibility_m


WEATHER: dict[str, Weather] = {w.name: w for w in (
    Weather("clear"),
    Weather("fog", visibility_m=150.0),
    Weather("haze", visibility_m=400.0),
    Weather("rain", visibility_m=1000.0, drops=1500, wetness=0.6),
    Weather("wet", wetness=0.6),
)}


def airlight(ambient: float, diffuse: float, color) -> np.ndarray:
    """The fog's colour under a light (ambient and diffuse intensities, RGB colour): the street's horizon haze,
    ``physattack.eot.fog.airlight`` for one light."""
    light = torch.tensor([float(ambient), float(diffuse)], dtype=torch.float64)
    rgb = torch.as_tensor(np.asarray(color, np.float64)).view(1, 3)
    return fog_airlight(light[:1], light[1:], rgb)[0].numpy().astype(np.float32)


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


def streak_px(focal_px: float) -> tuple[float, float, int, int]:
    """A wet road's reflection blur on a camera of ``focal_px``: its std along the view and across it in pixels, and
    how far (rows, columns) the blur reads."""
    sy, sx = STREAK_RAD[0] * focal_px, STREAK_RAD[1] * focal_px
    return sy, sx, math.ceil(3 * sy) + 1, math.ceil(3 * sx) + 1


def water_reflectance(cos_incidence):
    """Water's Fresnel reflectance (Schlick's approximation, unpolarised) at an angle of incidence given by its
    cosine (a number, an array or a tensor): ``WATER_R0`` looking straight down, 1 at grazing incidence."""
    return WATER_R0 + (1 - WATER_R0) * (1 - cos_incidence) ** 5


def road_gloss(rows, horizon: float, focal_px: float, weather: Weather):
    """The mirror's weight on a wet level road at image ``rows`` (pixel centres; an array) of a level camera whose
    horizon is at row ``horizon``: ``wetness`` times water's reflectance at the angle the ray through the row meets
    the road (its angle below the horizon; 0 above the horizon, where the ray never meets it)."""
    below = np.maximum(np.asarray(rows, dtype=np.float64) - horizon, 0.0)
    cos_i = below / np.hypot(below, focal_px)                 # the ray's angle below the horizon, from the normal
    return np.where(below > 0, weather.wetness * water_reflectance(cos_i), 0.0).astype(np.float32)


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


__all__ = ["STREAK_RAD", "WATER_R0", "WEATHER", "WET_DARKENING", "Weather", "add_rain", "airlight",
           "fog_layer", "fogged", "road_gloss", "streak_px", "transmission", "water_reflectance"]
