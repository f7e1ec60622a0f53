"""Fog on training renders, so that the bundled victims learn to read a sign through it.

Koschmieder's law, as the drives' weather has it (``physattack.drive.weather``): what lies ``d`` metres
away is seen as ``I·t + A·(1 − t)`` with transmission ``t = exp(−β·d)``, ``A`` the airlight (the fog's
colour under the view's light). A training view is small and near (3–25 m) where a drive's sign is far
(30–80 m), so a draw fixes the **sign's own transmission** rather than a visibility: uniform in
``transmission`` for the share ``share`` of views (the rest clear), which sets ``β`` from the sign's
distance. What stands behind the sign — the background — is ``background`` times as far, so it fades
more. In a context frame every sign takes the transmission of its own distance under the frame's one
``β`` (the farthest sign draws it), so nearer signs show more contrast, as in a real fog.

At 150-m visibility (the drives' ``fog``) the sign's transmission is 0.26 at 51 m, the braking point at
70 km/h, and 0.12 at 80 m: ``transmission`` (0.1, 0.9) spans what a car in that fog must read.

The draws use their own generator, so turning fog on leaves every other draw of a training set as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from physattack.errors import check_interval, check_range

Range = tuple[float, float]

#: a background image's depth for fog, metres (drives, and views with ``SceneParams.fog_beta``)
BACKDROP_DEPTH_M = 200.0
#: the fog's albedo: the colour a fully fogged view takes, times the light's intensity and colour.
AIRLIGHT_ALBEDO = (0.78, 0.80, 0.82)


def airlight(ambient: Tensor, diffuse: Tensor, color: Tensor) -> Tensor:
    """The fog's colour B×3 under B lights (ambient and diffuse intensities B, RGB colours B×3)."""
    lit = (ambient + 0.5 * diffuse).clamp(0.02, 1.3)
    return torch.tensor(AIRLIGHT_ALBEDO, dtype=color.dtype, device=color.device) * lit[:, None] * color


@dataclass(frozen=True)
class Fog:
    """One draw of fog: extinction ``beta`` (B, per metre; 0 is clear air), the background's depth
    ``background_m`` (B) and the airlight ``air`` (B×3)."""

    beta: Tensor
    background_m: Tensor
    air: Tensor

    def transmission(self, distance_m: Tensor) -> Tensor:
        """``exp(−β·d)`` of each view's (or frame's) distance."""
        return torch.exp(-self.beta * distance_m)

    def over(self, images: Tensor, alpha: Tensor, distance_m: Tensor) -> Tensor:
        """Premultiplied layers (B×3×H×W, their cover B×1×H×W) at ``distance_m`` (B) seen through the fog."""
        t = self.transmission(distance_m).view(-1, 1, 1, 1)
        return images * t + self.air.view(-1, 3, 1, 1) * alpha * (1 - t)

    def background(self, images: Tensor) -> Tensor:
        """The background (B×3×H×W, opaque) at its depth seen through the fog."""
        return self.over(images, torch.ones_like(images[:, :1]), self.background_m)

    def view(self, images: Tensor, alpha: Tensor, distance_m: Tensor) -> Tensor:
        """Views already composited (B×3×H×W; the sign and its post cover ``alpha``) seen through the fog:
        the sign at ``distance_m`` (B), the rest at the background's depth."""
        near = self.transmission(distance_m).view(-1, 1, 1, 1)
        far = self.transmission(self.background_m).view(-1, 1, 1, 1)
        t = alpha * near + (1 - alpha) * far
        return images * t + self.air.view(-1, 3, 1, 1) * (1 - t)


@dataclass(frozen=True)
class FogDraw:
    """How training draws fog (see the module docstring).

    Args:
        share: the share of views (context frames) seen through fog; 0 draws none.
        transmission: the sign's transmission in a foggy view (the farthest sign's, in a frame), uniform.
        background: how many times the sign's distance the background stands, uniform.
    """

    share: float = 0.0
    transmission: Range = (0.1, 0.9)
    background: Range = (1.0, 4.0)

    def __post_init__(self) -> None:
        check_range("fog_share", self.share, 0.0, 1.0, why="the share of training views seen through fog")
        check_interval("FogDraw.transmission", self.transmission, 0.0, 1.0, lo_open=True,
                       why="the sign's transmission exp(-beta*d) in a foggy view")
        check_interval("FogDraw.background", self.background, 1.0, why="the background's depth over the sign's")

    def sample(self, distance_m: Tensor, ambient: Tensor, diffuse: Tensor, color: Tensor,
               generator: torch.Generator) -> Fog:
        """Fog for B views whose sign (or farthest sign) is ``distance_m`` away, under their lights."""
        b = len(distance_m)
        u = torch.rand(b, 3, generator=generator)
        lo, hi = self.transmission
        t = lo + (hi - lo) * u[:, 1]
        beta = torch.where(u[:, 0] < self.share, -torch.log(t) / distance_m, torch.zeros(b))
        lo, hi = self.background
        return Fog(beta=beta, background_m=distance_m * (lo + (hi - lo) * u[:, 2]),
                   air=airlight(ambient, diffuse, color))


def fog_generator(generator: torch.Generator) -> torch.Generator:
    """The fog's own generator, seeded from ``generator``'s seed, so fog leaves the other draws alone."""
    return torch.Generator().manual_seed(generator.initial_seed() + 0x6F67)


__all__ = ["AIRLIGHT_ALBEDO", "BACKDROP_DEPTH_M", "Fog", "FogDraw", "airlight", "fog_generator"]
