"""Occlusion and shadows over a drive: something that hides part of the sign for part of a drive, and a shadow
edge across its face.

The presets (``OCCLUSION``; ``drive.drives.occlusion``), each fixed by the drive's seed and geometry:

- ``none``: nothing between the car and the sign.
- ``foliage``: a branch hanging into the sight line, its leaves in clusters 0.6-1.0 m in front of the face over
  its road-side upper part, with gaps between them: it changes 42 % of the face's box at 70 m, 32 % at 30 m and
  26 % at 15 m (a 1920-px dashcam, 6 m lane offset); parallax moves it across the face as the car nears.
- ``truck``: a parked box truck (2.4 m wide at most, 3.4 m tall, 7 m long) on the verge between the road's right
  edge and the sign, placed where it hides the sign's centre from the start of the drive until the car is
  ``reveal_m`` (45 m) from the sign; the face then comes out from behind its rear corner. At 70 km/h (braking
  at 51 m) even the clean car cannot stop in time; the slower drives have the rest of the approach.
- ``shadow``: the shadow of something out of frame (a pole, a building's edge) across the face: a straight edge
  through the face at a seeded angle (within 60° of vertical) and offset (within 0.15 m of the centre), the part
  beyond it lit by the ambient light only (the direct light is blocked), with a 3-cm penumbra. At night in the
  headlights alone, with no direct light, it changes nothing.

Geometry, in the road's coordinates (the sign's, when it is not turned on its post: ``trajectories.turn``): the car
at ``x = -lane_offset_m``, its road's right edge ``lane_width_m / 2`` to its right (3.5-m lanes, as ``street.Street``). Occluders are flat polygons
(``street.Polygon``) lit flat by the drive's light, fogged by their own depth, filled by OpenCV at 1/16-pixel
precision into a cover that is composited over the frame after the sign (so gradients still reach the texture
through the uncovered pixels). The EOT samplers never draw an occlusion (a test holds them to that): like the
held-out streets, night and weather, they are for judging.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import cv2
import numpy as np
import torch
from torch import Tensor

from physattack.drive.street import LANE_WIDTH_M, Polygon, _jitter, _quad, _shade, light_fields, project_polygon
from physattack.errors import InputError

Region = tuple[int, int, int, int]
TRUCK_WIDTH_M, TRUCK_HEIGHT_M, TRUCK_LENGTH_M = 2.4, 3.4, 7.0


@dataclass(frozen=True)
class Occlusion:
    """An occlusion preset: ``kind`` (none, foliage, truck or shadow) and, for the truck, the distance at which the
    sign's centre comes out from behind it."""

    name: str
    kind: str = "none"
    reveal_m: float = 45.0
    penumbra_m: float = 0.03

    def build(self, seed: int, lane_offset_m: float, sign_height_m: float, face_size_m: tuple[float, float],
              start_m: float) -> "Occluder | None":
        """The occluder of a drive (its noise ``seed``, geometry and the face's size), or None for ``none``."""
        rng = np.random.default_rng(seed + 7919)
        if self.kind == "none":
            return None
        if self.kind == "shadow":
            angle = math.radians(rng.uniform(-60.0, 60.0))
            direction = np.array([math.sin(angle), math.cos(angle)])
            normal = np.array([direction[1], -direction[0]])
            point = normal * rng.uniform(-0.15, 0.15)
            side = 1.0 if rng.uniform() < 0.5 else -1.0
            return Occluder(self.name, shadow=(point, direction, side), penumbra_m=self.penumbra_m)
        if self.kind == "foliage":
            return Occluder(self.name, polygons=tuple(_foliage(rng, face_size_m)))
        return Occluder(self.name, polygons=tuple(_truck(rng, lane_offset_m, sign_height_m, self.reveal_m,
                                                            start_m)))


