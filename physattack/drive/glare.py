"""A low sun ahead: the sign backlit, and the veiling glare a dashcam behind a windscreen sees around the sun.

The drive light ``sun_ahead`` (``SUN_AHEAD``, drives only: the EOT samplers never draw it) puts the sun 8° above the
horizon straight down the road, behind the sign: the face gets the sky's light only (the ambient term), and
every pixel a veil that grows towards the sun. The veil follows Stiles-Holladay's disability-glare formula,
``L_veil = k·E/θ²`` (``k`` = 10 with θ in degrees, the angle between the pixel's ray and the sun), in units
where 1 is a white matte surface in the preset's full light and ``E`` the sun's share of that light (its
``diffuse`` term), capped inside ``core_deg`` of the sun, where the disc and its flare saturate. That is the
human eye's glare; a windscreen with dust or streaks scatters as much or more, a clean lens less (``k`` sets
it). The veil is added to the composited frame before the camera's effects, whose clipping is the sensor's
limited dynamic range; with ``Dashcam.auto_exposure`` the frame is metered without it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

#: the light of a drive into a low sun (``physattack.drive.trajectories.DRIVE_LIGHTS``)
SUN_AHEAD = {"ambient": 0.35, "diffuse": 0.9, "light_azimuth_deg": 180.0, "light_elevation_deg": 8.0,
             "color_temp_k": 4000.0}


@dataclass(frozen=True)
class Glare:
    """Veiling glare around the sun: ``k`` (Stiles-Holladay's 10, θ in degrees) and the core inside which it
    saturates."""

    k: float = 10.0
    core_deg: float = 1.0

    def veil(self, cameras, region: tuple[int, int, int, int], params) -> Tensor:
        """B×3×h×w: the veil over ``region`` (x0, y0, x1, y1 in full-frame pixels) of the frames ``cameras``
        (full-frame ``Cameras`` in the sign's coordinates) see, in the light of ``params`` (``SceneParams``: the sun's
        direction, colour and share)."""
        lights = params.lights()
        x0, y0, x1, y1 = region
        dev = cameras.R.device
        us = torch.arange(x0, x1, dtype=torch.float32, device=dev) + 0.5
        vs = torch.arange(y0, y1, dtype=torch.float32, device=dev) + 0.5
        out = []
        for i in range(len(cameras)):
            f = float(cameras.focal_px[i])
            cx, cy = (float(v) for v in cameras.principal_px[i])
            sun = cameras.R[i].float() @ lights.direction[i].float().to(dev)            # in camera coordinates
            rays = torch.stack([((us - cx) / f)[None, :].expand(len(vs), -1),
                                ((vs - cy) / f)[:, None].expand(-1, len(us)), torch.ones(len(vs), len(us), device=dev)])
            cos = (sun[:, None, None] * rays).sum(0) / rays.norm(dim=0)
            theta = torch.rad2deg(torch.arccos(cos.clamp(-1, 1))).clamp_min(self.core_deg)
            strength = self.k * float(lights.diffuse[i]) / theta ** 2
            out.append(strength[None] * lights.color[i].float().to(dev)[:, None, None])
        return torch.stack(out)


def sun_image(cameras, params) -> Tensor:
    """B×2: where the sun is in the full frame (pixels; behind the camera: nan)."""
    lights = params.lights()
    sun = (cameras.R.float() @ lights.direction.float()[..., None])[..., 0]
    uv = sun[:, :2] / sun[:, 2:3] * cameras.focal_px[:, None] + cameras.principal_px
    return torch.where(sun[:, 2:3] > 0, uv, torch.full_like(uv, math.nan))


__all__ = ["Glare", "SUN_AHEAD", "sun_image"]
