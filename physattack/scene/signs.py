"""Road-sign geometry and artwork, drawn with OpenCV and extruded into UV-mapped meshes.

Each sign is a flat aluminium plate (a convex outline, 2 mm thick) whose front is covered by one
texture, with a grey back, bare edges and a square post behind it reaching the ground. The face
centre is the world origin, the face normal +z, y up; the ground lies ``mount_height_m`` below.
Sizes follow the US MUTCD where the sign exists there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import cv2
import numpy as np
import torch

from physattack.scene.mesh import Material, Mesh

RED = (190, 30, 45)
WHITE = (245, 245, 242)
BLACK = (22, 22, 22)
YELLOW = (250, 200, 25)

TEXTURE_LONG_SIDE_PX = 512


@dataclass(frozen=True)
class SignDesign:
    """One sign: its class name, outline in metres (convex, counter-clockwise) and artwork."""

    name: str
    class_name: str
    outline_m: np.ndarray
    draw: Callable[[np.ndarray, Callable[[float, float], tuple[int, int]], float], None]
    description: str


def _regular(n: int, radius: float, phase_deg: float) -> np.ndarray:
    a = np.deg2rad(phase_deg + 360.0 * np.arange(n) / n)
    return np.stack([radius * np.cos(a), radius * np.sin(a)], axis=1)


def _rect(w: float, h: float) -> np.ndarray:
    return np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])


def _text(img, text, centre, width_px, colour, thickness_frac=0.14, font=cv2.FONT_HERSHEY_DUPLEX):
    """Write ``text`` centred on ``centre`` so that it spans ``width_px``."""
    (w, h), _ = cv2.getTextSize(text, font, 1.0, 1)
    scale = width_px / w
    thick = max(1, int(round(h * scale * thickness_frac)))
    (w, h), _ = cv2.getTextSize(text, font, scale, thick)
    org = (int(centre[0] - w / 2), int(centre[1] + h / 2))
    cv2.putText(img, text, org, font, scale, colour, thick, cv2.LINE_AA)


def _poly(img, pts_px, colour):
    cv2.fillPoly(img, [np.round(np.asarray(pts_px) * 16).astype(np.int32)], colour, cv2.LINE_AA, shift=4)


def _draw_stop(img, px, s):
    _poly(img, [px(*p) for p in _regular(8, 0.375 / math.cos(math.pi / 8), 22.5)], WHITE)
    _poly(img, [px(*p) for p in _regular(8, (0.375 - 0.02) / math.cos(math.pi / 8), 22.5)], RED)
    _text(img, "STOP", px(0, 0), 0.60 * s, WHITE, 0.16)


def _draw_yield(img, px, s):
    outline = YIELD_OUTLINE
    _poly(img, [px(*p) for p in outline], RED)
    inner = outline * 0.52 + np.array([0.0, 0.02])
    _poly(img, [px(*p) for p in inner], WHITE)
    _text(img, "YIELD", px(0, 0.055), 0.26 * s, RED, 0.17)


def _draw_speed(img, px, s):
    _poly(img, [px(*p) for p in _rect(0.6, 0.75)], BLACK)
    _poly(img, [px(*p) for p in _rect(0.57, 0.72)], WHITE)
    _text(img, "SPEED", px(0, 0.24), 0.40 * s, BLACK)
    _text(img, "LIMIT", px(0, 0.11), 0.36 * s, BLACK)
    _text(img, "45", px(0, -0.12), 0.42 * s, BLACK, 0.15, cv2.FONT_HERSHEY_SIMPLEX)


def _draw_do_not_enter(img, px, s):
    _poly(img, [px(*p) for p in _rect(0.75, 0.75)], WHITE)
    cv2.circle(img, px(0, 0), int(0.35 * s), RED, -1, cv2.LINE_AA)
    _poly(img, [px(*p) for p in _rect(0.52, 0.1)], WHITE)
    _text(img, "DO NOT", px(0, 0.16), 0.40 * s, WHITE)
    _text(img, "ENTER", px(0, -0.16), 0.38 * s, WHITE)


def _draw_pedestrian(img, px, s):
    d = DIAMOND_OUTLINE
    _poly(img, [px(*p) for p in d], BLACK)
    _poly(img, [px(*p) for p in d * 0.95], YELLOW)
    t = max(2, int(0.045 * s))
    cv2.circle(img, px(0.02, 0.22), int(0.055 * s), BLACK, -1, cv2.LINE_AA)
    for a, b in [((0.0, 0.15), (-0.03, -0.05)), ((-0.03, -0.05), (-0.14, -0.26)),
                 ((-0.03, -0.05), (0.10, -0.27)), ((0.0, 0.12), (-0.13, 0.0)),
                 ((0.0, 0.12), (0.12, 0.02))]:
        cv2.line(img, px(*a), px(*b), BLACK, t, cv2.LINE_AA)


def _draw_keep_right(img, px, s):
    _poly(img, [px(*p) for p in _rect(0.6, 0.75)], BLACK)
    _poly(img, [px(*p) for p in _rect(0.57, 0.72)], WHITE)
    cv2.ellipse(img, px(-0.09, -0.12), (int(0.09 * s), int(0.2 * s)), 0, 0, 360, BLACK, -1, cv2.LINE_AA)
    t = max(2, int(0.05 * s))
    cv2.line(img, px(0.09, -0.3), px(0.09, 0.12), BLACK, t, cv2.LINE_AA)
    _poly(img, [px(-0.03, 0.10), px(0.21, 0.10), px(0.09, 0.30)], BLACK)


def _draw_one_way(img, px, s):
    _poly(img, [px(*p) for p in _rect(0.9, 0.3)], BLACK)
    _poly(img, [px(*p) for p in np.array([[-0.38, -0.07], [0.22, -0.07], [0.22, -0.12], [0.40, 0.0],
                                          [0.22, 0.12], [0.22, 0.07], [-0.38, 0.07]])], WHITE)
    _text(img, "ONE WAY", px(-0.06, 0.0), 0.46 * s, BLACK, 0.12)


def _draw_do_not_pass(img, px, s):
    _poly(img, [px(*p) for p in _rect(0.6, 0.75)], BLACK)
    _poly(img, [px(*p) for p in _rect(0.57, 0.72)], WHITE)
    _text(img, "DO", px(0, 0.2), 0.2 * s, BLACK)
    _text(img, "NOT", px(0, 0.0), 0.32 * s, BLACK)
    _text(img, "PASS", px(0, -0.2), 0.42 * s, BLACK)


def _draw_railroad(img, px, s):
    cv2.circle(img, px(0, 0), int(0.45 * s), BLACK, -1, cv2.LINE_AA)
    cv2.circle(img, px(0, 0), int(0.43 * s), YELLOW, -1, cv2.LINE_AA)
    t = max(2, int(0.05 * s))
    cv2.line(img, px(-0.3, 0.3), px(0.3, -0.3), BLACK, t, cv2.LINE_AA)
    cv2.line(img, px(-0.3, -0.3), px(0.3, 0.3), BLACK, t, cv2.LINE_AA)
    _text(img, "R", px(-0.2, 0.0), 0.12 * s, BLACK, 0.2)
    _text(img, "R", px(0.2, 0.0), 0.12 * s, BLACK, 0.2)


_TRI_H = 0.9 * math.sqrt(3) / 2
YIELD_OUTLINE = np.array([[0.0, -2 * _TRI_H / 3], [0.45, _TRI_H / 3], [-0.45, _TRI_H / 3]])
DIAMOND_OUTLINE = np.array([[0.0, -0.53], [0.53, 0.0], [0.0, 0.53], [-0.53, 0.0]])

SIGNS: dict[str, SignDesign] = {d.name: d for d in [
    SignDesign("stop_sign", "stop", _regular(8, 0.375 / math.cos(math.pi / 8), 22.5), _draw_stop,
               "US R1-1 stop sign, 750 mm octagon"),
    SignDesign("yield_sign", "yield", YIELD_OUTLINE, _draw_yield, "US R1-2 yield sign, 900 mm triangle"),
    SignDesign("speed_limit_45", "speed_limit_45", _rect(0.6, 0.75), _draw_speed,
               "US R2-1 speed limit 45, 600×750 mm"),
    SignDesign("do_not_enter", "no_entry", _rect(0.75, 0.75), _draw_do_not_enter,
               "US R5-1 do not enter, 750 mm square"),
    SignDesign("pedestrian_crossing", "pedestrian_crossing", DIAMOND_OUTLINE, _draw_pedestrian,
               "US W11-2 pedestrian crossing, 750 mm diamond"),
    SignDesign("keep_right", "keep_right", _rect(0.6, 0.75), _draw_keep_right,
               "US R4-7 keep right, 600×750 mm"),
    SignDesign("one_way", "one_way", _rect(0.9, 0.3), _draw_one_way, "US R6-1 one way, 900×300 mm"),
    SignDesign("do_not_pass", "do_not_pass", _rect(0.6, 0.75), _draw_do_not_pass,
               "US R4-1 do not pass, 600×750 mm"),
    SignDesign("railroad_crossing", "railroad_crossing", _regular(40, 0.45, 0.0), _draw_railroad,
               "US W10-1 railroad crossing advance warning, 900 mm circle"),
]}


def draw_texture(design: SignDesign) -> tuple[np.ndarray, np.ndarray, tuple[float, float]]:
    """Draw a sign's face.

    Returns:
        texture: H×W×3 uint8 RGB, covering the outline's bounding box; texels outside the outline
            hold the nearest face colour (so bilinear filtering at the edge never bleeds black).
        face_mask: H×W uint8 in {0, 255}, the texels on the face.
        size_m: (width, height) in metres of the area the texture covers.
    """
    lo, hi = design.outline_m.min(0), design.outline_m.max(0)
    w_m, h_m = hi - lo
    scale = TEXTURE_LONG_SIDE_PX / max(w_m, h_m)
    w_px, h_px = int(round(w_m * scale)), int(round(h_m * scale))

    def px(x: float, y: float) -> tuple[float, float]:
        return ((x - lo[0]) * scale, (hi[1] - y) * scale)

    img = np.zeros((h_px, w_px, 3), np.uint8)
    design.draw(img, lambda x, y: tuple(int(round(c)) for c in px(x, y)), scale)
    mask = np.zeros((h_px, w_px), np.uint8)
    _poly(mask, [px(*p) for p in design.outline_m], 255)
    # Extend the face colours outward so minified texture lookups at the rim stay on the sign's colours.
    inside = mask > 127
    if not inside.all():
        _, labels = cv2.distanceTransformWithLabels((~inside).astype(np.uint8), cv2.DIST_L2, 5,
                                                    labelType=cv2.DIST_LABEL_PIXEL)
        ys, xs = np.nonzero(inside)
        lut = np.zeros((labels.max() + 1, 3), np.uint8)
        lut[labels[ys, xs]] = img[ys, xs]
        img = np.where(inside[..., None], img, lut[labels])
    return img, mask, (float(w_m), float(h_m))


def build_mesh(design: SignDesign, thickness_m: float = 0.002, mount_height_m: float = 2.1,
               post_width_m: float = 0.05) -> Mesh:
    """Extrude the sign's outline into a plate and add a post reaching the ground."""
    out = np.asarray(design.outline_m, dtype=np.float64)
    n = len(out)
    lo, hi = out.min(0), out.max(0)
    verts, uvs, normals = [], [], []
    faces, f_uv, f_n, f_mat = [], [], [], []

    def add_tri(v, t, nn, m):
        faces.append(v), f_uv.append(t), f_n.append(nn), f_mat.append(m)

    # Front face (z = 0), textured: UVs from the outline's bounding box, v up.
    for x, y in out:
        verts.append((x, y, 0.0))
        uvs.append(((x - lo[0]) / (hi[0] - lo[0]), (y - lo[1]) / (hi[1] - lo[1])))
    normals += [(0, 0, 1), (0, 0, -1)]
    flat_uv = len(uvs)
    uvs.append((0.5, 0.5))                           # untextured faces point at any texel
    for k in range(1, n - 1):
        add_tri((0, k, k + 1), (0, k, k + 1), (0, 0, 0), 0)
    # Back face (z = -t), reversed winding.
    for x, y in out:
        verts.append((x, y, -thickness_m))
    for k in range(1, n - 1):
        add_tri((n, n + k + 1, n + k), (flat_uv,) * 3, (1, 1, 1), 1)
    # Edges.
    for k in range(n):
        a, b = k, (k + 1) % n
        e = out[b] - out[a]
        normals.append((e[1] / np.hypot(*e), -e[0] / np.hypot(*e), 0.0))
        ni = len(normals) - 1
        add_tri((a, n + a, n + b), (flat_uv,) * 3, (ni,) * 3, 2)
        add_tri((a, n + b, b), (flat_uv,) * 3, (ni,) * 3, 2)
    # Post: a square tube behind the plate, from the ground to 40 % up the sign.
    w = post_width_m / 2
    z0, z1 = -thickness_m - 2 * w, -thickness_m
    y0, y1 = -mount_height_m, hi[1] * 0.4
    base = len(verts)
    ring = [(-w, z0), (w, z0), (w, z1), (-w, z1)]
    for x, z in ring:
        verts.append((x, y0, z))
    for x, z in ring:
        verts.append((x, y1, z))
    for k, nrm in enumerate([(0, 0, -1), (1, 0, 0), (0, 0, 1), (-1, 0, 0)]):
        normals.append(nrm)
        ni = len(normals) - 1
        a, b = base + k, base + (k + 1) % 4
        add_tri((a, b, b + 4), (flat_uv,) * 3, (ni,) * 3, 3)
        add_tri((a, b + 4, a + 4), (flat_uv,) * 3, (ni,) * 3, 3)

    materials = (
        Material("face", (1.0, 1.0, 1.0), specular=0.08, shininess=20.0, texture="texture.png"),
        Material("back", (0.55, 0.56, 0.57), specular=0.2, shininess=30.0),
        Material("edge", (0.7, 0.71, 0.72), specular=0.3, shininess=30.0),
        Material("post", (0.42, 0.43, 0.44), specular=0.3, shininess=40.0),
    )
    as_t = lambda a, dt=torch.float32: torch.tensor(np.asarray(a), dtype=dt)  # noqa: E731
    return Mesh(verts=as_t(verts), faces=as_t(faces, torch.long), uvs=as_t(uvs),
                face_uvs=as_t(f_uv, torch.long), normals=as_t(normals), face_normals=as_t(f_n, torch.long),
                face_materials=as_t(f_mat, torch.long), materials=materials)
