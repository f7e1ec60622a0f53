"""A street around the sign, for drives: road, lane markings, kerbs, verges, buildings, poles, trees, parked
cars and other signs — red ones among them — drawn behind the sign in every frame.

The drives of ``trajectories.py`` pass the sign over a photograph-like background stretched to the frame:
sky and hills, no road. A detector that has never had to find a 9-px sign among poles, cars and other red
signs is not the detector a car runs. A ``Street`` is procedural (no downloads) and fixed by its seed: the
same seed is the same street in every frame of a drive and on every machine.

Geometry, in the sign's coordinates (DESIGN.md: the face centre is the origin, +z towards the oncoming car,
y up; the road ``sign_height_m`` below the face's centre): the car drives along -z in the middle of the right
lane, ``lane_offset_m`` to the left of the sign, so the road's right edge is ``lane_offset_m - lane_width_m/2``
from the sign. To the right of that edge: a kerb, a verge and a sidewalk, then buildings; to the left: the
oncoming lane, a kerb, a sidewalk and buildings. Other signs stand on posts on both sides at least
``clear_m`` up or down the road from the stop sign; parked cars stand on the far side of the road and on the
near side only past the sign (no street object hides the sign: ``occlusion.py`` adds what does).

Drawing: every object is a set of flat polygons, each lit flat by the drive's light (ambient + diffuse ×
cos of the angle between its normal and the light, in the light's colour), clipped to the camera's near
plane, projected through the frame's pinhole and filled far to near (the painter's algorithm) with OpenCV at
1/16-pixel precision; other signs' faces are their drawn textures (``physattack.scene.signs``) warped onto
their projected corners. Only the asked region of the frame is drawn. Sky above the horizon, a graded ground
colour below it. Camera effects apply to the composited frame, as for any drive. A region is the full frame
there up to OpenCV's anti-aliasing of long polygon edges (a pixel along an edge may differ).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import cv2
import numpy as np
import torch
from torch import Tensor

from physattack.errors import InputError, check_range

Region = tuple[int, int, int, int]

#: the other signs a street may show (``physattack.scene.signs.SIGNS`` names); red ones first
DISTRACTORS = ("do_not_enter", "yield_sign", "do_not_pass", "speed_limit_45", "keep_right", "one_way",
               "pedestrian_crossing", "railroad_crossing")
POST = (0.42, 0.43, 0.44)          # a sign post's grey, as the scenes' meshes have it
LANE_WIDTH_M = 3.5                 # each lane of the road (a street's, and what occluders are placed by)
ASPHALT, MARKING, KERB, VERGE, SIDEWALK = (0.30, 0.30, 0.31), (0.85, 0.85, 0.82), (0.62, 0.61, 0.58), \
    (0.30, 0.42, 0.20), (0.55, 0.54, 0.51)
FACADES = ((0.55, 0.30, 0.24), (0.66, 0.62, 0.55), (0.45, 0.44, 0.46), (0.75, 0.70, 0.60), (0.35, 0.38, 0.45),
           (0.60, 0.48, 0.36))
CAR_PAINT = ((0.70, 0.10, 0.10), (0.15, 0.18, 0.45), (0.80, 0.80, 0.80), (0.12, 0.12, 0.12), (0.55, 0.57, 0.60),
             (0.80, 0.65, 0.20))


@dataclass(frozen=True)
class Polygon:
    """A flat polygon: N×3 vertices (metres, the sign's coordinates), its RGB albedo and unit normal; ``wet``: a
    paved surface that holds a film of water in the rain (darker, and a mirror: ``physattack.drive.weather``)."""

    points: np.ndarray
    colour: tuple[float, float, float]
    normal: tuple[float, float, float]
    wet: bool = False


@dataclass(frozen=True)
class SignFace:
    """Another sign on its post: the centre of its face (3, metres; the face looks at the oncoming car) and its
    design's name (``physattack.scene.signs.SIGNS``), whose drawn texture is its face."""

    centre: np.ndarray
    name: str
    heading_rad: float = 0.0           # turned with the road where it bends (``curve.py``)


@dataclass(frozen=True)
class Street:
    """The street of ``seed`` around a sign ``lane_offset_m`` right of the car's path, its face centre
    ``sign_height_m`` above the road.

    Args:
        seed: which street (layout, colours, other signs).
        lane_width_m: each of the two lanes.
        length_m: how far the street reaches ahead of the sign and behind the start of a drive.
        clear_m: no other sign, tree or pole stands within this distance of the stop sign along the road.
        distractors: how many other signs stand along the street.
        curve: a bend and a grade of the road before the sign (``physattack.drive.curve.Curve``); None: straight
            and level.
    """

    seed: int
    lane_offset_m: float
    sign_height_m: float = 2.1
    lane_width_m: float = LANE_WIDTH_M
    length_m: float = 160.0
    clear_m: float = 12.0
    distractors: int = 6
    curve: object = None

    def __post_init__(self) -> None:
        key = "drive.drives.street."
        check_range(key + "lane_width_m", self.lane_width_m, 2.0, 5.0, why="metres per lane")
        check_range(key + "clear_m", self.clear_m, 2.0, why="metres kept free around the sign along the road")
        check_range(key + "distractors", self.distractors, 0, 40, integer=True, why="other signs along the street")
        if self.lane_offset_m < self.lane_width_m / 2 + 0.3:
            raise InputError(f"A lane offset of {self.lane_offset_m:g} m puts the sign on the road (the right lane's "
                             f"edge is {self.lane_width_m / 2:g} m from the car's path): use drive.drives.lane_offsets_m "
                             f">= {self.lane_width_m / 2 + 0.3:g}.")

    @property
    def ground_y(self) -> float:
        return -self.sign_height_m

    @property
    def edge_x(self) -> float:
        """The right edge of the road (the car drives at x = -lane_offset_m)."""
        return -self.lane_offset_m + self.lane_width_m / 2

    def polygons(self) -> tuple[list[Polygon], list[SignFace]]:
        return _bent(self) if self.curve is not None else _layout(self)


def _quad(x0, x1, y0, y1, z0, z1, colour, normal) -> Polygon:
    """An axis-aligned rectangle: on the ground (y0 == y1), facing the road (x0 == x1) or the car (z0 == z1)."""
    if y0 == y1:
        pts = [[x0, y0, z0], [x1, y0, z0], [x1, y0, z1], [x0, y0, z1]]
    elif x0 == x1:
        pts = [[x0, y0, z0], [x0, y1, z0], [x0, y1, z1], [x0, y0, z1]]
    else:
        pts = [[x0, y0, z0], [x1, y0, z0], [x1, y1, z0], [x0, y1, z0]]
    return Polygon(np.asarray(pts, dtype=np.float64), tuple(colour), tuple(normal))


def _paved(polygon: Polygon) -> Polygon:
    """``polygon`` as a paved surface, which holds a film of water in the rain."""
    return replace(polygon, wet=True)


def _jitter(colour, rng: np.random.Generator, amount: float = 0.08) -> tuple[float, float, float]:
    return tuple(float(np.clip(c * (1 + rng.uniform(-amount, amount)), 0, 1)) for c in colour)


def _box(x0, x1, y0, y1, z0, z1, colour, road_side: str) -> list[Polygon]:
    """The faces of a box a car on the road can see: the one towards the car (+z) and the one towards the road,
    and its top."""
    towards_road = (x0, -1.0) if road_side == "right" else (x1, 1.0)
    return [_quad(x0, x1, y0, y1, z1, z1, colour, (0, 0, 1)),
            _quad(towards_road[0], towards_road[0], y0, y1, z0, z1, tuple(0.85 * c for c in colour),
                  (towards_road[1], 0, 0)),
            _quad(x0, x1, y1, y1, z0, z1, tuple(0.9 * c for c in colour), (0, 1, 0))]


@functools.lru_cache(maxsize=64)
def _layout(street: Street) -> tuple[list[Polygon], list[SignFace]]:
    rng = np.random.default_rng(street.seed)
    g, e, w, L = street.ground_y, street.edge_x, street.lane_width_m, street.length_m
    z_far, z_near = -L, L
    polys: list[Polygon] = []
    left = e - 2 * w                                                  # the oncoming lane's left edge
    polys.append(_paved(_quad(left, e, g, g, z_far, z_near, _jitter(ASPHALT, rng), (0, 1, 0))))
    polys.append(_paved(_quad(e - 0.25, e - 0.1, g, g, z_far, z_near, MARKING, (0, 1, 0))))        # edge line
    polys.append(_paved(_quad(left + 0.1, left + 0.25, g, g, z_far, z_near, MARKING, (0, 1, 0))))
    centre = e - w
    yellow = (0.85, 0.70, 0.15)
    for z in np.arange(z_far, z_near, 9.0):                                                          # dashed centre
        polys.append(_paved(_quad(centre - 0.06, centre + 0.06, g, g, z, z + 3.0, yellow, (0, 1, 0))))
    polys.append(_paved(_quad(centre, e - 0.1, g, g, -1.6, -1.1, MARKING, (0, 1, 0))))            # stop line
    kerb_h = 0.15
    for side, x_road, sign in (("right", e, 1.0), ("left", left, -1.0)):
        x_kerb = x_road + sign * 0.2
        polys.append(_quad(x_road, x_road, g, g + kerb_h, z_far, z_near, KERB, (-sign, 0, 0)))
        polys.append(_paved(_quad(min(x_road, x_kerb), max(x_road, x_kerb), g + kerb_h, g + kerb_h, z_far, z_near,
                                  KERB, (0, 1, 0))))
        verge = rng.uniform(1.0, 3.0)
        x_verge = x_kerb + sign * verge
        polys.append(_quad(min(x_kerb, x_verge), max(x_kerb, x_verge), g + kerb_h, g + kerb_h, z_far, z_near,
                           _jitter(VERGE, rng), (0, 1, 0)))
        x_walk = x_verge + sign * 2.0
        polys.append(_paved(_quad(min(x_verge, x_walk), max(x_verge, x_walk), g + kerb_h, g + kerb_h, z_far, z_near,
                                  _jitter(SIDEWALK, rng), (0, 1, 0))))
        x_set = max(x_walk + sign * rng.uniform(1.0, 6.0), 1.5) if side == "right" else x_walk - rng.uniform(1.0, 6.0)
        polys.append(_quad(min(x_walk, x_set + sign * 40), max(x_walk, x_set + sign * 40), g + kerb_h, g + kerb_h,
                           z_far, z_near, _jitter(VERGE, rng, 0.2), (0, 1, 0)))                      # yards, lots
        z = z_near
        while z > z_far:                                                                             # buildings
            width = rng.uniform(8.0, 25.0)
            if rng.uniform() < 0.75:
                depth, height = rng.uniform(8.0, 15.0), rng.uniform(4.0, 16.0)
                x0, x1 = (x_set, x_set + depth) if side == "right" else (x_set - depth, x_set)
                colour = _jitter(FACADES[rng.integers(len(FACADES))], rng)
                polys += _box(x0, x1, g, g + height, z - width, z, colour, side)
                for row in np.arange(g + 1.2, g + height - 1.0, 3.0):                               # windows
                    for col in np.arange(z - width + 1.0, z - 1.5, 3.0):
                        xf = x0 - 0.02 if side == "right" else x1 + 0.02
                        polys.append(_quad(xf, xf, row, row + 1.4, col, col + 1.5, (0.18, 0.22, 0.28),
                                           (-sign, 0, 0)))
            z -= width + rng.uniform(0.0, 6.0)
        for z in np.arange(z_near - rng.uniform(0, 20), z_far, -rng.uniform(18.0, 35.0)):            # poles, trees
            if abs(z) < street.clear_m:
                continue
            x = _clear_of_view(x_verge - sign * 0.5, z, side, street)
            if rng.uniform() < 0.5:
                h = rng.uniform(7.0, 10.0)
                polys.append(_quad(x - 0.12, x + 0.12, g, g + h, z, z, (0.42, 0.36, 0.30), (0, 0, 1)))
                polys.append(_quad(x - 1.0, x + 1.0, g + h - 0.6, g + h - 0.45, z, z, (0.35, 0.30, 0.25), (0, 0, 1)))
            else:
                h, r = rng.uniform(3.5, 5.0), rng.uniform(1.5, 3.0)      # the crown above any sight line
                polys.append(_quad(x - 0.15, x + 0.15, g, g + h, z, z, (0.35, 0.25, 0.16), (0, 0, 1)))
                a = np.linspace(0, 2 * np.pi, 12, endpoint=False)
                crown = np.stack([x + r * np.cos(a), g + h + r + 0.9 * r * np.sin(a), np.full(12, z - 0.01)], 1)
                polys.append(Polygon(crown, _jitter((0.20, 0.38, 0.16), rng, 0.2), (0, 0, 1)))
    for z in np.arange(z_near - rng.uniform(0, 10), z_far, -rng.uniform(6.0, 14.0)):                # parked cars
        near_side = rng.uniform() < 0.5
        if near_side and z > -8.0:
            continue                                 # never between the car and the stop sign
        if rng.uniform() < 0.4:
            continue
        length, height = rng.uniform(4.0, 5.2), rng.uniform(1.4, 1.9)
        x0, x1 = (e - 2.1, e - 0.3) if near_side else (left + 0.3, left + 2.1)
        colour = _jitter(CAR_PAINT[rng.integers(len(CAR_PAINT))], rng)
        polys += _box(x0, x1, g + 0.3, g + height, z - length, z, colour, "right" if near_side else "left")
        polys.append(_quad(x0 + 0.1, x1 - 0.1, g + 0.95, g + height - 0.1, z + 0.005, z + 0.005, (0.15, 0.18, 0.22),
                           (0, 0, 1)))                                                              # rear window
        polys.append(_quad(x0, x1, g, g + 0.3, z, z, (0.05, 0.05, 0.05), (0, 0, 1)))                 # wheels' shadow
    faces: list[SignFace] = []
    spots = [z for z in rng.uniform(z_far * 0.6, z_near * 0.7, size=street.distractors * 3)
             if abs(z) >= street.clear_m][:street.distractors]
    for i, z in enumerate(spots):
        name = DISTRACTORS[rng.integers(len(DISTRACTORS))] if i else DISTRACTORS[rng.integers(3)]  # one red at least
        on_right = rng.uniform() < 0.6
        x = _clear_of_view(e + rng.uniform(0.8, 3.0), z, "right", street) if on_right else left - rng.uniform(0.8, 3.0)
        polys.append(_quad(x - 0.04, x + 0.04, g, 0.0, z - 0.02, z - 0.02, (0.55, 0.55, 0.57), (0, 0, 1)))  # post
        faces.append(SignFace(np.asarray([x, 0.0, z]), name))
    return polys, faces


@functools.lru_cache(maxsize=16)
def _bent(street: Street) -> tuple[list[Polygon], list[SignFace]]:
    return street.curve.polygons(*_layout(street))


def _clear_of_view(x: float, z: float, side: str, street: Street) -> float:
    """``x`` moved behind the stop sign's line (x >= 0.6 m) for an object on the right that stands before the sign
    or near it (z > -clear_m): the car's line of sight to the sign runs at x < 0, so nothing there can hide it."""
    return max(x, 0.6) if side == "right" and z > -street.clear_m else x


@functools.lru_cache(maxsize=16)
def _sign_face(name: str) -> tuple[np.ndarray, tuple[float, float]]:
    """A sign's face as H×W×4 float32 (RGB, alpha) and its size in metres."""
    from physattack.scene.signs import SIGNS, draw_texture

    texture, mask, size_m = draw_texture(SIGNS[name])
    scale = 256 / max(texture.shape[:2])
    dsize = (round(texture.shape[1] * scale), round(texture.shape[0] * scale))
    rgb = cv2.resize(texture, dsize, interpolation=cv2.INTER_AREA).astype(np.float32) / 255
    alpha = cv2.resize(mask, dsize, interpolation=cv2.INTER_AREA).astype(np.float32) / 255
    return np.concatenate([rgb, alpha[..., None]], 2), size_m


def _shade(normal, lights: dict) -> np.ndarray:
    az, el = math.radians(lights["light_azimuth_deg"]), math.radians(lights["light_elevation_deg"])
    direction = np.array([math.cos(el) * math.sin(az), math.sin(el), math.cos(el) * math.cos(az)])
    lit = lights["ambient"] + lights["diffuse"] * max(0.0, float(np.dot(normal, direction)))
    return lit * lights["color"]


def _retro(headlights, camera_from_face: np.ndarray) -> np.ndarray:
    """RGB gain of sheeting at a face seen from ``camera_from_face`` (metres) in the car's headlights."""
    from physattack.eot.params import color_temperature_rgb

    retro, _ = headlights.gains(torch.tensor(camera_from_face[None], dtype=torch.float32))
    tint = color_temperature_rgb(torch.tensor([headlights.color_temp_k]))[0].numpy()
    return headlights.exposure * float(retro[0]) * tint


def _clip_near(cam: np.ndarray, near: float) -> np.ndarray:
    """Sutherland-Hodgman: the part of a polygon (N×3, camera coordinates) with z >= ``near``."""
    out = []
    for i in range(len(cam)):
        a, b = cam[i], cam[(i + 1) % len(cam)]
        ina, inb = a[2] >= near, b[2] >= near
        if ina:
            out.append(a)
        if ina != inb:
            t = (near - a[2]) / (b[2] - a[2])
            out.append(a + t * (b - a))
    return np.asarray(out)


def project_polygon(points: np.ndarray, R: np.ndarray, T: np.ndarray, focal_px: float, principal_px, size,
                    near: float = 0.3):
    """A polygon (N×3 world metres) through a pinhole (world-to-camera ``R``, ``T``; ``principal_px`` in the drawn
    image's pixels, ``size`` its (w, h)), clipped to the ``near`` plane: its vertices in pixels (M×2), its
    farthest and its mean depth; None when nothing of it lies in front of the camera and inside the image."""
    cam = points @ R.T + T
    if (cam[:, 2] < near).all():
        return None
    cam = _clip_near(cam, near)
    if len(cam) < 3:
        return None
    cx, cy = principal_px
    uv = np.stack([focal_px * cam[:, 0] / cam[:, 2] + cx, focal_px * cam[:, 1] / cam[:, 2] + cy], 1)
    if uv[:, 0].max() < 0 or uv[:, 0].min() > size[0] or uv[:, 1].max() < 0 or uv[:, 1].min() > size[1]:
        return None
    return uv, float(cam[:, 2].max()), float(cam[:, 2].mean())


@dataclass(frozen=True)
class Pinhole:
    """One frame's camera: world-to-camera ``R`` (3×3) and ``T`` (3), a focal length and a principal point in
    full-frame pixels."""

    R: np.ndarray
    T: np.ndarray
    focal_px: float
    principal_px: tuple[float, float]


def render_street(street: Street, camera: Pinhole, region: Region, lights: dict, weather=None,
                  headlights=None, reflections: bool = False):
    """The street as one frame's ``camera`` sees it through ``region`` (x0, y0, x1, y1), under ``lights``
    (a lighting preset's fields and its ``color``, RGB), through ``weather``'s fog if it has one
    (``physattack.drive.weather``: each pixel by its depth) and on its wet street if it has one (the paved
    surfaces darker and mirroring the street and the sky). At night, in the car's ``headlights``
    (``physattack.eot.night``), the other signs' faces retroreflect as the stop sign's does. Returns h×w×3 float32
    in [0, 1]; with ``reflections``, also the wet road's mirror weight (h×w: 0 where nothing is wet) and the mirror
    it shows (h×w×3, the street upside down, blurred and fogged), for what the street does not hold (the sign)."""
    from physattack.drive.weather import WET_DARKENING, airlight, road_gloss, streak_px, transmission

    wet = weather is not None and weather.wet
    image, depth, wet_mask, horizon = _draw(street, camera, region, lights, weather, headlights,
                                            darken=WET_DARKENING if wet else 1.0)
    foggy = weather is not None and weather.visibility_m is not None
    haze = airlight(lights["ambient"], lights["diffuse"], lights["color"])
    if foggy:
        t = transmission(depth, weather)[..., None]
        image = image * t + haze * (1 - t)
    if not wet:
        image = np.clip(image, 0, 1)
        return (image, np.zeros(image.shape[:2], np.float32), np.zeros_like(image)) if reflections else image
    focal = camera.focal_px
    sy, sx, py, px = streak_px(focal)                # the blur reads this far: drawn, so a region is the frame
    x0, y0, x1, y1 = region
    mirror, mirror_depth, _, _ = _draw(street, camera, (x0 - px, y0 - py, x1 + px, y1 + py), lights, weather,
                                       headlights, mirror=True)
    if foggy:                                         # the reflected light's whole path: the mirrored depth
        t = transmission(mirror_depth, weather)[..., None]
        mirror = mirror * t + haze * (1 - t)
    mirror = cv2.GaussianBlur(mirror, (0, 0), sigmaX=sx, sigmaY=sy, borderType=cv2.BORDER_REPLICATE)
    mirror = np.ascontiguousarray(mirror[py:py + y1 - y0, px:px + x1 - x0])
    rows = np.arange(y1 - y0, dtype=np.float64) + 0.5
    gloss = road_gloss(rows, horizon, focal, weather)[:, None] * wet_mask
    image = np.clip(image + gloss[..., None] * mirror, 0, 1)
    return (image, gloss, mirror) if reflections else image


def _draw(street: Street, camera: Pinhole, region: Region, lights: dict, weather, headlights, darken: float = 1.0,
          mirror: bool = False):
    """The street's polygons and other signs painted far to near through ``region``, before fog: h×w×3 float32, the
    depth of each pixel (h×w, metres; inf for the sky; only in fog), where the paved surfaces show (h×w, 1 or 0) and
    the horizon's row. ``darken``: the paved surfaces' albedo factor (wet); ``mirror``: the street reflected in the
    road (everything above the ground upside down below it, lit as it is; the ground itself left out, the sky above
    it reflected into it)."""
    from physattack.drive.weather import airlight

    R, T, focal_px = camera.R, camera.T, camera.focal_px
    x0, y0, x1, y1 = region
    h, w = y1 - y0, x1 - x0
    cx, cy = camera.principal_px[0] - x0, camera.principal_px[1] - y0
    sky_lit = float(np.clip(lights["ambient"] + 0.5 * lights["diffuse"], 0.02, 1.3))
    forward = R[2]                                                   # the optical axis in world coordinates
    horizon = cy - focal_px * forward[1] / max(1e-6, math.hypot(forward[0], forward[2]))
    rows = np.arange(h, dtype=np.float32)[:, None] + 0.5
    haze = airlight(lights["ambient"], lights["diffuse"], lights["color"])
    sky = np.array([0.62, 0.74, 0.90], np.float32) * sky_lit * lights["color"]
    if mirror:                                                       # the sky, upside down below the horizon
        t = np.sqrt(np.clip(np.abs(rows - horizon) / (0.6 * focal_px), 0, 1))[..., None]
        image = haze * (1 - t) + sky * t * np.ones((1, w, 1), np.float32)
    else:
        above = np.clip((horizon - rows) / (0.6 * focal_px), 0, 1)          # by the angle above the horizon
        ground = np.array([0.33, 0.38, 0.28], np.float32) * sky_lit * lights["color"]
        t = np.sqrt(above)[..., None]
        image = np.where((rows < horizon)[..., None], haze * (1 - t) + sky * t,
                         ground[None, None, :] * np.ones((h, 1, 1)))
    image = np.ascontiguousarray(np.broadcast_to(image, (h, w, 3)), dtype=np.float32)
    foggy = weather is not None and weather.visibility_m is not None
    depth = None
    if foggy and mirror:
        depth = np.full((h, w), np.inf, np.float32)
    elif foggy:                  # depth: the ground plane's below the horizon (a level camera), the sky's infinite
        lens_height = float((-R.T @ T)[1]) - street.ground_y
        depth = np.where(rows > horizon + 1e-3, lens_height * focal_px / np.maximum(rows - horizon, 1e-3), np.inf)
        depth = np.ascontiguousarray(np.broadcast_to(depth, (h, w)), dtype=np.float32)
    paved = np.zeros((h, w), np.float32)
    flip = np.array([1.0, -1.0, 1.0])
    ground_y = street.ground_y

    def placed(points: np.ndarray) -> np.ndarray:             # the mirror's points: reflected about the ground
        return points * flip + np.array([0.0, 2 * ground_y, 0.0]) if mirror else points

    near = 0.3
    polys, faces = street.polygons()
    items = []
    for p in polys:
        if mirror and p.normal[1] and p.points[:, 1].max() < ground_y + 0.5:     # the ground does not mirror itself
            continue
        projected = project_polygon(placed(p.points), R, T, focal_px, (cx, cy), (w, h), near)
        if projected is None:
            continue
        uv, far, mean = projected
        albedo = np.asarray(p.colour) * (darken if p.wet else 1.0)
        items.append((far, 0, uv, (np.clip(albedo * _shade(p.normal, lights), 0, 1),
                                   None if p.normal[1] and not mirror else mean, p.wet)))
    for f in faces:
        rgba, size_m = _sign_face(f.name)
        hw, hh = size_m[0] / 2, size_m[1] / 2
        across = np.array([math.cos(f.heading_rad), 0.0, -math.sin(f.heading_rad)])
        corners = np.array([[-hw, hh], [hw, hh], [hw, -hh], [-hw, -hh]]) @ np.stack([across, [0, 1.0, 0]])
        world = placed(f.centre + corners)
        cam = world @ R.T + T
        if (cam[:, 2] < near).any():
            continue
        uv = np.stack([focal_px * cam[:, 0] / cam[:, 2] + cx, focal_px * cam[:, 1] / cam[:, 2] + cy], 1)
        if uv[:, 0].max() < 0 or uv[:, 0].min() > w or uv[:, 1].max() < 0 or uv[:, 1].min() > h:
            continue
        light = _shade((math.sin(f.heading_rad), 0.0, math.cos(f.heading_rad)), lights)
        if headlights is not None:
            light = light + _retro(headlights, -R.T @ T - f.centre)
        items.append((float(cam[:, 2].max()) - 0.01, 1, uv, (rgba, light)))
    for far, kind, uv, paint in sorted(items, key=lambda it: -it[0]):
        if kind == 0:
            pts = np.round((uv - 0.5) * 16).astype(np.int32)            # pixel i's centre at i + 0.5; 1/16 px
            cv2.fillPoly(image, [pts], tuple(float(c) for c in paint[0]), lineType=cv2.LINE_AA, shift=4)
            cv2.fillPoly(paved, [pts], float(paint[2]), lineType=cv2.LINE_8, shift=4)
            if depth is not None and paint[1] is not None:              # a standing surface: its own depth
                cv2.fillPoly(depth, [pts], paint[1], lineType=cv2.LINE_8, shift=4)
        else:
            cover = _paste_face(image, paint[0], paint[1], uv)
            if cover is not None:
                win, alpha = cover
                paved[win[1]:win[3], win[0]:win[2]][alpha > 0.5] = 0.0
                if depth is not None:
                    depth[win[1]:win[3], win[0]:win[2]][alpha > 0.5] = far
    return image, depth, paved, horizon


def _paste_face(image: np.ndarray, rgba: np.ndarray, light: np.ndarray, corners: np.ndarray):
    from physattack.drive.footage import warp_texture

    h, w = image.shape[:2]
    win = (max(0, math.floor(corners[:, 0].min()) - 1), max(0, math.floor(corners[:, 1].min()) - 1),
           min(w, math.ceil(corners[:, 0].max()) + 1), min(h, math.ceil(corners[:, 1].max()) + 1))
    if win[2] <= win[0] or win[3] <= win[1]:
        return None
    warped = warp_texture(rgba, corners, win)
    alpha = warped[..., 3:4]
    dst = image[win[1]:win[3], win[0]:win[2]]
    dst[:] = np.clip(warped[..., :3] * light, 0, 1) * alpha + dst * (1 - alpha)
    return win, alpha[..., 0]


def light_fields(lights, i: int, yaw_deg: float = 0.0) -> dict:
    """View ``i`` of ``lights`` (``physattack.render.shade.Lights``, in the sign's coordinates) as the fields flat
    polygons are lit by (``_shade``), in the road's coordinates: the sign is turned ``yaw_deg`` on its post."""
    d = lights.direction[i].cpu().numpy()
    return {"ambient": float(lights.ambient[i]), "diffuse": float(lights.diffuse[i]),
            "color": lights.color[i].cpu().numpy().astype(np.float32),
            "light_elevation_deg": math.degrees(math.asin(float(np.clip(d[1], -1, 1)))),
            "light_azimuth_deg": math.degrees(math.atan2(float(d[0]), float(d[2]))) - yaw_deg}


def street_backdrop(street: Street, cameras, region: Region, lights, weather=None, headlights=None,
                    yaw_deg: float = 0.0, reflections: bool = False):
    """B×3×h×w: ``street`` behind B frames seen by ``cameras`` (``physattack.render.camera.Cameras`` of the full
    frame, in the road's coordinates), lit by ``lights`` (``physattack.render.shade.Lights``, in the coordinates of a
    sign turned ``yaw_deg`` on its post), through ``weather``'s fog, on its wet street. With ``reflections``, also the
    wet road's mirror weight (B×1×h×w) and its mirror (B×3×h×w) (``render_street``)."""
    out = []
    for i in range(len(cameras)):
        light = light_fields(lights, i, yaw_deg)
        pinhole = Pinhole(cameras.R[i].double().cpu().numpy(), cameras.T[i].double().cpu().numpy(),
                          float(cameras.focal_px[i]), tuple(float(v) for v in cameras.principal_px[i]))
        drawn = render_street(street, pinhole, region, light, weather, headlights, reflections)
        out.append(torch.cat([torch.from_numpy(np.atleast_3d(a)).permute(2, 0, 1) for a in drawn])
                   if reflections else torch.from_numpy(drawn).permute(2, 0, 1))
    out = torch.stack(out)
    return tuple(part.clone() for part in out.split([3, 1, 3], 1)) if reflections else out  # own storage: drawn over


#: streets of these seeds and above are the held-out drives' (``drive.drives.street_seed``); EOT draws below them
HELD_OUT_STREETS = 50_000


def street_backgrounds(count: int, seed: int = 0, size: int = 256) -> Tensor:
    """``count`` views of training streets around where the sign stands, without it, as count×3×size×size images
    for a background bank: street ``seed + i`` (all below ``HELD_OUT_STREETS``), a random lane offset (2.5-8 m),
    distance (10-80 m) and grid light, seen from the dashcam's place over a square ``4-10`` sign widths wide around
    the sign's centre."""
    from physattack.drive.trajectories import Dashcam
    from physattack.eot.grid import LIGHTING_PRESETS
    from physattack.eot.params import color_temperature_rgb

    check_range("eot.backgrounds.streets", count, 0, integer=True, why="street views in the training bank")
    if count and seed + count > HELD_OUT_STREETS:
        raise InputError(f"eot.backgrounds.street_seed + streets must stay below {HELD_OUT_STREETS} (the held-out "
                         f"drives' streets start there); got {seed} + {count}.")
    rng = np.random.default_rng(seed)
    names = list(LIGHTING_PRESETS)
    out = []
    for i in range(count):
        offset, distance = rng.uniform(2.5, 8.0), rng.uniform(10.0, 80.0)
        street = Street(seed + i, offset)
        camera = np.array([-offset, 1.4 - street.sign_height_m, distance])
        cam = Dashcam().cameras(torch.tensor(camera[None], dtype=torch.float64))      # the drives' camera, level
        R, T = cam.R[0].numpy(), cam.T[0].numpy()
        preset = LIGHTING_PRESETS[names[rng.integers(len(names))]]
        light = {**preset, "color": color_temperature_rgb(torch.tensor([preset["color_temp_k"]]))[0].numpy()}
        widths = rng.uniform(4.0, 10.0)
        focal = size / widths * distance / 0.75                          # the square spans ``widths`` sign widths
        cam_centre = R @ (-camera)                                       # the sign's centre in camera coordinates
        principal = (size / 2 - focal * cam_centre[0] / cam_centre[2], size / 2 - focal * cam_centre[1] / cam_centre[2])
        image = render_street(street, Pinhole(R, T, focal, principal), (0, 0, size, size), light)
        out.append(torch.from_numpy(image).permute(2, 0, 1))
    return torch.stack(out) if out else torch.zeros(0, 3, size, size)


def bank_with_streets(count: int = 48, seed: int = 0, folder=None, streets: int = 0, street_seed: int = 0):
    """A ``physattack.eot.BackgroundBank`` (``count`` procedural backgrounds of ``seed``, the photos of ``folder``)
    with ``streets`` views of training streets added (``street_backgrounds``). ``streets=0`` is the bank alone."""
    from physattack.eot.backgrounds import BackgroundBank

    bank = BackgroundBank(count, seed, folder)
    if streets:
        bank.images = torch.cat([bank.images, street_backgrounds(streets, street_seed, bank.images.shape[-1])])
    return bank


__all__ = ["DISTRACTORS", "HELD_OUT_STREETS", "Pinhole", "Polygon", "SignFace", "Street", "bank_with_streets",
           "light_fields", "project_polygon", "render_street", "street_backdrop", "street_backgrounds"]
