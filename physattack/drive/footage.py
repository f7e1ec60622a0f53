"""Drives over the user's own footage: the attacked sign composited where a real sign is, judged as a drive.

A red team with dashcam footage of a real sign asks the drive question of *that* approach: would the car
still stop if the sign wore the patch? ``python -m physattack.drive run_dir=<run> footage=<video or folder>
track=<file>`` answers it with the same stacks, voting rule and braking point as a simulated drive.

**The track** gives the sign face's four corners in each frame it covers: the corners of the face's
texture square (``scene.texture_size_m``; for the octagonal stop sign, the square that circumscribes the
octagon: its corners lie where the octagon's edges meet when extended), in pixels with the image's top-left
corner at (0, 0) and pixel ``i``'s centre at ``i + 0.5`` (CVAT's and COCO's convention, and the
renderer's). The corners may come in any order; they are put in the order top-left, top-right,
bottom-right, bottom-left by their angle around their centre (a sign is never rolled by 45°). Read:

- CSV: a header ``frame,x_tl,y_tl,x_tr,y_tr,x_br,y_br,x_bl,y_bl`` and one row per frame;
- JSON: ``{"frames": [{"frame": 0, "corners": [[x, y], [x, y], [x, y], [x, y]]}, ...]}``;
- CVAT XML ("CVAT for video 1.1": one ``<track>`` of ``<polygon>`` or ``<points>`` shapes with four
  points, ``outside="1"`` shapes skipped; "CVAT for images 1.1": ``<image id=...>`` with one such shape);
- COCO keypoints JSON: ``images`` (``frame_id``, or the number in ``file_name``, or the image's ``id``,
  as the frame index) and one ``annotations`` entry per frame with four keypoints of visibility > 0.

The drive is the track's span of frames, which must have corners in every frame and must reach past the
braking point. **Distance and speed** come from the corners: a planar pose (``cv2.solvePnP``, IPPE) of the
face's known size through the dashcam's pinhole (the video's size and ``hfov_deg``) gives the sign's depth
along the optical axis in each frame, the distance the braking rule needs (with a level camera on a
straight road, the distance down the road); the speed is the least-squares slope of that distance over time
unless the user gives it.

**Compositing** (as REAP, Hingun et al., ICCV 2023, does for still photographs): only the texels the attack
changed are drawn; the rest of the sign stays the real one, so the clean drive is the footage itself. The
texture is shrunk near the sign's size in the frame (``INTER_AREA``, so the warp does not alias), warped by
the homography from the texture's corners to the tracked ones, and **relit** per frame: a gain and offset per
channel, fitted by least squares from the clean sign's texture (warped the same way) to the real sign's pixels
inside the face, map the patch's texels to what this camera, light and exposure make of them. The patch layer
and its coverage are blurred by the camera's ``blur_sigma_px`` before they are laid over the frame (the
footage has its own blur; a sharp sticker would stand out).
"""

from __future__ import annotations

import csv
import json
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import torch
from torch import Tensor

from physattack.drive.render import DriveImages
from physattack.drive.trajectories import Dashcam, Region
from physattack.errors import InputError, check_range
from physattack.imageio import read_rgb

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".webp")
CSV_COLUMNS = ("frame", "x_tl", "y_tl", "x_tr", "y_tr", "x_br", "y_br", "x_bl", "y_bl")


# -- the track --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Track:
    """The sign face's corners per frame: frame index -> 4×2 (x, y) pixels, top-left first, clockwise."""

    corners: dict[int, np.ndarray]
    source: str

    def span(self) -> list[int]:
        """The frames from the first tracked one to the last, refused when one in between has no corners."""
        if not self.corners:
            raise InputError(f"The track {self.source} gives the corners of no frame: annotate the sign's four face "
                             "corners in the frames of the approach.")
        first, last = min(self.corners), max(self.corners)
        missing = [i for i in range(first, last + 1) if i not in self.corners]
        if missing:
            raise InputError(f"The track {self.source} has no corners for {len(missing)} frame(s) between its first "
                             f"({first}) and last ({last}), such as {_frames(missing)}: annotate them (CVAT interpolates a "
                             "track between keyframes) or end the track before the gap.")
        return list(range(first, last + 1))


def _frames(indices: list[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:5])
    return shown + (", ..." if len(indices) > 5 else "")


