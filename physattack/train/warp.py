"""Training views this pipeline's renderer never made: the flat sign face warped onto photographs.

Every other bundled victim learned from the renders an attack optimizes through (``render_set``: the
project's mesh, rasteriser, shading, camera effects and procedural backgrounds), so a held-out figure
on them measures transfer across *architectures* on *shared data*. A victim trained here
(``python -m physattack.train zoo ... source=warp``) learned from another image path entirely:

* **geometry**: the sign's artwork (``physattack.scene.signs.draw_texture``, the face only: no mesh,
  post or edge) mapped by one homography (``cv2.getPerspectiveTransform`` of the face's corners
  turned by a random yaw, pitch and roll through a pinhole) and ``cv2.warpPerspective``;
* **backgrounds**: crops of the photographs scikit-image bundles (``skimage.data``: a street with a
  motorcycle, a rocket on its pad, a cat, coffee, an astronaut, brick, grass, gravel, ...), not the
  procedural banks; two photographs are kept out of training for the JSON's warp test figure;
* **light and camera**: a per-view gain and tint of the face, a small far sign drawn at its true
  resolution (the whole crop shrunk with ``cv2.INTER_AREA`` and blown back up) and JPEG through
  ``cv2.imencode``; then, while training, torchvision's ``transforms.v2`` photometric and geometric
  augmentation (``WARP_AUGMENTATION``), not the renders' kornia ops.

The sign and the victim labels are the same nine classes; only the way the pixels were made differs.
"""

from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from physattack.errors import InputError
from physattack.scene.signs import SIGNS, draw_texture

#: scikit-image's bundled photographs used as backgrounds (colour ones, then grey ones tinted per crop).
TRAIN_PHOTOS = ("astronaut.png", "chelsea.png", "coffee.png", "motorcycle_left.png", "rocket.jpg",
                "brick.png", "grass.png", "gravel.png", "camera.png", "text.png")
#: Photographs kept out of training: the warp test set's backgrounds.
TEST_PHOTOS = ("motorcycle_right.png", "coins.png")


def photographs(names: tuple[str, ...]) -> list[np.ndarray]:
    """scikit-image's bundled photographs ``names`` as H×W×3 float32 RGB in [0, 1] (read with OpenCV)."""
    try:
        import skimage.data
    except ImportError:
        raise InputError("source=warp draws its backgrounds from the photographs scikit-image bundles, and "
                         "scikit-image is not installed: pip install scikit-image (or pip install -e '.[warp]')."
                         ) from None
    folder = Path(skimage.data.__file__).parent
    out = []
    for name in names:
        img = cv2.imread(str(folder / name), cv2.IMREAD_COLOR)
        if img is None:
            raise InputError(f"scikit-image's bundled photograph {folder / name} is missing; reinstall scikit-image.")
        out.append(cv2.cvtColor(img, cv2.COLOR_BGR2RGB).astype(np.float32) / 255)
    return out


def background(photos: list[np.ndarray], rng: np.random.Generator, size: int) -> np.ndarray:
    """A random square crop (15-80 % of the photograph's short side) of a random photograph, resized
    to ``size`` (INTER_AREA); grey photographs get a random tint."""
    img = photos[rng.integers(len(photos))]
    h, w = img.shape[:2]
    side = int(rng.uniform(0.15, 0.8) * min(h, w))
    y, x = int(rng.integers(0, h - side + 1)), int(rng.integers(0, w - side + 1))
    crop = cv2.resize(img[y:y + side, x:x + side], (size, size), interpolation=cv2.INTER_AREA)
    if np.allclose(crop[..., 0], crop[..., 1]) and np.allclose(crop[..., 1], crop[..., 2]):
        crop = crop * rng.uniform(0.6, 1.1, 3).astype(np.float32)
    return np.clip(crop, 0, 1)


def _rotation(yaw: float, pitch: float, roll: float) -> np.ndarray:
    cy, sy, cp, sp, cr, sr = (math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch),
                              math.cos(roll), math.sin(roll))
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rx = np.array([[1, 0, 0], [0, cp, -sp], [0, sp, cp]])
    rz = np.array([[cr, -sr, 0], [sr, cr, 0], [0, 0, 1]])
    return rz @ rx @ ry


