"""Road-sign geometry and artwork, rasterised exactly and extruded into UV-mapped meshes.

Each sign is a flat aluminium plate (a convex outline, 2 mm thick) whose front is covered by one
texture, with a grey back, bare edges and a square post behind it reaching the ground. The face
centre is the world origin, the face normal +z, y up; the ground lies ``mount_height_m`` below.
Sizes follow the US MUTCD where the sign exists there.

The artwork is vector shapes in metres (polygons, discs, strokes and legends in the project's own
stroke font, :mod:`physattack.scene.font`) rasterised by :mod:`physattack.scene.vector` with
integer arithmetic only, so the textures are the same texels whatever OpenCV, Pillow or numpy is
installed; trigonometry goes through :mod:`math` on scalars for the same reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from physattack.scene.font import BOLD, REGULAR, legend
from physattack.scene.mesh import Material, Mesh
from physattack.scene.vector import disc, ellipse, line, mask, paint, polygon, polygons

RED = (190, 30, 45)
WHITE = (245, 245, 242)
BLACK = (22, 22, 22)
YELLOW = (250, 200, 25)

TEXTURE_LONG_SIDE_PX = 512

ToPixels = Callable[[float, float], tuple[float, float]]


@dataclass(frozen=True)
class SignDesign:
    """One sign: its class name, outline in metres (convex, counter-clockwise) and artwork.

    ``draw(img, px, scale)`` paints the face onto ``img`` (H×W×3 uint8); ``px(x, y)`` maps metres on
    the face to texture pixels (floats, pixel ``j`` spanning ``[j, j + 1]``), ``scale`` is pixels per metre.
    """

    name: str
    class_name: str
    outline_m: np.ndarray
    draw: Callable[[np.ndarray, ToPixels, float], None]
    description: str


def _regular(n: int, radius: float, phase_deg: float) -> np.ndarray:
    angles = [math.radians(phase_deg + 360.0 * k / n) for k in range(n)]
    return np.array([[radius * math.cos(a), radius * math.sin(a)] for a in angles])


def _rect(w: float, h: float) -> np.ndarray:
    return np.array([[-w / 2, -h / 2], [w / 2, -h / 2], [w / 2, h / 2], [-w / 2, h / 2]])


def _poly(img, px, pts_m, colour):
    paint(img, polygon([px(*p) for p in pts_m]), colour)


def _line(img, px, a_m, b_m, width_m, scale, colour):
    paint(img, line(px(*a_m), px(*b_m), width_m * scale), colour)


def _text(img, px, scale, text, box_m, colour, weight=BOLD):
    """Write ``text`` with its capitals' ink box ``box_m`` = (centre, cap height, width) in metres."""
    centre_m, cap_m, width_m = box_m
    paint(img, legend(text, px(*centre_m), cap_m * scale, width_m * scale, weight), colour)


# Each face starts as its ground colour over the whole texture: the outline is the mesh's edge, and
# texels astride it then hold face colours only (never a blend with what lies beyond the sign).
# The legends' ink boxes are those the signs were first drawn with (to the millimetre), so the
# bundled victims, trained on those renders, see the same letters in the same places.

def _draw_stop(img, px, s):
    img[:] = WHITE
    _poly(img, px, _regular(8, (0.375 - 0.02) / math.cos(math.pi / 8), 22.5), RED)
    _text(img, px, s, "STOP", ((-0.002, -0.026), 0.160, 0.615), WHITE)


def _draw_yield(img, px, s):
    img[:] = RED
    _poly(img, px, YIELD_OUTLINE * 0.52 + np.array([0.0, 0.02]), WHITE)
    _text(img, px, s, "YIELD", ((-0.004, 0.044), 0.063, 0.270), RED)


def _draw_speed(img, px, s):
    img[:] = BLACK
    _poly(img, px, _rect(0.57, 0.72), WHITE)
    _text(img, px, s, "SPEED", ((-0.003, 0.226), 0.085, 0.408), BLACK)
    _text(img, px, s, "LIMIT", ((0.001, 0.096), 0.093, 0.362), BLACK)
    _text(img, px, s, "45", ((-0.007, -0.157), 0.229, 0.404), BLACK, REGULAR)


def _draw_do_not_enter(img, px, s):
    img[:] = WHITE
    paint(img, disc(px(0, 0), 0.35 * s), RED)
    _poly(img, px, _rect(0.52, 0.1), WHITE)
    _text(img, px, s, "DO NOT", ((0.001, 0.147), 0.076, 0.402), WHITE)
    _text(img, px, s, "ENTER", ((0.001, -0.172), 0.080, 0.378), WHITE)