def ordered(points: np.ndarray) -> np.ndarray:
    """Four points in the order top-left, top-right, bottom-right, bottom-left (image y down), by their angle
    around their centre."""
    p = np.asarray(points, dtype=np.float64).reshape(4, 2)
    c = p.mean(0)
    return p[np.argsort(np.arctan2(p[:, 1] - c[1], p[:, 0] - c[0]))]


def read_track(path: str | Path) -> Track:
    """The track at ``path`` (CSV, JSON, CVAT XML or COCO keypoints JSON; see the module)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"The track file {path} does not exist: give track=<a CSV, JSON, CVAT XML or COCO keypoints "
                         "file with the sign's four face corners per frame>.")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            corners = _csv_track(path)
        elif suffix == ".xml":
            corners = _cvat_track(path)
        elif suffix == ".json":
            data = json.loads(path.read_text())
            corners = _coco_track(data, path) if isinstance(data, dict) and "annotations" in data \
                else _json_track(data, path)
        else:
            raise InputError(f"The track {path} is neither .csv, .json nor .xml: export the corners as CSV "
                             f"({','.join(CSV_COLUMNS)}), JSON, CVAT XML or COCO keypoints.")
    except (ValueError, KeyError, TypeError, IndexError, ET.ParseError) as e:
        if isinstance(e, InputError):
            raise
        raise InputError(f"The track {path} could not be read ({type(e).__name__}: {e}); see physattack/drive/footage.py "
                         "for the formats read.") from None
    return Track({i: ordered(c) for i, c in sorted(corners.items())}, str(path))


def _put(corners: dict, frame: int, points, path: Path) -> None:
    points = np.asarray(points, dtype=np.float64)
    if points.shape != (4, 2) or not np.isfinite(points).all():
        raise InputError(f"The track {path} gives frame {frame} {points.size // 2 if points.ndim else 0} corner(s) or "
                         "non-numbers: each frame needs exactly the face's four corners (x, y).")
    if frame in corners:
        raise InputError(f"The track {path} gives frame {frame} twice: keep one shape per frame (the sign's face).")
    corners[int(frame)] = points


def _csv_track(path: Path) -> dict:
    corners: dict[int, np.ndarray] = {}
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames is None or [c.strip() for c in reader.fieldnames] != list(CSV_COLUMNS):
            raise InputError(f"The CSV track {path} must have the header {','.join(CSV_COLUMNS)} "
                             f"(got {','.join(reader.fieldnames or [])}).")
        for row in reader:
            row = {k.strip(): v for k, v in row.items()}
            values = [float(row[c]) for c in CSV_COLUMNS[1:]]
            _put(corners, int(row["frame"]), np.reshape(values, (4, 2)), path)
    return corners


def _json_track(data, path: Path) -> dict:
    if not isinstance(data, dict) or not isinstance(data.get("frames"), list):
        raise InputError(f"The JSON track {path} must be {{\"frames\": [{{\"frame\": 0, \"corners\": [[x, y] x 4]}}, ...]}} "
                         "or a COCO keypoints file (with \"annotations\").")
    corners: dict[int, np.ndarray] = {}
    for entry in data["frames"]:
        _put(corners, int(entry["frame"]), entry["corners"], path)
    return corners


def _coco_track(data: dict, path: Path) -> dict:
    frames = {}
    for i, image in enumerate(sorted(data.get("images", []), key=lambda im: im["id"])):
        number = re.findall(r"\d+", Path(str(image.get("file_name", ""))).stem)
        frames[image["id"]] = int(image["frame_id"]) if "frame_id" in image else (int(number[-1]) if number else i)
    corners: dict[int, np.ndarray] = {}
    for ann in data["annotations"]:
        kp = np.asarray(ann.get("keypoints", []), dtype=np.float64).reshape(-1, 3)
        if len(kp) < 4 or (kp[:4, 2] <= 0).any():
            continue                                  # a frame whose corners were not all labelled
        if ann["image_id"] not in frames:
            raise InputError(f"The COCO track {path} has an annotation of image {ann['image_id']}, which its "
                             "\"images\" list lacks.")
        _put(corners, frames[ann["image_id"]], kp[:4, :2], path)
    return corners


def _cvat_track(path: Path) -> dict:
    root = ET.parse(path).getroot()
    shapes = ("polygon", "points", "polyline")
    corners: dict[int, np.ndarray] = {}
    tracks = [t for t in root.iter("track") if any(t.iter(s) for s in shapes)]
    if len(tracks) > 1:
        raise InputError(f"The CVAT file {path} has {len(tracks)} tracks with points: keep only the sign's face.")
    if tracks:
        for shape in (s for name in shapes for s in tracks[0].iter(name)):
            if shape.get("outside", "0") == "1":
                continue
            _put(corners, int(shape.get("frame")), _cvat_points(shape.get("points", "")), path)
        return corners
    for image in root.iter("image"):
        found = [s for name in shapes for s in image.iter(name)]
        if len(found) > 1:
            raise InputError(f"The CVAT file {path} has {len(found)} shapes on image {image.get('id')}: keep only the "
                             "sign's face.")
        if found:
            _put(corners, int(image.get("id")), _cvat_points(found[0].get("points", "")), path)
    return corners


def _cvat_points(text: str) -> list[list[float]]:
    return [[float(v) for v in pair.split(",")] for pair in text.strip().split(";") if pair]


def save_track(path: str | Path, corners: dict[int, np.ndarray]) -> Path:
    """Write ``corners`` (frame -> 4×2) as the CSV track this module reads."""
    from physattack.atomic import save_text

    rows = [",".join(CSV_COLUMNS)]
    rows += [",".join([str(i)] + [f"{v:.4f}" for v in np.asarray(c, dtype=np.float64).reshape(-1)])
             for i, c in sorted(corners.items())]
    return save_text(path, "\n".join(rows) + "\n")


def write_footage(renderer, scene, texture: Tensor, frames, folder: str | Path, chunk: int = 8) -> tuple[Path, Path]:
    """A simulated drive as footage: ``frames`` (``DriveFrames``) rendered by ``renderer`` (a ``DriveRenderer``)
    with ``texture``, written as PNG frames ``folder/frames/000000.png ...`` with their track
    ``folder/track.csv`` (the face square's projected corners). What a footage drive of the same frames must
    reproduce; also a way to hand a simulated approach to another pipeline. Returns (frames folder, track)."""
    from physattack.atomic import save_png
    from physattack.drive.trajectories import face_corners

    folder = Path(folder)
    (folder / "frames").mkdir(parents=True, exist_ok=True)
    uv, _ = frames.cameras(renderer.dashcam).project(face_corners(tuple(scene.texture_size_m)))
    corners = {}
    for start in range(0, len(frames), chunk):
        sub = frames[start:start + chunk]
        images = renderer.render(scene, texture.detach(), sub).images
        u8 = (images.clamp(0, 1).permute(0, 2, 3, 1).cpu().numpy() * 255).round().astype(np.uint8)
        for j, image in enumerate(u8):
            save_png(folder / "frames" / f"{start + j:06d}.png", image)
            corners[start + j] = uv[start + j].numpy()[[3, 2, 1, 0]]      # face_corners: bottom-left first, y up
    return folder / "frames", save_track(folder / "track.csv", corners)


# -- the frames -------------------------------------------------------------------------------------
class Footage:
    """The frames of a video (any file OpenCV reads) or of a folder of images (sorted by name, numbers
    compared as numbers), as H×W×3 uint8 RGB; a video is read forwards and reopened to go back."""

    def __init__(self, path: str | Path, fps: float | None = None):
        self.path = Path(path)
        if self.path.is_dir():
            key = lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]  # noqa: E731
            self.files = sorted((p for p in self.path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES), key=key)
            if not self.files:
                raise InputError(f"The footage folder {self.path} holds no images ({', '.join(IMAGE_SUFFIXES)}): give "
                                 "footage=<a video or a folder of frames>.")
            first = read_rgb(self.files[0], "footage frame")
            self.count, self.fps = len(self.files), float(fps or 30.0)
        elif self.path.is_file():
            self.files = None
            self._cap, self._next = None, 0
            first = self._read_next(0)
            cap = self._cap
            self.count = int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) or 0
            self.fps = float(fps or cap.get(cv2.CAP_PROP_FPS) or 0.0)
            if self.fps <= 0:
                raise InputError(f"OpenCV reads no frame rate from {self.path}: give footage_options.fps.")
        else:
            raise InputError(f"The footage {self.path} does not exist: give footage=<a dashcam video or a folder of "
                             "its frames>.")
        self.height, self.width = first.shape[:2]

    def _open(self) -> None:
        if getattr(self, "_cap", None) is not None:
            self._cap.release()
        self._cap, self._next = cv2.VideoCapture(str(self.path)), 0
        if not self._cap.isOpened():
            raise InputError(f"OpenCV cannot read the video {self.path}: convert it to MP4 (H.264) or to a folder of "
                             "PNG or JPEG frames (with ffmpeg -i <video> frames/%06d.png) and give that.")

    def _read_next(self, index: int) -> np.ndarray:
        if getattr(self, "_cap", None) is None or index < self._next:
            self._open()
        while self._next < index:
            if not self._cap.grab():
                break
            self._next += 1
        ok, frame = self._cap.read() if self._next == index else (False, None)
        if not ok or frame is None:
            raise InputError(f"OpenCV cannot read frame {index} of the video {self.path}"
                             + (": convert it to MP4 (H.264) or to a folder of PNG or JPEG frames and give that."
                                if index == 0 else " (it may hold fewer frames than the track names)."))
        self._next += 1
        return cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)

    def frame(self, index: int) -> np.ndarray:
        if self.files is not None:
            if not 0 <= index < len(self.files):
                raise InputError(f"The track names frame {index}, but the footage folder {self.path} holds "
                                 f"{len(self.files)} frames (0-{len(self.files) - 1}).")
            return read_rgb(self.files[index], "footage frame")
        return self._read_next(index)

    def check(self, frames: list[int]) -> None:
        """The track's frames exist in the footage (a video's frame count is a hint: checked when read)."""
        if self.count and frames[-1] >= self.count:
            raise InputError(f"The track names frames up to {frames[-1]}, but the footage {self.path} holds "
                             f"{self.count} frames (0-{self.count - 1}): is it the track of another video?")


# -- the drive --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FootageOptions:
    """What the footage does not say about itself (``footage_options`` in ``conf/drive.yaml``).

    Args:
        hfov_deg: the camera's horizontal field of view (its focal length: width / 2 / tan(hfov / 2)).
        speed_kmh: the car's speed; None: estimated from the track.
        fps: frames per second; None: the video's own (a folder of frames: 30).
        blur_sigma_px: the camera's blur applied to the composited patch.
        height_m: the lens above the road (the stack's search region).
    """

    hfov_deg: float = 90.0
    speed_kmh: float | None = None
    fps: float | None = None
    blur_sigma_px: float = 0.4
    height_m: float = 1.4

    def __post_init__(self) -> None:
        key = "footage_options."
        check_range(key + "hfov_deg", self.hfov_deg, 0.0, 170.0, lo_open=True,
                    why="the footage camera's horizontal field of view in degrees")
        if self.speed_kmh is not None:
            check_range(key + "speed_kmh", self.speed_kmh, 0.0, lo_open=True, why="the car's speed in km/h")
        if self.fps is not None:
            check_range(key + "fps", self.fps, 0.0, lo_open=True, why="the footage's frames per second")
        check_range(key + "blur_sigma_px", self.blur_sigma_px, 0.0, why="Gaussian blur sigma in pixels")



def sign_depths(corners: np.ndarray, dashcam: Dashcam, size_m: tuple[float, float]) -> np.ndarray:
    """T×3: the face centre in the camera's coordinates (x right, y down, z forward; metres) in each frame,
    from its four corners (T×4×2, top-left first) by a planar pose (``cv2.solvePnP``, IPPE)."""
    w, h = size_m[0] / 2, size_m[1] / 2
    face = np.array([[-w, h, 0], [w, h, 0], [w, -h, 0], [-w, -h, 0]], dtype=np.float64)
    f = dashcam.focal_px
    K = np.array([[f, 0, dashcam.width_px / 2], [0, f, dashcam.height_px / 2], [0, 0, 1]], dtype=np.float64)
    out = np.zeros((len(corners), 3))
    for i, c in enumerate(corners):
        ok, _, t = cv2.solvePnP(face, np.ascontiguousarray(c, dtype=np.float64), K, None, flags=cv2.SOLVEPNP_IPPE)
        if not ok or t[2, 0] <= 0:
            raise InputError(f"The corners of track frame {i} give no pose of the face in front of the camera: check "
                             "their order and that they are the face's corners.")
        out[i] = t[:, 0]
    return out


@dataclass(frozen=True)
class FootageFrames:
    """The frames of a footage drive, in time order (``DriveFrames``' part a judge and its pictures use).

    Shape: frame_index, time_s, distance_m (the sign's depth), corners (T×4×2 pixels), face_boxes (T×4).
    """

    frame_index: Tensor
    time_s: Tensor
    distance_m: Tensor
    corners: Tensor
    face_boxes: Tensor

    def __len__(self) -> int:
        return self.time_s.shape[0]

    def __getitem__(self, index) -> "FootageFrames":
        if isinstance(index, int):
            index = slice(index, index + 1)
        return FootageFrames(self.frame_index[index], self.time_s[index], self.distance_m[index], self.corners[index],
                             self.face_boxes[index])


@dataclass(frozen=True)
class FootageDrive:
    """One approach in the user's footage, as the judge sees a ``Drive``: its speed, where it starts and its
    frames (the track's span). ``speed_source``: ``given`` or ``track`` (estimated from the distances)."""

    footage: str
    track: str
    first_frame: int
    last_frame: int
    fps: float
    speed_kmh: float
    speed_source: str
    lane_offset_m: float
    start_m: float
    light: str = "footage"
    effects: str = "footage"
    background: str = "footage"
    _frames: FootageFrames | None = field(default=None, repr=False, compare=False)

    def describe(self) -> dict:
        return {"footage": self.footage, "track": self.track, "frames": [self.first_frame, self.last_frame],
                "speed_kmh": round(self.speed_kmh, 3), "speed_from": self.speed_source, "fps": self.fps,
                "lane_offset_m": round(self.lane_offset_m, 3), "start_m": round(self.start_m, 3), "light": self.light,
                "effects": self.effects, "background": self.background}

    def frames(self, dashcam=None, face_size_m=None) -> FootageFrames:
        return self._frames


def footage_drive(footage: Footage, track: Track, dashcam: Dashcam, size_m: tuple[float, float],
                  braking, speed_kmh: float | None = None) -> FootageDrive:
    """The drive ``track`` follows through ``footage``: its frames, the sign's distance in each, the speed
    (``speed_kmh``, or the slope of the distance over time) and the checks that make it judgeable: corners in
    every frame of the span, inside the frame, and a span from before the braking point (``braking``: speed ->
    braking distance) to past it."""
    frames = track.span()
    footage.check(frames)
    corners = np.stack([track.corners[i] for i in frames])
    w, h = footage.width, footage.height
    outside = [i for i, c in zip(frames, corners) if (c[:, 0] < 0).any() or (c[:, 0] > w).any()
               or (c[:, 1] < 0).any() or (c[:, 1] > h).any()]
    if outside:
        raise InputError(f"The track's corners leave the {w}×{h} frame in {len(outside)} frame(s), such as "
                         f"{_frames(outside)}: end the track at the last frame that shows the whole face (a car brakes "
                         "long before the sign leaves its view).")
    centre = sign_depths(corners, dashcam, size_m)
    depth = centre[:, 2]
    t = (np.asarray(frames, dtype=np.float64) - frames[0]) / footage.fps
    source = "given"
    if speed_kmh is None:
        if len(frames) < 2:
            raise InputError("A track of one frame gives no speed: give footage_options.speed_kmh or track more frames.")
        slope = np.polyfit(t, depth, 1)[0]
        if slope >= 0:
            raise InputError(f"The sign does not come nearer over the track ({depth[0]:.1f} m to {depth[-1]:.1f} m "
                             "by its corners): check that the track follows the sign, or give footage_options.speed_kmh.")
        speed_kmh, source = float(-slope * 3.6), "track"
    check_range("footage_options.speed_kmh", speed_kmh, 0.0, lo_open=True, why="the car's speed in km/h")
    need = braking(speed_kmh)
    if depth[0] <= need:
        raise InputError(f"The track starts with the sign {depth[0]:.1f} m ahead, inside the braking distance "
                         f"{need:.1f} m at {speed_kmh:.0f} km/h: start the track earlier in the approach.")
    if depth[-1] >= need:
        raise InputError(f"The track ends with the sign {depth[-1]:.1f} m ahead, before the braking point ({need:.1f} m "
                         f"at {speed_kmh:.0f} km/h): track the sign until the car is past it.")
    box = np.concatenate([corners.min(1), corners.max(1)], 1)
    ff = FootageFrames(torch.tensor(frames), torch.tensor(t, dtype=torch.float32),
                       torch.tensor(depth, dtype=torch.float32), torch.tensor(corners, dtype=torch.float32),
                       torch.tensor(box, dtype=torch.float32))
    return FootageDrive(str(footage.path), track.source, frames[0], frames[-1], footage.fps, speed_kmh, source,
                        float(np.median(centre[:, 0])), float(depth[0]), _frames=ff)


# -- compositing ------------------------------------------------------------------------------------
def texture_homography(texture_hw: tuple[int, int], corners: np.ndarray, origin: tuple[int, int] = (0, 0)) -> np.ndarray:
    """3×3: texture pixels (OpenCV's convention: texel ``i``'s centre at ``i``) to the frame's pixels (the same
    convention) relative to ``origin`` (x, y), for a texture whose square's corners are ``corners`` (4×2, pixel
    edges at integers: the track's convention)."""
    h, w = texture_hw
    src = np.float32([[-0.5, -0.5], [w - 0.5, -0.5], [w - 0.5, h - 0.5], [-0.5, h - 0.5]])
    dst = np.asarray(corners, np.float32) - 0.5 - np.float32(origin)
    return cv2.getPerspectiveTransform(src, dst)


def warp_texture(layers: np.ndarray, corners: np.ndarray, window: Region) -> np.ndarray:
    """``layers`` (Ht×Wt×C float32, the face's texture square) as the frame's ``window`` (x0, y0, x1, y1) sees
    them when the square's corners are ``corners``: shrunk first near twice the face's size there
    (``INTER_AREA``), then warped (bilinear), zero outside. Returns h×w×C."""
    x0, y0, x1, y1 = window
    side = float(max(np.linalg.norm(corners[1] - corners[0]), np.linalg.norm(corners[2] - corners[1]),
                     np.linalg.norm(corners[3] - corners[2]), np.linalg.norm(corners[0] - corners[3])))
    shrink = min(1.0, 2 * side / max(layers.shape[:2]))
    if layers.ndim == 2:
        layers = layers[..., None]
    h, w = layers.shape[:2]
    dsize = (max(2, round(w * shrink)), max(2, round(h * shrink)))
    m = texture_homography((dsize[1], dsize[0]), corners, (x0, y0))
    out = []
    for c in range(0, layers.shape[2], 4):              # OpenCV resizes and warps up to 4 channels at a time
        part = np.ascontiguousarray(layers[..., c:c + 4])
        if shrink < 1.0:
            part = cv2.resize(part, dsize, interpolation=cv2.INTER_AREA)
        part = cv2.warpPerspective(part, m, (x1 - x0, y1 - y0), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
        out.append(part.reshape(y1 - y0, x1 - x0, -1))
    return np.concatenate(out, 2)


def relight(synthetic: np.ndarray, real: np.ndarray, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel gain and offset (3, 3) that map ``synthetic`` pixels onto ``real`` ones (h×w×3 each) by least
    squares over the pixels where ``weight`` (h×w) is 1: what the camera, light and exposure make of the texture.
    With too few pixels or no contrast, a gain alone (the ratio of the means)."""
    sel = weight > 0.999
    s, r = synthetic[sel], real[sel]
    gain, offset = np.ones(3), np.zeros(3)
    if len(s) < 8:
        return gain, offset
    for c in range(3):
        var = float(s[:, c].var())
        if var > 1e-4:
            gain[c] = max(0.0, float(((s[:, c] - s[:, c].mean()) * (r[:, c] - r[:, c].mean())).mean()) / var)
            offset[c] = float(r[:, c].mean() - gain[c] * s[:, c].mean())
        else:
            gain[c] = float(r[:, c].mean() / max(1e-4, s[:, c].mean()))
    return gain, offset


class FootageRenderer:
    """Frames of the footage with ``texture`` composited onto the tracked sign (``DriveRenderer``'s interface).

    Args:
        footage: the frames.
        dashcam: the footage's camera (its size and field of view).
        blur_sigma_px: the camera's blur applied to the patch layer, at full resolution.
        scale: the frames' size as a share of the footage's (for videos).
    """

    def __init__(self, footage: Footage, dashcam: Dashcam, blur_sigma_px: float = 0.4, scale: float = 1.0):
        self.footage, self.blur_sigma_px, self.scale = footage, blur_sigma_px, scale
        self.full_dashcam = dashcam
        self.dashcam = dashcam.scaled(scale) if scale != 1.0 else dashcam
        self.margin_px = 0
        check_range("footage_options.blur_sigma_px", blur_sigma_px, 0.0, why="Gaussian blur sigma in pixels")

    def scaled(self, factor: float) -> "FootageRenderer":
        return FootageRenderer(self.footage, self.full_dashcam, self.blur_sigma_px, self.scale * factor)

    def full_region(self) -> Region:
        return 0, 0, self.dashcam.width_px, self.dashcam.height_px

    def render(self, scene, texture: Tensor, frames: FootageFrames, region: Region | None = None,
               effects: bool = True, batch: int = 16) -> DriveImages:
        """The frames' ``region`` with the texels of ``texture`` that differ from the scene's clean texture drawn
        onto the sign, relit per frame (the clean texture gives the footage itself). ``effects`` is ignored: the
        footage has its camera's."""
        region = self.full_region() if region is None else tuple(int(v) for v in region)
        x0, y0, x1, y1 = region
        W, H = self.dashcam.width_px, self.dashcam.height_px
        if not (0 <= x0 < x1 <= W and 0 <= y0 < y1 <= H):
            raise InputError(f"The region {list(region)} is not inside the {W}×{H} frame.")
        from physattack.eot.night import printed_texels

        clean = scene.texture.detach().float().cpu()
        adv = texture.detach().float().cpu()
        changed = printed_texels(scene, adv)
        layers = None
        if bool(changed.any()):
            layers = torch.cat([adv, clean, changed[None], scene.face_mask.float().cpu()], 0).permute(1, 2, 0).numpy()
            layers = np.ascontiguousarray(layers, dtype=np.float32)
        images = []
        for i in range(len(frames)):
            frame = self.footage.frame(int(frames.frame_index[i]))
            if self.scale != 1.0:
                frame = cv2.resize(frame, (W, H), interpolation=cv2.INTER_AREA)
            img = frame.astype(np.float32) / 255
            if layers is not None:
                self._composite(img, layers, frames.corners[i].numpy().astype(np.float64) * self.scale)
            images.append(torch.from_numpy(np.ascontiguousarray(img[y0:y1, x0:x1])).permute(2, 0, 1))
        boxes = frames.face_boxes * self.scale
        boxes = torch.stack([boxes[:, 0].clamp(0, W), boxes[:, 1].clamp(0, H), boxes[:, 2].clamp(0, W),
                             boxes[:, 3].clamp(0, H)], 1)
        return DriveImages(torch.stack(images).to(texture.device), boxes, region)

    def _composite(self, img: np.ndarray, layers: np.ndarray, corners: np.ndarray) -> None:
        """Draw the changed texels of ``layers`` (adv RGB, clean RGB, changed, face) onto ``img`` in place."""
        H, W = img.shape[:2]
        pad = 2 + math.ceil(3 * self.blur_sigma_px * self.scale)
        win = (max(0, math.floor(corners[:, 0].min()) - pad), max(0, math.floor(corners[:, 1].min()) - pad),
               min(W, math.ceil(corners[:, 0].max()) + pad), min(H, math.ceil(corners[:, 1].max()) + pad))
        if win[2] <= win[0] or win[3] <= win[1]:
            return
        warped = warp_texture(layers, corners, win)
        adv, clean, cover, face = warped[..., :3], warped[..., 3:6], warped[..., 6], warped[..., 7]
        real = img[win[1]:win[3], win[0]:win[2]]
        inner = cv2.erode((face > 0.999).astype(np.uint8), np.ones((3, 3), np.uint8)).astype(np.float32)
        gain, offset = relight(clean, real, inner)
        layer = np.clip(adv * gain + offset, 0, 1) * cover[..., None]
        sigma = self.blur_sigma_px * self.scale
        if sigma > 0:
            layer = cv2.GaussianBlur(layer, (0, 0), sigma)
            cover = cv2.GaussianBlur(cover, (0, 0), sigma)
        real[:] = layer + real * (1 - cover[..., None])


__all__ = ["Footage", "FootageDrive", "FootageOptions", "FootageFrames", "FootageRenderer", "Track", "footage_drive", "ordered",
           "read_track", "relight", "save_track", "sign_depths", "texture_homography", "warp_texture", "write_footage"]