def _foliage(rng: np.random.Generator, face_size_m: tuple[float, float]) -> list[Polygon]:
    w, h = face_size_m[0] / 2, face_size_m[1] / 2
    polys = []
    twig = rng.uniform(-0.05, 0.25) * h
    polys.append(Polygon(np.array([[-3.0 * w, twig + 0.9 * h, 0.9], [-0.4 * w, twig + 0.3 * h, 0.8],
                                   [-0.4 * w, twig + 0.26 * h, 0.8], [-3.0 * w, twig + 0.84 * h, 0.9]]),
                         (0.30, 0.22, 0.14), (0, 0, 1)))
    a = np.linspace(0, 2 * np.pi, 9, endpoint=False)
    for _ in range(22):
        cx, cy = rng.uniform(-1.3 * w, -0.1 * w), rng.uniform(-0.1 * h, 1.2 * h)
        r, z = rng.uniform(0.05, 0.09), rng.uniform(0.6, 1.0)
        ring = np.stack([cx + r * np.cos(a), cy + r * 0.8 * np.sin(a), np.full(len(a), z)], 1)
        polys.append(Polygon(ring, _jitter((0.20, 0.36, 0.14), rng, 0.3), (0, 0, 1)))
    return polys


def _truck(rng: np.random.Generator, lane_offset_m: float, sign_height_m: float, reveal_m: float,
           start_m: float) -> list[Polygon]:
    edge = -lane_offset_m + LANE_WIDTH_M / 2
    xa, xb = edge + 0.15, min(edge + 0.15 + TRUCK_WIDTH_M, -0.35)
    if xb - xa < 0.8:
        raise InputError(f"drive.drives.occlusion=truck needs room for a truck between the road and the sign: a lane "
                         f"offset of {lane_offset_m:g} m leaves {max(0.0, -0.35 - edge - 0.15):.2f} m; use "
                         f"drive.drives.lane_offsets_m >= {LANE_WIDTH_M / 2 + 1.3:g}.")
    # the sight line to the sign's centre from s metres down the road crosses x = xa at z = |xa|·s/L: the truck's
    # end nearer the sign stands where that happens at s = reveal_m
    z1 = abs(xa) * min(reveal_m, start_m) / lane_offset_m
    z2 = z1 + TRUCK_LENGTH_M
    g = -sign_height_m
    top = g + TRUCK_HEIGHT_M
    body = _jitter((0.86, 0.86, 0.84), rng, 0.05)
    return [_quad(xa, xa, g + 0.35, top, z1, z2, tuple(0.85 * c for c in body), (-1, 0, 0)),        # road side
            _quad(xa, xb, g + 0.35, top, z2, z2, body, (0, 0, 1)),                                   # rear doors
            _quad(xa, xb, g, g + 0.35, z2 + 0.01, z2 + 0.01, (0.08, 0.08, 0.08), (0, 0, 1)),         # bumper, wheels
            _quad(xa + 0.1, xa + 0.3, g + 0.6, g + 0.9, z2 + 0.02, z2 + 0.02, (0.75, 0.08, 0.06), (0, 0, 1)),
            _quad(xb - 0.3, xb - 0.1, g + 0.6, g + 0.9, z2 + 0.02, z2 + 0.02, (0.75, 0.08, 0.06), (0, 0, 1))]


#: the presets ``drive.drives.occlusion`` names
OCCLUSION: dict[str, Occlusion] = {o.name: o for o in (
    Occlusion("none"), Occlusion("foliage", "foliage"), Occlusion("truck", "truck"), Occlusion("shadow", "shadow"))}


