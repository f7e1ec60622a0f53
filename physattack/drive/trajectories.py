"""Drives: a dashcam approaching a roadside sign, as full frames in time order.

A crop or a context frame (``frames.py``) asks "is this view of the sign read right?". A safety
engineer asks per drive: *did the car recognise the sign in time to stop?* (Lu et al. 2017, "NO Need
to Worry about Adversarial Examples in Object Detection in Autonomous Vehicles"; Eykholt et al.,
WOOT'18, answered with video). A drive is a ``Dashcam`` (sensor, field of view, mounting height,
pitch) on a car driving straight at ``speed_kmh`` past a sign ``lane_offset_m`` to the right of the
camera's path, from ``start_m`` down the road until the sign leaves the frame; light, camera effects
and background stay the same over a drive.

Geometry, in the sign's coordinates (DESIGN.md: the face centre is the origin, the face normal +z,
y up): the sign faces the oncoming car; the camera drives along -z at x = -lane_offset_m, at
``dashcam.height_m - sign_height_m`` in y. Seen from the sign the camera's azimuth is therefore
negative (towards -x, the face's left-hand edge as the driver sees it) and grows in size as the car
nears it; the sign moves right and up in the frame and leaves it, usually through the right edge.

How the frames are drawn (the sign in a window at true resolution, over the street or a background image, with
light, weather, occlusion, exposure and the camera's effects) is ``render.py``'s ``DriveRenderer``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from physattack.drive.curve import Curve
from physattack.drive.glare import SUN_AHEAD, Glare
from physattack.eot.night import Headlights
from physattack.drive.occlusion import OCCLUSION
from physattack.drive.weather import WEATHER
from physattack.eot.grid import CAMERA_EFFECT_PRESETS, LIGHTING_PRESETS, _check_presets
from physattack.eot.params import SceneParams
from physattack.eot.sampler import ViewSampler, _uniform, sensor_pixels
from physattack.errors import InputError, check_interval, check_range, check_values
from physattack.render.camera import Cameras

Range = tuple[float, float]
Region = tuple[int, int, int, int]

#: the light of a drive: the held-out grid's presets (``LIGHTING_PRESETS``), and four that only drives have (the
#: approach EOT draws dusk and night when ``eot.sampler.conditions`` asks, ``physattack.drive.conditions``): dusk,
#: night in the car's own headlights (``physattack.eot.night``), night on a lit
#: street (the headlights, and street lamps overhead: 4000-K LEDs from high above the road, which light sheeting and
#: print alike, since the sheeting returns their light towards the lamps, not the camera) and a low sun ahead,
#: behind the sign, with its glare (``physattack.drive.glare``)
DRIVE_LIGHTS: dict[str, dict[str, float]] = {
    **LIGHTING_PRESETS,
    "dusk": {"ambient": 0.22, "diffuse": 0.12, "light_azimuth_deg": -80.0, "light_elevation_deg": 2.0,
             "color_temp_k": 3300.0},
    "night": {"ambient": 0.03, "diffuse": 0.0, "light_azimuth_deg": 0.0, "light_elevation_deg": 60.0,
              "color_temp_k": 6500.0},
    "night_lit": {"ambient": 0.08, "diffuse": 0.22, "light_azimuth_deg": -20.0, "light_elevation_deg": 65.0,
                  "color_temp_k": 4000.0},
    "sun_ahead": SUN_AHEAD,
}
NIGHT_LIGHTS = ("night", "night_lit")       # the car's headlights are on


def braking_distance_m(speed_kmh: float, reaction_s: float, decel_mps2: float) -> float:
    """Distance a car at ``speed_kmh`` covers before it stands still: reaction, then constant
    deceleration, ``v·t_r + v²/(2a)`` (50 km/h, 1.0 s, 6 m/s² -> 30.0 m)."""
    v = speed_kmh / 3.6
    return v * reaction_s + v * v / (2 * decel_mps2)


@dataclass(frozen=True)
class Dashcam:
    """A forward-looking pinhole camera on the car.

    Args:
        width_px, height_px: the sensor's resolution (1920×1080: a common dashcam).
        hfov_deg: horizontal field of view (90°: a 960-px focal length at 1920 px).
        height_m: the lens's height above the road.
        pitch_deg: the optical axis's angle above the horizontal (negative looks down).
        auto_exposure: expose each frame for the whole frame (``physattack.drive.render.DriveRenderer.exposure_gains``): its gain brings
            the frame's mean luminance to ``exposure_target``, within ``exposure_range`` (the shutter and gain a
            dashcam has); what the gain lifts past white clips (the sensor's limited dynamic range). False: the
            fixed exposure of the light presets (and of night, ``physattack.eot.night``).
        auto_white_balance: grey world on the same metering (``physattack.drive.render.DriveRenderer.white_balance``): each channel's mean
            brought to the frame's mean luminance, so a street under 4000-K lamps is not orange.
        highlights: ``clip`` (a plain sensor: past white every channel clips) or ``rolloff`` (an HDR camera's tone
            curve: the luminance above ``knee`` is compressed towards white, the channels scaled with it, so a
            headlit red face stays red where ``clip`` turns it white).
    """

    width_px: int = 1920
    height_px: int = 1080
    hfov_deg: float = 90.0
    height_m: float = 1.4
    pitch_deg: float = 0.0
    auto_exposure: bool = False
    auto_white_balance: bool = False
    exposure_target: float = 0.4
    exposure_range: tuple[float, float] = (0.25, 8.0)
    highlights: str = "clip"
    knee: float = 0.8

    def __post_init__(self) -> None:
        key = "dashcam."
        if self.highlights not in ("clip", "rolloff"):
            raise InputError(f"dashcam.highlights must be clip or rolloff, not {self.highlights!r}.")
        check_range(key + "knee", self.knee, 0.0, 1.0, lo_open=True, hi_open=True,
                    why="the luminance above which rolloff compresses highlights")
        check_range(key + "exposure_target", self.exposure_target, 0.0, 1.0, lo_open=True,
                    why="the mean luminance auto-exposure aims each frame at, in [0, 1]")
        object.__setattr__(self, "exposure_range", check_interval(
            key + "exposure_range", self.exposure_range, 0.0, lo_open=True,
            why="the smallest and largest gain auto-exposure may apply"))
        check_range(key + "width_px", self.width_px, 16, integer=True, why="the sensor's width in pixels")
        check_range(key + "height_px", self.height_px, 16, integer=True, why="the sensor's height in pixels")
        check_range(key + "hfov_deg", self.hfov_deg, 0.0, 170.0, lo_open=True, hi_open=False,
                    why="the horizontal field of view in degrees")
        check_range(key + "height_m", self.height_m, 0.0, lo_open=True, why="the lens's height above the road, metres")
        check_range(key + "pitch_deg", self.pitch_deg, -45.0, 45.0, why="degrees above the horizontal")

    @property
    def focal_px(self) -> float:
        return (self.width_px / 2) / math.tan(math.radians(self.hfov_deg) / 2)

    @property
    def size(self) -> tuple[int, int]:
        """(H, W) of a full frame."""
        return self.height_px, self.width_px

    def scaled(self, factor: float) -> "Dashcam":
        """The same camera with ``factor`` times the pixels per side (same field of view)."""
        return replace(self, width_px=max(16, round(self.width_px * factor)),
                       height_px=max(16, round(self.height_px * factor)))

    def cameras(self, positions_m: Tensor, window: Region | None = None, yaw_deg: float = 0.0,
                heading_deg: Tensor | None = None, slope_deg: Tensor | None = None) -> Cameras:
        """Cameras at ``positions_m`` (T×3, the sign's coordinates) looking down the road (-z of the road, which is
        the sign's when the sign is not turned on its post; ``yaw_deg``: see ``turn``), or where the car heads on a
        bend (``heading_deg``, T, in the road's coordinates: ``physattack.drive.curve``) and pitched with its grade
        (``slope_deg``, T), seeing the full frame or its ``window`` (x0, y0, x1, y1 in pixels)."""
        t = positions_m.shape[0]
        dt, dev = positions_m.dtype, positions_m.device
        p = math.radians(self.pitch_deg)
        right = torch.tensor([1.0, 0.0, 0.0], dtype=dt, device=dev)
        forward = torch.tensor([0.0, math.sin(p), -math.cos(p)], dtype=dt, device=dev)
        down = torch.linalg.cross(forward, right)
        R = torch.stack([right, down, forward]) @ turn(-yaw_deg).to(dt).to(dev)
        R = R.expand(t, 3, 3).contiguous()
        if heading_deg is not None or slope_deg is not None:   # the car turned and pitched on the road, then the
            zero = torch.zeros(t, dtype=dt, device=dev)        # road into the sign's coordinates
            pitch = p + (zero if slope_deg is None else torch.deg2rad(slope_deg.to(dt).to(dev)))
            forward = torch.stack([zero, torch.sin(pitch), -torch.cos(pitch)], -1)
            base = torch.stack([right.expand(t, 3), torch.linalg.cross(forward, right.expand(t, 3)), forward], 1)
            heading = zero if heading_deg is None else heading_deg.to(dt).to(dev)
            R = base @ turns(-heading) @ turn(-yaw_deg).to(dt).to(dev)
        T = -(R @ positions_m.unsqueeze(-1)).squeeze(-1)
        x0, y0, x1, y1 = window if window is not None else (0, 0, self.width_px, self.height_px)
        principal = torch.tensor([self.width_px / 2 - x0, self.height_px / 2 - y0], dtype=dt, device=dev)
        return Cameras(R=R, T=T, focal_px=torch.full((t,), self.focal_px, dtype=dt, device=dev),
                       principal_px=principal.expand(t, 2).contiguous(), image_size=(y1 - y0, x1 - x0))

    def vanishing_point(self) -> tuple[float, float]:
        """Where the road's direction meets the frame, (u, v) in pixels."""
        return self.width_px / 2, self.height_px / 2 - self.focal_px * math.tan(math.radians(self.pitch_deg))


def turn(yaw_deg: float) -> Tensor:
    """3×3: a turn by ``yaw_deg`` about the vertical (y), +z towards +x. A sign turned ``yaw_deg`` on its post (its
    face towards the road for a positive angle: the road is at -x) has ``p_sign = turn(yaw_deg) @ p_road`` for
    the road's coordinates (origin at the face centre, -z down the road)."""
    a = math.radians(yaw_deg)
    c, s = math.cos(a), math.sin(a)
    return torch.tensor([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]], dtype=torch.float64)


def turns(yaw_deg: Tensor) -> Tensor:
    """T×3×3: ``turn`` of each of ``yaw_deg`` (T), differentiable and on its device."""
    a = torch.deg2rad(yaw_deg)
    c, s, o, z = torch.cos(a), torch.sin(a), torch.ones_like(a), torch.zeros_like(a)
    return torch.stack([torch.stack([c, z, s], -1), torch.stack([z, o, z], -1), torch.stack([-s, z, c], -1)], -2)


def face_corners(size_m: tuple[float, float]) -> Tensor:
    """The four corners of a face ``size_m`` (width, height) centred at the origin, 4×3 metres."""
    w, h = size_m[0] / 2, size_m[1] / 2
    return torch.tensor([[-w, -h, 0.0], [w, -h, 0.0], [w, h, 0.0], [-w, h, 0.0]])


def projected_boxes(cameras: Cameras, points: Tensor) -> tuple[Tensor, Tensor]:
    """Boxes (T×4, x0 y0 x1 y1 pixels, unclipped) of ``points`` (P×3) and whether every point lies
    in front of the camera (T)."""
    uv, z = cameras.project(points)
    boxes = torch.cat([uv.amin(1), uv.amax(1)], dim=1)
    return boxes, (z > 0.05).all(1)


@dataclass(frozen=True)
class DriveFrames:
    """The frames of one drive, in time order.

    Shape:
        time_s, distance_m (the sign's distance along the road), azimuth_deg, elevation_deg (the
        camera's direction seen from the sign, as ``SceneParams`` has them): T.
        camera_m: T×3 camera positions in the sign's coordinates.
        face_boxes: T×4 the sign face's projected box in full-frame pixels (unclipped).
        params: SceneParams of the T frames: light, camera effects, background, and the view from
            the sign (distance, azimuth, elevation) for reference.
        street: the street behind the sign (``physattack.drive.street.Street``), or None: the background bank.
        headlights: the car's headlamps at night (``physattack.eot.night.Headlights``), or None.
        weather: fog and rain (``physattack.drive.weather.Weather``), or None: clear air.
        occlusion: what hides part of the sign, or a shadow on it (``physattack.drive.occlusion.Occluder``), or None.
        yaw_deg: the sign turned on its post (``turn``); the street and occluders stand in the road's coordinates.
        glare: the veil around a low sun ahead (``physattack.drive.glare.Glare``), or None.
        heading_deg, slope_deg: T, the car's heading on a bend and its pitch on a grade (``physattack.drive.curve``),
            or None: straight down a level road.
        crest: the crest's (z, y) in the road's coordinates, or None: what lies beyond it below the line of sight
            over it is hidden while the car is before it (z: its distance from the sign).
    """

    time_s: Tensor
    distance_m: Tensor
    azimuth_deg: Tensor
    elevation_deg: Tensor
    camera_m: Tensor
    face_boxes: Tensor
    params: SceneParams
    street: object = None
    headlights: object = None
    weather: object = None
    occlusion: object = None
    yaw_deg: float = 0.0
    glare: object = None
    heading_deg: Tensor | None = None
    slope_deg: Tensor | None = None
    crest: tuple[float, float] | None = None
    sign_height_m: float | None = None          # the face centre above the level road by the sign

    def __len__(self) -> int:
        return self.time_s.shape[0]

    def __getitem__(self, index) -> "DriveFrames":
        if isinstance(index, int):
            index = slice(index, index + 1)
        return DriveFrames(self.time_s[index], self.distance_m[index], self.azimuth_deg[index],
                           self.elevation_deg[index], self.camera_m[index], self.face_boxes[index], self.params[index],
                           self.street, self.headlights, self.weather, self.occlusion, self.yaw_deg, self.glare,
                           *(None if v is None else v[index] for v in (self.heading_deg, self.slope_deg)), self.crest,
                           self.sign_height_m)

    def cameras(self, dashcam: Dashcam, window: Region | None = None) -> Cameras:
        """The frames' cameras in the sign's coordinates (what the sign is rendered and projected through)."""
        return dashcam.cameras(self.camera_m, window, self.yaw_deg, self.heading_deg, self.slope_deg)

    def road_cameras(self, dashcam: Dashcam) -> Cameras:
        """The same cameras in the road's coordinates (what the street and occluders are drawn through)."""
        road = self.camera_m.double() @ turn(self.yaw_deg).to(self.camera_m.device)     # turn(-yaw) @ p, row-wise
        return dashcam.cameras(road.to(self.camera_m.dtype), heading_deg=self.heading_deg, slope_deg=self.slope_deg)


@dataclass(frozen=True)
class Drive:
    """One approach to the sign (see the module docstring).

    Args:
        speed_kmh: constant speed.
        lane_offset_m: lateral distance from the camera's path to the sign's centre (the sign on the right).
        start_m: the sign's distance along the road at the first frame.
        fps: frame rate.
        light: a lighting preset (``DRIVE_LIGHTS``: the grid's, ``dusk``, ``night`` in the car's headlights,
            ``night_lit`` with street lamps too, or ``sun_ahead``, backlit with glare).
        effects: a camera-effect preset (``CAMERA_EFFECT_PRESETS``).
        background: index into the background bank.
        seed: seed of the frames' sensor noise.
        sign_height_m: the sign's centre above the road (the scene's post reaches the road at 2.1 m).
        blur_sigma_px, noise_std: the camera's own blur and noise (a preset may replace them).
        background_zoom: how much the background has grown by the last frame (approach parallax).
        street: the seed of the street around the sign (``physattack.drive.street``); None: the frame's
            background is a bank image (``background``).
        weather: a weather preset (``physattack.drive.weather.WEATHER``: clear, fog, haze, rain).
        occlusion: an occlusion preset (``physattack.drive.occlusion.OCCLUSION``: none, foliage, truck, shadow).
        sign_yaw_deg: the sign turned on its post, towards the road for a positive angle (±15° is common); the
            light keeps its direction on the road, so the face meets it at another angle too.
        curve_radius_m, curve_straight_m: a bend of the road before the sign (``physattack.drive.curve.Curve``: > 0
            to the right, < 0 to the left, 0 straight) ending ``curve_straight_m`` before it; the drive's first frame
            is then the first one whose frame holds the sign.
        grade_pct: the same stretch's grade (> 0 climbing to a crest before the sign, < 0 falling to it).
    """

    speed_kmh: float = 50.0
    lane_offset_m: float = 4.0
    start_m: float = 80.0
    fps: float = 30.0
    light: str = "noon"
    effects: str = "default"
    background: int = 0
    seed: int = 0
    sign_height_m: float = 2.1
    blur_sigma_px: float = 0.4
    noise_std: float = 0.01
    background_zoom: float = 0.25
    street: int | None = None
    weather: str = "clear"
    occlusion: str = "none"
    sign_yaw_deg: float = 0.0
    curve_radius_m: float = 0.0
    curve_straight_m: float = 30.0
    grade_pct: float = 0.0

    def __post_init__(self) -> None:
        key = "drive."
        Curve(self.curve_radius_m, self.curve_straight_m, self.grade_pct)
        check_range(key + "sign_yaw_deg", self.sign_yaw_deg, -60.0, 60.0,
                    why="degrees the sign is turned on its post, towards the road for a positive angle")
        _check_presets(key + "weather", [self.weather], WEATHER)
        _check_presets(key + "occlusion", [self.occlusion], OCCLUSION)
        check_range(key + "speed_kmh", self.speed_kmh, 0.0, lo_open=True, why="the car's speed in km/h")
        check_range(key + "lane_offset_m", self.lane_offset_m, 0.0, why="metres from the camera's path to the sign")
        check_range(key + "start_m", self.start_m, 0.0, lo_open=True, why="the sign's distance at the first frame, m")
        check_range(key + "fps", self.fps, 0.0, lo_open=True, why="frames per second")
        _check_presets(key + "light", [self.light], DRIVE_LIGHTS)
        _check_presets(key + "effects", [self.effects], CAMERA_EFFECT_PRESETS)
        check_range(key + "background", self.background, 0, integer=True, why="an index into the background bank")
        check_range(key + "seed", self.seed, integer=True)
        check_range(key + "sign_height_m", self.sign_height_m, 0.0, lo_open=True, why="metres above the road")
        check_range(key + "blur_sigma_px", self.blur_sigma_px, 0.0, why="Gaussian blur sigma in pixels")
        check_range(key + "noise_std", self.noise_std, 0.0, why="sensor noise standard deviation")
        check_range(key + "background_zoom", self.background_zoom, 0.0, why="the background's growth over the drive")

    @property
    def speed_mps(self) -> float:
        return self.speed_kmh / 3.6

    def describe(self) -> dict:
        out = {"speed_kmh": self.speed_kmh, "lane_offset_m": self.lane_offset_m, "light": self.light,
               "effects": self.effects, "background": self.background, "start_m": self.start_m, "fps": self.fps}
        if self.street is not None:
            out["street"] = self.street
        if self.weather != "clear":
            out["weather"] = self.weather
        if self.occlusion != "none":
            out["occlusion"] = self.occlusion
        if self.sign_yaw_deg:
            out["sign_yaw_deg"] = self.sign_yaw_deg
        if self.curve_radius_m:
            out["curve_radius_m"] = self.curve_radius_m
        if self.grade_pct:
            out["grade_pct"] = self.grade_pct
        return out

    def street_scene(self):
        """The street around the sign (``physattack.drive.street.Street``), or None."""
        if self.street is None:
            return None
        from physattack.drive.street import Street

        curve = Curve(self.curve_radius_m, self.curve_straight_m, self.grade_pct)
        return Street(self.street, self.lane_offset_m, self.sign_height_m, curve=None if curve.straight else curve)

    @torch.no_grad()
    def frames(self, dashcam: Dashcam, face_size_m: tuple[float, float]) -> DriveFrames:
        """Every frame from ``start_m`` until the sign's face has left the frame (none of its projected
        box inside it) or the car has reached it."""
        step = self.speed_mps / self.fps
        count = int(math.floor(self.start_m / step)) + 1
        t = torch.arange(count, dtype=torch.float64) / self.fps
        s = self.start_m - self.speed_mps * t
        cam = torch.stack([torch.full_like(s, -self.lane_offset_m),
                           torch.full_like(s, dashcam.height_m - self.sign_height_m), s], dim=1)
        curve = Curve(self.curve_radius_m, self.curve_straight_m, self.grade_pct)
        heading = None if curve.straight else curve.heading_deg(s)
        slope = None if curve.straight else curve.slope_deg(s)
        cam = curve.place(cam) @ turn(self.sign_yaw_deg).T              # on the road, then the sign's coordinates
        boxes, ahead = projected_boxes(dashcam.cameras(cam, yaw_deg=self.sign_yaw_deg, heading_deg=heading,
                                                       slope_deg=slope), face_corners(face_size_m).double())
        w, h = dashcam.width_px, dashcam.height_px
        inside = ahead & (boxes[:, 2] > 0) & (boxes[:, 0] < w) & (boxes[:, 3] > 0) & (boxes[:, 1] < h) & (s > 0)
        first = 0
        if not curve.straight and bool(inside.any()) and not bool(inside[0]):    # round a bend: from the first sight
            first = int(torch.nonzero(inside).flatten()[0])
            inside[:first] = True
        if not bool(inside[0]):
            raise InputError(f"The sign is outside the dashcam's frame at the start of the drive (start_m="
                             f"{self.start_m:g}, lane_offset_m={self.lane_offset_m:g}, sign_height_m="
                             f"{self.sign_height_m:g}, hfov_deg={dashcam.hfov_deg:g}); move it nearer the road or "
                             "widen the dashcam's field of view.")
        gone = torch.nonzero(~inside).flatten()
        last = int(gone[0]) if len(gone) else count
        t, s, cam, boxes = t[first:last].float(), s[first:last].float(), cam[first:last].float(), boxes[first:last].float()
        heading = None if heading is None else heading[first:last].float()
        slope = None if slope is None else slope[first:last].float()
        rng = cam.norm(dim=1)
        azimuth = torch.rad2deg(torch.atan2(cam[:, 0], cam[:, 2]))
        elevation = torch.rad2deg(torch.asin(cam[:, 1] / rng))
        headlights = Headlights() if self.light in NIGHT_LIGHTS else None
        weather = WEATHER[self.weather] if self.weather != "clear" else None
        occluder = OCCLUSION[self.occlusion].build(self.seed, self.lane_offset_m, self.sign_height_m, face_size_m,
                                                   self.start_m)
        return DriveFrames(t, s, azimuth, elevation, cam, boxes, self._params(dashcam, s, rng, azimuth, elevation,
                                                                              face_size_m[0]), self.street_scene(),
                           headlights, weather, occluder, self.sign_yaw_deg,
                           Glare() if self.light == "sun_ahead" else None, heading, slope,
                           (self.curve_straight_m, -self.sign_height_m) if curve.crest else None, self.sign_height_m)

    def _params(self, dashcam: Dashcam, s: Tensor, rng: Tensor, azimuth: Tensor, elevation: Tensor,
                width_m: float) -> SceneParams:
        n = len(s)
        full = lambda v: torch.full((n,), float(v))  # noqa: E731
        fx = CAMERA_EFFECT_PRESETS[self.effects]
        light = {k: full(v) for k, v in DRIVE_LIGHTS[self.light].items()}
        light["light_azimuth_deg"] = light["light_azimuth_deg"] + self.sign_yaw_deg     # fixed on the road
        g = torch.Generator().manual_seed(self.seed)
        progress = 1 - s / self.start_m
        share = dashcam.focal_px * width_m / rng / dashcam.width_px
        return SceneParams(
            distance_m=rng, azimuth_deg=azimuth, elevation_deg=elevation, roll_deg=full(0), frame=share,
            shift_x=full(0), shift_y=full(0), **light, sensor_px=full(dashcam.width_px),
            blur_sigma_px=full(fx.get("blur_sigma_px", self.blur_sigma_px)), motion_px=full(fx.get("motion_px", 1)),
            motion_angle_deg=full(fx.get("motion_angle_deg", 0)), exposure=full(fx.get("exposure", 1)),
            contrast=full(fx.get("contrast", 1)), noise_std=full(fx.get("noise_std", self.noise_std)),
            jpeg_quality=full(fx.get("jpeg_quality", 100)),
            noise_seed=torch.randint(0, 2**31 - 1, (n,), generator=g),
            background_index=torch.full((n,), self.background, dtype=torch.long),
            bg_x=full(0.5), bg_y=full(0.5), bg_scale=1 / (1 + self.background_zoom * progress))


@dataclass
class DriveSet:
    """The fixed held-out drives: speeds × lighting presets × lane offsets × camera-effect presets ×
    ``backgrounds_per_drive`` held-out backgrounds, each drive with its own background and noise seed.

    Drives are listed with the speed varying fastest, so the first few drives (the ones a report
    draws) cover every speed under the first light and lane offset.
    """

    speeds_kmh: list[float] = field(default_factory=lambda: [30.0, 50.0, 70.0])
    lighting: list[str] = field(default_factory=lambda: ["noon", "overcast", "low_sun"])
    lane_offsets_m: list[float] = field(default_factory=lambda: [3.5, 6.0])
    effects: list[str] = field(default_factory=lambda: ["default"])
    backgrounds_per_drive: int = 1
    start_m: float = 80.0
    fps: float = 30.0
    sign_height_m: float = 2.1
    blur_sigma_px: float = 0.4
    noise_std: float = 0.01
    background_zoom: float = 0.25
    background_count: int = 24
    seed: int = 3000
    world: str = "backdrop"
    street_seed: int = 50_000
    weather: list[str] = field(default_factory=lambda: ["clear"])
    occlusion: list[str] = field(default_factory=lambda: ["none"])
    sign_yaw_deg: list[float] = field(default_factory=lambda: [0.0])
    curve_radius_m: list[float] = field(default_factory=lambda: [0.0])
    curve_straight_m: float = 30.0
    grade_pct: list[float] = field(default_factory=lambda: [0.0])

    def __post_init__(self) -> None:
        key = "drive.drives."
        for radius in self.curve_radius_m:
            for grade in self.grade_pct:
                Curve(float(radius), self.curve_straight_m, float(grade))
        check_values(key + "sign_yaw_deg", self.sign_yaw_deg, -60.0, 60.0,
                     why="degrees each sign is turned on its post, towards the road for a positive angle")
        _check_presets(key + "occlusion", self.occlusion, OCCLUSION)
        if self.world not in ("backdrop", "street"):
            raise InputError(f"drive.drives.world must be backdrop (a background image behind the sign) or street (a "
                             f"procedural street around it); got {self.world!r}.")
        check_range(key + "street_seed", self.street_seed, 50_000, integer=True,
                    why="the first held-out street's seed; the training bank's streets are below 50000")
        _check_presets(key + "weather", self.weather, WEATHER)
        check_values(key + "speeds_kmh", self.speeds_kmh, 0.0, lo_open=True, why="the cars' speeds in km/h")
        _check_presets(key + "lighting", self.lighting, DRIVE_LIGHTS)
        check_values(key + "lane_offsets_m", self.lane_offsets_m, 0.0, why="metres from the camera's path to the sign")
        _check_presets(key + "effects", self.effects, CAMERA_EFFECT_PRESETS)
        check_range(key + "backgrounds_per_drive", self.backgrounds_per_drive, 1, integer=True,
                    why="held-out backgrounds per condition")
        check_range(key + "start_m", self.start_m, 0.0, lo_open=True, why="the sign's distance at the first frame, m")
        check_range(key + "fps", self.fps, 0.0, lo_open=True, why="frames per second")
        check_range(key + "background_count", self.background_count, 1, integer=True,
                    why="images in the held-out background bank")
        check_range(key + "seed", self.seed, integer=True)

    def drives(self) -> list[Drive]:
        out = []
        for grade, radius, yaw, occlusion, weather in ((g, c, y, o, w) for g in self.grade_pct
                                                       for c in self.curve_radius_m for y in self.sign_yaw_deg
                                                       for o in self.occlusion for w in self.weather):
            for fx in self.effects:
                for rep in range(self.backgrounds_per_drive):
                    for offset in self.lane_offsets_m:
                        for light in self.lighting:
                            for speed in self.speeds_kmh:
                                i = len(out)
                                out.append(Drive(
                                    speed_kmh=float(speed), lane_offset_m=float(offset), start_m=float(self.start_m),
                                    fps=float(self.fps), light=light, effects=fx, background=i % self.background_count,
                                    seed=self.seed + i, sign_height_m=self.sign_height_m,
                                    blur_sigma_px=self.blur_sigma_px, noise_std=self.noise_std,
                                    background_zoom=self.background_zoom,
                                    street=self.street_seed + i if self.world == "street" else None, weather=weather,
                                    occlusion=occlusion, sign_yaw_deg=float(yaw), curve_radius_m=float(radius),
                                    curve_straight_m=self.curve_straight_m, grade_pct=float(grade)))
        return out

    def __len__(self) -> int:
        return (len(self.speeds_kmh) * len(self.lighting) * len(self.lane_offsets_m) * len(self.effects)
                * self.backgrounds_per_drive * len(self.weather) * len(self.occlusion) * len(self.sign_yaw_deg)
                * len(self.curve_radius_m) * len(self.grade_pct))


@torch.no_grad()
def random_drives(n: int, speed_kmh: Range, lane_offset_m: Range, background_count: int, generator: torch.Generator,
                  **drive) -> list[Drive]:
    """``n`` drives of uniform speed and lane offset, a random lighting preset, background and noise seed;
    ``drive``: the rest of each ``Drive`` (start_m, fps, sign_height_m)."""
    g = generator
    speed, offset = _uniform(n, speed_kmh, g), _uniform(n, lane_offset_m, g)
    names = list(LIGHTING_PRESETS)
    light = torch.randint(len(names), (n,), generator=g)
    bg = torch.randint(background_count, (n,), generator=g)
    seed = torch.randint(0, 2**31 - 1, (n,), generator=g)
    return [Drive(speed_kmh=float(speed[i]), lane_offset_m=float(offset[i]), light=names[int(light[i])],
                  background=int(bg[i]), seed=int(seed[i]), **drive) for i in range(n)]


@dataclass
class DriveSampler:
    """Random drives, and views of the sign as a dashcam sees it along them, for EOT.

    ``drives(n, generator)`` draws whole drives (speed, lane offset, light preset, background, seed).
    ``sample(n, generator)`` is a view sampler (``ViewSampler``'s interface): each view is one moment of
    a random drive: the sign ``distance_m`` down the road (log-uniform), ``lane_offset_m`` to the
    side, seen from the dashcam's height, so distance, azimuth and elevation follow the drive's
    geometry and the crop's resolution follows the dashcam's focal length; light, camera effects,
    background and the crop's framing are ``view``'s draws. An attack that samples these views is
    optimized where the braking decision is made (30-50 m at 50-70 km/h), not only at 3-25 m.

    Args:
        dashcam: the camera.
        speed_kmh, lane_offset_m, distance_m: uniform ranges (distance log-uniform).
        start_m, fps: of the drives drawn.
        sign_height_m: the sign's centre above the road.
        view: the sampler of everything but the camera's place.
        background_count: images in the background bank (passed on to ``view``).
    """

    dashcam: Dashcam = field(default_factory=Dashcam)
    speed_kmh: Range = (20.0, 90.0)
    lane_offset_m: Range = (2.0, 8.0)
    distance_m: Range = (5.0, 80.0)
    start_m: float = 80.0
    fps: float = 30.0
    sign_height_m: float = 2.1
    view: ViewSampler = field(default_factory=ViewSampler)
    background_count: int | None = None

    def __post_init__(self) -> None:
        key = "eot.sampler."
        check_interval(key + "speed_kmh", self.speed_kmh, 0.0, lo_open=True, why="the cars' speeds in km/h")
        check_interval(key + "lane_offset_m", self.lane_offset_m, 0.0, why="metres from the camera's path to the sign")
        check_interval(key + "distance_m", self.distance_m, 0.0, lo_open=True,
                       why="the sign's distance down the road, m")
        check_range(key + "start_m", self.start_m, 0.0, lo_open=True, why="the sign's distance at the first frame, m")
        check_range(key + "fps", self.fps, 0.0, lo_open=True, why="frames per second")
        check_range(key + "sign_height_m", self.sign_height_m, 0.0, lo_open=True, why="metres above the road")
        if isinstance(self.dashcam, dict):
            self.dashcam = Dashcam(**self.dashcam)
        if isinstance(self.view, dict):
            self.view = ViewSampler.under(key + "view.", self.view)
        if self.background_count is not None:
            self.view = replace(self.view, background_count=self.background_count)

    @property
    def object_width_m(self) -> float:
        return self.view.object_width_m

    @property
    def sensor_focal_px(self) -> float:
        return self.dashcam.focal_px

    def drives(self, n: int, generator: torch.Generator) -> list[Drive]:
        return random_drives(n, self.speed_kmh, self.lane_offset_m, self.view.background_count, generator,
                             start_m=self.start_m, fps=self.fps, sign_height_m=self.sign_height_m)

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator) -> SceneParams:
        g = generator
        params = self.view.sample(n, g)
        lo, hi = math.log(self.distance_m[0]), math.log(self.distance_m[1])
        s = torch.exp(lo + (hi - lo) * torch.rand(n, generator=g))
        offset = _uniform(n, self.lane_offset_m, g)
        x, y = -offset, torch.full((n,), self.dashcam.height_m - self.sign_height_m)
        rng = torch.sqrt(x * x + y * y + s * s)
        return replace(params, distance_m=rng, azimuth_deg=torch.rad2deg(torch.atan2(x, s)),
                       elevation_deg=torch.rad2deg(torch.asin(y / rng)),
                       sensor_px=sensor_pixels(self.view.object_width_m, rng, params.frame, self.dashcam.focal_px))