def face_corners(size_m: tuple[float, float], width_px: float, centre_px: tuple[float, float],
                 yaw_deg: float, pitch_deg: float, roll_deg: float, focal_px: float = 800.0) -> np.ndarray:
    """Where the four corners of a face ``size_m`` (width, height in metres; top-left first, clockwise)
    land in the image when the face is turned by yaw/pitch/roll and set at the distance at which its
    width spans ``width_px`` head-on, seen by a pinhole of ``focal_px`` centred on ``centre_px``."""
    w, h = size_m
    distance = focal_px * w / width_px
    corners = np.array([[-w / 2, h / 2, 0], [w / 2, h / 2, 0], [w / 2, -h / 2, 0], [-w / 2, -h / 2, 0]])
    p = corners @ _rotation(*(math.radians(a) for a in (yaw_deg, pitch_deg, roll_deg))).T + [0, 0, distance]
    return np.stack([centre_px[0] + focal_px * p[:, 0] / p[:, 2], centre_px[1] - focal_px * p[:, 1] / p[:, 2]], 1)


class SignFaces:
    """The nine sign faces (RGB float32 and face alpha) at a working resolution, drawn once."""

    def __init__(self, names: list[str], long_side_px: int = 256):
        self.faces = []
        for name in names:
            texture, mask, size_m = draw_texture(SIGNS[name])
            scale = long_side_px / max(texture.shape[:2])
            dsize = (round(texture.shape[1] * scale), round(texture.shape[0] * scale))
            rgb = cv2.resize(texture, dsize, interpolation=cv2.INTER_AREA).astype(np.float32) / 255
            alpha = cv2.resize(mask, dsize, interpolation=cv2.INTER_AREA).astype(np.float32) / 255
            self.faces.append((rgb, alpha, size_m))


def place_face(face: tuple[np.ndarray, np.ndarray, tuple[float, float]], backdrop: np.ndarray, corners: np.ndarray,
               gain: float = 1.0, tint: np.ndarray | float = 1.0, width_px: float | None = None) -> np.ndarray:
    """``face`` (RGB, alpha, size in metres) times ``gain`` and the per-channel ``tint`` composited over ``backdrop`` (S×S×3 float in
    [0, 1]) by the homography taking the face's corners (top-left first, clockwise) to ``corners``
    (4×2, in OpenCV's pixel coordinates: pixel ``i``'s centre at ``i``). The face is first shrunk to about
    twice ``width_px`` (default: its top edge's length there). Returns S×S×3 float in [0, 1]."""
    rgb, alpha, _ = face
    s = backdrop.shape[0]
    if width_px is None:
        width_px = float(np.linalg.norm(np.asarray(corners[1]) - np.asarray(corners[0])))
    # shrink the face near its size in the view first, so warpPerspective's bilinear taps do not alias
    shrink = min(1.0, 2 * width_px / rgb.shape[1])
    if shrink < 1.0:
        dsize = (max(2, round(rgb.shape[1] * shrink)), max(2, round(rgb.shape[0] * shrink)))
        rgb, alpha = (cv2.resize(a, dsize, interpolation=cv2.INTER_AREA) for a in (rgb, alpha))
    h, w = alpha.shape
    src = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    m = cv2.getPerspectiveTransform(src, np.asarray(corners, np.float32))
    lit = rgb * gain * tint                                     # clipped once, after compositing
    face_px = cv2.warpPerspective(lit, m, (s, s), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    cover = cv2.warpPerspective(alpha, m, (s, s), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)[..., None]
    return np.clip(face_px * cover + backdrop * (1 - cover), 0, 1)


def warp_view(face: tuple[np.ndarray, np.ndarray, tuple[float, float]], backdrop: np.ndarray,
              rng: np.random.Generator, frame: tuple[float, float] = (0.3, 0.9)) -> np.ndarray:
    """One view: ``face`` (RGB, alpha, size in metres) turned, placed over ``backdrop`` (S×S×3 float)
    by ``place_face``; sometimes a grey post below it; lit by a gain and tint; sometimes drawn small
    and blown up, sometimes JPEG-compressed. Returns S×S×3 uint8 RGB."""
    s = backdrop.shape[0]
    width_px = rng.uniform(*frame) * s
    centre = (s / 2 + rng.uniform(-0.08, 0.08) * s, s / 2 + rng.uniform(-0.08, 0.08) * s)
    corners = face_corners(face[2], width_px, centre, rng.uniform(-55, 55), rng.uniform(-15, 20), rng.uniform(-8, 8))
    img = backdrop.copy()
    if rng.random() < 0.6:                                      # the post below the face
        x = int(round(centre[0]))
        half = max(1, int(round(0.04 * width_px)))
        grey = float(rng.uniform(0.35, 0.7))
        cv2.rectangle(img, (x - half, int(round(corners[:, 1].max())) - 2), (x + half, s), (grey,) * 3, -1)
    img = place_face(face, img, corners, rng.uniform(0.45, 1.25), rng.uniform(0.85, 1.15, 3).astype(np.float32),
                     width_px)
    if rng.random() < 0.6:                                      # a far sign: its true pixels, blown up
        small = max(4, round(s * rng.uniform(8, max(9.0, width_px)) / width_px))
        if small < s:
            img = cv2.resize(cv2.resize(img, (small, small), interpolation=cv2.INTER_AREA), (s, s),
                             interpolation=cv2.INTER_LINEAR if rng.random() < 0.5 else cv2.INTER_CUBIC)
    out = np.clip(img * 255 + 0.5, 0, 255).astype(np.uint8)
    if rng.random() < 0.3:
        ok, buf = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(35, 96))])
        out = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
    return out


