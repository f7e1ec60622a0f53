"""Batched pinhole cameras, built by looking at the object from distance, azimuth and elevation.

Camera coordinates follow OpenCV: x right, y down, z forward. Pixel ``(u, v)`` has its centre at
``(u + 0.5, v + 0.5)``; a point projects to ``(f·x/z + cx, f·y/z + cy)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from torch import Tensor


@dataclass(frozen=True)
class Cameras:
    """A batch of B pinhole cameras sharing one image size.

    Shape:
        R: B×3×3 world-to-camera rotation. T: B×3, so that ``x_cam = R @ x_world + T``.
        focal_px: B. principal_px: B×2 (cx, cy) in pixels.
    """

    R: Tensor
    T: Tensor
    focal_px: Tensor
    principal_px: Tensor
    image_size: tuple[int, int]

    def __len__(self) -> int:
        return self.R.shape[0]

    def __getitem__(self, index) -> "Cameras":
        """The cameras ``index`` selects (an index tensor, a mask or a slice), sharing the image size."""
        return replace(self, R=self.R[index], T=self.T[index], focal_px=self.focal_px[index],
                       principal_px=self.principal_px[index])

    @property
    def centers(self) -> Tensor:
        """B×3 camera positions in world coordinates."""
        return -(self.R.transpose(1, 2) @ self.T.unsqueeze(-1)).squeeze(-1)

    def scaled(self, factor: int) -> "Cameras":
        """The same cameras with an image ``factor`` times larger in each direction."""
        h, w = self.image_size
        return replace(self, focal_px=self.focal_px * factor, principal_px=self.principal_px * factor,
                       image_size=(h * factor, w * factor))

    def to_camera(self, points: Tensor) -> Tensor:
        """World points (P×3 or B×P×3) to camera coordinates B×P×3."""
        return points @ self.R.transpose(1, 2) + self.T.unsqueeze(1)

    def project(self, points: Tensor) -> tuple[Tensor, Tensor]:
        """World points to pixel coordinates B×P×2 and depths B×P (metres along the optical axis)."""
        cam = self.to_camera(points)
        z = cam[..., 2]
        uv = cam[..., :2] / z.unsqueeze(-1) * self.focal_px[:, None, None] + self.principal_px[:, None, :]
        return uv, z


def look_at_cameras(distance_m: Tensor, azimuth_deg: Tensor, elevation_deg: Tensor, roll_deg: Tensor,
                    fov_deg: Tensor, image_size: tuple[int, int], target: Tensor | None = None,
                    shift: Tensor | None = None) -> Cameras:
    """Cameras on a sphere around ``target``, looking at it.

    Azimuth 0 is head-on (camera on +z); positive azimuth moves the camera towards +x, the face's
    right-hand edge as a viewer sees it. Elevation lifts the camera above the target. Roll turns the
    image clockwise about the optical axis.

    Args:
        distance_m, azimuth_deg, elevation_deg, roll_deg, fov_deg: shape (B,); fov is horizontal.
        image_size: (H, W) in pixels.
        target: B×3 or 3 world point at the image centre (default: the origin).
        shift: B×2 offset of the target in the image, as a fraction of the width and height.
    """
    b = distance_m.shape[0]
    dev, dt = distance_m.device, distance_m.dtype
    az, el, roll = (torch.deg2rad(a.to(dt)) for a in (azimuth_deg, elevation_deg, roll_deg))
    target = torch.zeros(b, 3, device=dev, dtype=dt) if target is None else target.expand(b, 3).to(dt)
    center = target + distance_m[:, None] * torch.stack(
        [torch.cos(el) * torch.sin(az), torch.sin(el), torch.cos(el) * torch.cos(az)], dim=-1)
    forward = torch.nn.functional.normalize(target - center, dim=-1)
    up = torch.tensor([0.0, 1.0, 0.0], device=dev, dtype=dt).expand(b, 3)
    right = torch.nn.functional.normalize(torch.cross(forward, up, dim=-1), dim=-1)
    down = torch.cross(forward, right, dim=-1)
    c, s = torch.cos(roll)[:, None], torch.sin(roll)[:, None]
    right, down = c * right - s * down, s * right + c * down
    R = torch.stack([right, down, forward], dim=1)
    T = -(R @ center.unsqueeze(-1)).squeeze(-1)
    h, w = image_size
    focal = (w / 2) / torch.tan(torch.deg2rad(fov_deg.to(dt)) / 2)
    principal = torch.tensor([w / 2, h / 2], device=dev, dtype=dt).expand(b, 2)
    if shift is not None:
        principal = principal + shift * torch.tensor([w, h], device=dev, dtype=dt)
    return Cameras(R=R, T=T, focal_px=focal, principal_px=principal.contiguous(), image_size=(h, w))


def fov_for_width(width_m: Tensor, distance_m: Tensor, frame: Tensor) -> Tensor:
    """Horizontal FOV (degrees) at which an object ``width_m`` wide fills ``frame`` of the image."""
    return torch.rad2deg(2 * torch.atan(width_m / frame / 2 / distance_m))