def _draw_pedestrian(img, px, s):
    img[:] = BLACK
    _poly(img, px, DIAMOND_OUTLINE * 0.95, YELLOW)
    paint(img, disc(px(0.02, 0.22), 0.055 * s), BLACK)
    for a, b in [((0.0, 0.15), (-0.03, -0.05)), ((-0.03, -0.05), (-0.14, -0.26)),
                 ((-0.03, -0.05), (0.10, -0.27)), ((0.0, 0.12), (-0.13, 0.0)),
                 ((0.0, 0.12), (0.12, 0.02))]:
        _line(img, px, a, b, 0.045, s, BLACK)


def _draw_keep_right(img, px, s):
    img[:] = BLACK
    _poly(img, px, _rect(0.57, 0.72), WHITE)
    paint(img, ellipse(px(-0.09, -0.12), 0.09 * s, 0.2 * s), BLACK)
    _line(img, px, (0.09, -0.3), (0.09, 0.12), 0.05, s, BLACK)
    _poly(img, px, [(-0.03, 0.10), (0.21, 0.10), (0.09, 0.30)], BLACK)


def _draw_one_way(img, px, s):
    img[:] = BLACK
    shaft = [(-0.38, -0.07), (0.22, -0.07), (0.22, 0.07), (-0.38, 0.07)]
    head = [(0.22, -0.12), (0.40, 0.0), (0.22, 0.12)]
    paint(img, polygons([px(*p) for p in shaft], [px(*p) for p in head]), WHITE)
    _text(img, px, s, "ONE WAY", ((-0.060, -0.011), 0.074, 0.467), BLACK)


def _draw_do_not_pass(img, px, s):
    img[:] = BLACK
    _poly(img, px, _rect(0.57, 0.72), WHITE)
    _text(img, px, s, "DO", ((0.0, 0.185), 0.099, 0.190), BLACK)
    _text(img, px, s, "NOT", ((0.002, -0.017), 0.108, 0.310), BLACK)
    _text(img, px, s, "PASS", ((0.002, -0.218), 0.110, 0.416), BLACK)


def _draw_railroad(img, px, s):
    img[:] = BLACK
    paint(img, disc(px(0, 0), 0.43 * s), YELLOW)
    _line(img, px, (-0.3, 0.3), (0.3, -0.3), 0.05, s, BLACK)
    _line(img, px, (-0.3, -0.3), (0.3, 0.3), 0.05, s, BLACK)
    _text(img, px, s, "R", ((-0.199, -0.019), 0.116, 0.102), BLACK)
    _text(img, px, s, "R", ((0.201, -0.019), 0.116, 0.102), BLACK)


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
            hold the nearest face texel's colour (so bilinear filtering at the edge never bleeds black).
        face_mask: H×W uint8 in {0, 255}, the texels at least half on the face.
        size_m: (width, height) in metres of the area the texture covers.
    """
    lo, hi = design.outline_m.min(0), design.outline_m.max(0)
    w_m, h_m = (float(v) for v in hi - lo)
    scale = TEXTURE_LONG_SIDE_PX / max(w_m, h_m)
    w_px, h_px = int(round(w_m * scale)), int(round(h_m * scale))

    def px(x: float, y: float) -> tuple[float, float]:
        return (float(x) - float(lo[0])) * scale, (float(hi[1]) - float(y)) * scale

    img = np.zeros((h_px, w_px, 3), np.uint8)
    design.draw(img, px, scale)
    inside = mask(polygon([px(*p) for p in design.outline_m]), h_px, w_px)
    return nearest_face_colours(img, inside), inside.astype(np.uint8) * 255, (w_m, h_m)


def nearest_face_colours(img: np.ndarray, inside: np.ndarray, chunk: int = 2048) -> np.ndarray:
    """``img`` with every texel off the face replaced by its nearest face texel (exactly).

    Nearest is the least squared Euclidean distance between texel centres, ties going to the face
    texel that comes first in row-major order. Only the face's rim can be nearest (a texel one step
    closer would be), so the search runs over the rim, in integers, ``chunk`` texels at a time.

    Args:
        img: H×W×C texture.
        inside: H×W bool, the face; it must hold at least one texel.
    """
    if inside.all():
        return img.copy()
    if not inside.any():
        raise ValueError("the face covers no texel")
    out_pad = np.pad(~inside, 1, constant_values=False)          # off the image is never "outside"
    rim = inside & (out_pad[:-2, 1:-1] | out_pad[2:, 1:-1] | out_pad[1:-1, :-2] | out_pad[1:-1, 2:])
    ry, rx = (v.astype(np.int32) for v in np.nonzero(rim))       # row-major: the first minimum wins ties
    oy, ox = (v.astype(np.int32) for v in np.nonzero(~inside))
    out = img.copy()
    for k in range(0, len(oy), chunk):
        y, x = oy[k:k + chunk, None], ox[k:k + chunk, None]
        best = np.argmin((y - ry) ** 2 + (x - rx) ** 2, axis=1)
        out[oy[k:k + chunk], ox[k:k + chunk]] = img[ry[best], rx[best]]
    return out


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
        length = math.hypot(float(e[0]), float(e[1]))
        normals.append((e[1] / length, -e[0] / length, 0.0))
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