def warp_set(names: list[str], per_class: int, seed: int, image_size: int, photos: tuple[str, ...] = TRAIN_PHOTOS,
             desc: str = "warped views") -> tuple[Tensor, Tensor]:
    """``per_class`` warped views of each sign over ``photos``, as ``render_set`` returns renders: uint8
    N×3×S×S and labels N. The same ``seed`` gives the same views."""
    rng = np.random.default_rng(seed)
    faces = SignFaces(names)
    bank = photographs(photos)
    images = np.empty((per_class * len(names), image_size, image_size, 3), np.uint8)
    labels = torch.arange(len(names)).repeat_interleave(per_class)
    for i in tqdm(range(len(images)), desc=desc, unit="view"):
        images[i] = warp_view(faces.faces[int(labels[i])], background(bank, rng, image_size), rng)
    return torch.from_numpy(images).permute(0, 3, 1, 2).contiguous(), labels


def warp_augmentation():
    """torchvision ``transforms.v2`` augmentation applied per image while training on warped views:
    colour jitter, blur, a mild perspective and affine wobble, noise and erasing (float images in [0, 1])."""
    from torchvision.transforms import v2
    return v2.Compose([
        v2.RandomApply([v2.ColorJitter(brightness=0.4, contrast=0.4, saturation=0.4, hue=0.04)], p=0.8),
        v2.RandomApply([v2.GaussianBlur(5, sigma=(0.1, 1.5))], p=0.3),
        v2.RandomPerspective(distortion_scale=0.15, p=0.3),
        v2.RandomAffine(degrees=0, translate=(0.06, 0.06), scale=(0.9, 1.1)),
        v2.RandomApply([v2.GaussianNoise(sigma=0.03)], p=0.3),
        v2.RandomErasing(p=0.25, scale=(0.02, 0.1), value="random"),
    ])


#: What the JSON records of the image path (``ZooTraining.source == "warp"``).
WARP_RECIPE = ("the flat sign face warped onto crops of scikit-image's bundled photographs "
               f"({', '.join(TRAIN_PHOTOS)}) by one OpenCV homography (yaw ±55°, pitch -15..20°, roll ±8°, "
               "the face 30-90 % of the crop), a grey post in 60 %, face gain 0.45-1.25 and tint ±15 %, "
               "60 % drawn at 8 px and up and resized back, 30 % JPEG 35-95 (cv2); torchvision.transforms.v2 "
               "ColorJitter, GaussianBlur, RandomPerspective, RandomAffine, GaussianNoise, RandomErasing while "
               "training; no render of this pipeline")


__all__ = ["TEST_PHOTOS", "TRAIN_PHOTOS", "WARP_RECIPE", "SignFaces", "background", "face_corners",
           "photographs", "place_face", "warp_augmentation", "warp_set", "warp_view"]