@dataclass(frozen=True)
class Occluder:
    """One drive's occluder: the polygons in front of the sign, or a shadow edge on its face: a point and a direction
    on the face (metres, x right and y up) and which side of it (+1 or -1) is in shadow."""

    name: str
    polygons: tuple[Polygon, ...] = ()
    shadow: tuple | None = None
    penumbra_m: float = 0.03

    def cover(self, images: Tensor, cameras, region: Region, params, weather=None, yaw_deg: float = 0.0) -> Tensor:
        """``images`` (B×3×h×w, the frames' ``region``) with the polygons drawn over them, as ``cameras``
        (``Cameras`` of the full frame, in the road's coordinates) see them under ``params``' light (in the
        coordinates of a sign turned ``yaw_deg`` on its post), through ``weather``'s fog."""
        if not self.polygons:
            return images
        from physattack.drive.weather import airlight, transmission

        x0, y0, x1, y1 = region
        h, w = y1 - y0, x1 - x0
        lights = params.lights()
        colours, covers = [], []
        for i in range(images.shape[0]):
            R, T = cameras.R[i].double().cpu().numpy(), cameras.T[i].double().cpu().numpy()
            focal = float(cameras.focal_px[i])
            cx, cy = float(cameras.principal_px[i, 0]) - x0, float(cameras.principal_px[i, 1]) - y0
            light = light_fields(lights, i, yaw_deg)
            air = airlight(light["ambient"], light["diffuse"], light["color"])
            colour = np.zeros((h, w, 3), np.float32)
            cover = np.zeros((h, w), np.float32)
            items = []
            for p in self.polygons:
                projected = project_polygon(p.points, R, T, focal, (cx, cy), (w, h))
                if projected is not None:
                    items.append((projected, p))
            for (uv, _, depth), p in sorted(items, key=lambda it: -it[0][1]):
                rgb = np.clip(np.asarray(p.colour) * _shade(p.normal, light), 0, 1)
                if weather is not None and weather.visibility_m is not None:
                    t = float(transmission(depth, weather))
                    rgb = rgb * t + air * (1 - t)
                pts = np.round((uv - 0.5) * 16).astype(np.int32)
                cv2.fillPoly(colour, [pts], tuple(float(c) for c in rgb), lineType=cv2.LINE_AA, shift=4)
                cv2.fillPoly(cover, [pts], 1.0, lineType=cv2.LINE_AA, shift=4)
            colours.append(torch.from_numpy(colour).permute(2, 0, 1))
            covers.append(torch.from_numpy(np.clip(cover, 0, 1))[None])
        a = torch.stack(covers).to(images.device, images.dtype)
        c = torch.stack(colours).to(images.device, images.dtype)
        # colour was filled with anti-aliased edges over black: it is premultiplied by the cover already
        return images * (1 - a) + c

    def shade(self, lit: Tensor, unlit: Tensor, cameras) -> Tensor:
        """The sign's window images with the shadow: ``lit`` where the face is in the light, ``unlit`` (the same
        view lit by the ambient light alone) beyond the edge, blended over the penumbra; ``cameras``: the window's."""
        if self.shadow is None:
            return lit
        point, direction, side = self.shadow
        ends = torch.tensor([[*(point - 2 * direction), 0.0], [*(point + 2 * direction), 0.0], [*point, 0.0]],
                            dtype=torch.float32, device=lit.device)
        uv, z = cameras.project(ends)
        a, b = uv[:, 0], uv[:, 1]                                           # B×2: the edge's image
        h, w = lit.shape[-2:]
        ys, xs = torch.meshgrid(torch.arange(h, device=lit.device) + 0.5, torch.arange(w, device=lit.device) + 0.5,
                                indexing="ij")
        d = b - a
        length = d.norm(dim=-1).clamp_min(1e-6)
        # signed distance in pixels from the edge's image; ``side`` picks which half is in shadow
        cross = (d[:, 0, None, None] * (ys - a[:, 1, None, None]) - d[:, 1, None, None] * (xs - a[:, 0, None, None]))
        dist = cross / length[:, None, None] * side
        penumbra = (self.penumbra_m * cameras.focal_px / z[:, 2].clamp_min(1e-3)).clamp_min(1.0)
        mask = (0.5 + dist / penumbra[:, None, None]).clamp(0, 1)[:, None]
        return lit * (1 - mask) + unlit * mask


def ambient_only(params):
    """``params`` (``SceneParams``) with the direct light off: what a face in shadow receives."""
    return replace(params, diffuse=torch.zeros_like(params.diffuse))


__all__ = ["OCCLUSION", "Occluder", "Occlusion", "ambient_only"]
