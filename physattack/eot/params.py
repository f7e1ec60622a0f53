"""SceneParams: one batch of viewing conditions as plain tensors, replayable and sliceable."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from kornia.augmentation._2d.intensity.planckian_jitter import get_planckian_coeffs
from torch import Tensor

from physattack.render.camera import Cameras, fov_for_width, look_at_cameras
from physattack.render.shade import Lights

# kornia's black-body table (Planckian jitter, Zini et al. 2022): the R/G and B/G gains of a
# Planckian illuminant from 3000 K to 15000 K in 500 K steps.
_RB = get_planckian_coeffs("blackbody")
_BLACKBODY = torch.stack([_RB[:, 0], torch.ones(len(_RB)), _RB[:, 1]], dim=1)
_BLACKBODY_K = torch.arange(3000.0, 15001.0, 500.0)


#: Rec. 709 luminance weights of linear R, G, B
REC709_LUMA = (0.2126, 0.7152, 0.0722)


def color_temperature_rgb(kelvin: Tensor) -> Tensor:
    """B kelvins to B×3 RGB light colours of unit luminance (kornia's black-body table, interpolated)."""
    k = kelvin.clamp(3000.0, 15000.0).cpu()
    pos = (k - 3000.0) / 500.0
    i0 = pos.floor().long().clamp(max=len(_BLACKBODY_K) - 2)
    t = (pos - i0).unsqueeze(-1)
    rgb = _BLACKBODY[i0] * (1 - t) + _BLACKBODY[i0 + 1] * t
    lum = rgb @ torch.tensor(REC709_LUMA)
    return (rgb / lum.unsqueeze(-1)).to(kelvin.device)


@dataclass(frozen=True)
class SceneParams:
    """Viewing conditions for B views. Every field has shape (B,).

    Camera: ``distance_m``, ``azimuth_deg``, ``elevation_deg``, ``roll_deg`` (see
    ``look_at_cameras``); ``frame``, the share of the image width the object's width fills (the crop
    a two-stage recognizer takes around a detection); ``shift_x``, ``shift_y``, the object's offset
    from the image centre as a share of the image.
    Light: ``ambient``, ``diffuse`` intensities; ``light_azimuth_deg``, ``light_elevation_deg``,
    the direction the light comes from; ``color_temp_k``.
    Camera effects: ``sensor_px``, how many sensor pixels the crop spans (fewer than the image's
    width means the view is resampled from that resolution); ``blur_sigma_px``; ``motion_px`` (odd
    kernel length, 1 = none) and ``motion_angle_deg``; ``exposure`` gain; ``contrast``;
    ``noise_std``; ``jpeg_quality`` (100 = not compressed); ``noise_seed``.
    Background: ``background_index`` into the bank, crop ``bg_x``, ``bg_y`` in [0, 1], ``bg_scale``.
    Weather and night (0 unless a sampler draws them; ``ViewPipeline`` applies them): ``fog_beta``, the fog's
    extinction per metre (``physattack.eot.fog``: the sign seen through ``exp(-fog_beta·distance_m)``, the
    background as if ``BACKDROP_DEPTH_M`` away); ``headlights``, 1 where the view is lit at night by a car's
    headlamps (``physattack.eot.night``: the sheeting retroreflects, print does not, the background is dark).
    """

    distance_m: Tensor
    azimuth_deg: Tensor
    elevation_deg: Tensor
    roll_deg: Tensor
    frame: Tensor
    shift_x: Tensor
    shift_y: Tensor
    ambient: Tensor
    diffuse: Tensor
    light_azimuth_deg: Tensor
    light_elevation_deg: Tensor
    color_temp_k: Tensor
    sensor_px: Tensor
    blur_sigma_px: Tensor
    motion_px: Tensor
    motion_angle_deg: Tensor
    exposure: Tensor
    contrast: Tensor
    noise_std: Tensor
    jpeg_quality: Tensor
    noise_seed: Tensor
    background_index: Tensor
    bg_x: Tensor
    bg_y: Tensor
    bg_scale: Tensor
    fog_beta: Tensor | None = None
    headlights: Tensor | None = None

    def __post_init__(self) -> None:
        for name in ("fog_beta", "headlights"):          # clear air, daylight: the draws that predate them
            if getattr(self, name) is None:
                object.__setattr__(self, name, torch.zeros_like(self.distance_m))

    def __len__(self) -> int:
        return self.distance_m.shape[0]

    def __getitem__(self, index) -> "SceneParams":
        """Select views (an int, slice, index tensor or boolean mask), keeping the batch dimension."""
        if isinstance(index, int):
            index = slice(index, index + 1)
        return SceneParams(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def to(self, device: torch.device | str) -> "SceneParams":
        return SceneParams(**{f.name: getattr(self, f.name).to(device) for f in fields(self)})

    def as_dict(self) -> dict[str, list]:
        return {f.name: getattr(self, f.name).tolist() for f in fields(self)}

    @staticmethod
    def cat(parts: list["SceneParams"]) -> "SceneParams":
        return SceneParams(**{f.name: torch.cat([getattr(p, f.name) for p in parts]) for f in fields(SceneParams)})

    def cameras(self, object_width_m: float, image_size: tuple[int, int]) -> Cameras:
        """Cameras that look at the object's centre, framed so its width fills ``frame``."""
        width = torch.full_like(self.distance_m, object_width_m)
        fov = fov_for_width(width, self.distance_m, self.frame)
        shift = torch.stack([self.shift_x, self.shift_y], dim=-1)
        return look_at_cameras(self.distance_m, self.azimuth_deg, self.elevation_deg, self.roll_deg, fov,
                               image_size, shift=shift)

    def lights(self) -> Lights:
        az, el = torch.deg2rad(self.light_azimuth_deg), torch.deg2rad(self.light_elevation_deg)
        direction = torch.stack([torch.cos(el) * torch.sin(az), torch.sin(el), torch.cos(el) * torch.cos(az)], -1)
        return Lights(ambient=self.ambient, diffuse=self.diffuse, direction=F.normalize(direction, dim=-1),
                      color=color_temperature_rgb(self.color_temp_k))
