"""Backgrounds: a procedural bank of street-like images (sky, road, foliage, buildings) and user photos.

A bank is made from a seed, so training and evaluation can use disjoint banks (different seeds).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.errors import InputError, check_range
from physattack.imageio import read_rgb

BANK_SIZE_PX = 256
KINDS = ("sky", "road", "foliage", "buildings")


def _smooth_noise(rng: np.random.Generator, size: int, scale: int, channels: int = 1) -> np.ndarray:
    small = rng.random((max(2, size // scale), max(2, size // scale), channels)).astype(np.float32)
    big = cv2.resize(small, (size, size), interpolation=cv2.INTER_CUBIC)
    return big.reshape(size, size, channels)


def _fractal(rng, size, channels=1, octaves=(64, 16, 4)):
    weights = np.array([0.6, 0.3, 0.1])
    return sum(w * _smooth_noise(rng, size, o, channels) for w, o in zip(weights, octaves))


def _sky(rng, n):
    top = np.array([0.25, 0.45, 0.85]) * rng.uniform(0.7, 1.1)
    bottom = np.array([0.8, 0.85, 0.92]) * rng.uniform(0.8, 1.05)
    t = np.linspace(0, 1, n)[:, None, None]
    img = top * (1 - t) + bottom * t + np.zeros((n, n, 3))
    clouds = np.clip((_fractal(rng, n) - rng.uniform(0.45, 0.6)) * 3, 0, 1)
    img = img * (1 - clouds) + clouds * rng.uniform(0.8, 1.0)
    if rng.random() < 0.5:   # distant tree line or rooftops along the bottom
        h = int(n * rng.uniform(0.75, 0.95))
        ridge = (h + 12 * (_smooth_noise(rng, n, 16)[0, :, 0] - 0.5) * 4).astype(int)
        col = np.array([0.2, 0.3, 0.15]) * rng.uniform(0.6, 1.4)
        for x in range(n):
            img[ridge[x]:, x] = col
    return img


def _road(rng, n):
    img = _sky(rng, n)
    horizon = int(n * rng.uniform(0.3, 0.55))
    asphalt = rng.uniform(0.25, 0.45)
    tex = asphalt + 0.08 * (_fractal(rng, n, octaves=(8, 4, 2)) - 0.5)
    img[horizon:] = np.repeat(tex[horizon:], 3, axis=2) * np.array([1.0, 1.0, 1.02])
    vx = n * rng.uniform(0.3, 0.7)
    for side, colour in ((-1, (0.95, 0.95, 0.9)), (1, (0.95, 0.8, 0.2))):
        end = (int(vx + side * n * rng.uniform(0.5, 1.2)), n)
        cv2.line(img, (int(vx), horizon), end, colour, max(1, n // 60), cv2.LINE_AA)
    return img


def _foliage(rng, n):
    base = np.array([0.18, 0.35, 0.12]) * rng.uniform(0.6, 1.3)
    leaves = _fractal(rng, n, 3, octaves=(16, 6, 2))
    img = base * (0.5 + leaves) + 0.15 * (np.clip(_fractal(rng, n) - 0.55, 0, 1))
    if rng.random() < 0.5:
        k = int(n * rng.uniform(0.1, 0.35))
        img[:k] = _sky(rng, n)[:k]
    return img


def _buildings(rng, n):
    img = _sky(rng, n)
    x = 0
    while x < n:
        w = int(rng.uniform(0.15, 0.45) * n)
        top = int(rng.uniform(0.0, 0.5) * n)
        wall = rng.uniform(0.25, 0.85, 3) * np.array([1.0, 0.95, 0.9])
        cv2.rectangle(img, (x, top), (x + w, n), tuple(float(c) for c in wall), -1)
        win = wall * rng.uniform(0.3, 0.6)
        step = max(6, int(rng.uniform(0.04, 0.09) * n))
        for wy in range(top + step // 2, n - step, step):
            for wx in range(x + step // 3, x + w - step // 2, step):
                cv2.rectangle(img, (wx, wy), (wx + step // 2, wy + step // 2), tuple(float(c) for c in win), -1)
        x += w
    return img


_MAKERS = {"sky": _sky, "road": _road, "foliage": _foliage, "buildings": _buildings}


def procedural_backgrounds(count: int, seed: int, size: int = BANK_SIZE_PX) -> Tensor:
    """``count`` procedural backgrounds (kinds in turn) as count×3×size×size float in [0, 1]."""
    rng = np.random.default_rng(seed)
    imgs = []
    for i in range(count):
        img = _MAKERS[KINDS[i % len(KINDS)]](rng, size)
        img = img + rng.normal(0, 0.01, img.shape)
        imgs.append(np.clip(img, 0, 1).astype(np.float32))
    return torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous()


def folder_backgrounds(folder: str | Path, size: int = BANK_SIZE_PX) -> Tensor:
    """Every PNG/JPEG in ``folder``, centre-cropped square and resized, as N×3×size×size.

    A truncated, undecodable or transparent image is refused with one sentence naming it.
    """
    folder = Path(folder)
    check_range("the background image size", size, 8, integer=True, why="pixels")
    paths = sorted(p for p in folder.glob("*") if p.suffix.lower() in {".png", ".jpg", ".jpeg", ".bmp"})
    if not folder.is_dir() or not paths:
        raise InputError(f"The background folder {folder} has no PNG or JPEG images; point "
                                "eot.backgrounds.folder at a folder of photos or set it to null.")
    imgs = []
    for p in paths:
        img = read_rgb(p, "background image")
        h, w = img.shape[:2]
        s = min(h, w)
        img = img[(h - s) // 2:(h - s) // 2 + s, (w - s) // 2:(w - s) // 2 + s]
        img = cv2.resize(img, (size, size), interpolation=cv2.INTER_AREA)
        imgs.append(img.astype(np.float32) / 255.0)
    return torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).contiguous()


class BackgroundBank:
    """A fixed set of background images, cropped and resized per view.

    Args:
        count: number of procedural backgrounds.
        seed: seed of the procedural generator; training and evaluation use different seeds.
        folder: optional folder of the user's own photos, added to the bank.
    """

    def __init__(self, count: int = 48, seed: int = 0, folder: str | Path | None = None):
        check_range("eot.backgrounds.count (or eot.eval_backgrounds.count)", count, 0, integer=True,
                    why="procedural backgrounds; 0 with a folder uses only the photos")
        check_range("eot.backgrounds.seed (or eot.eval_backgrounds.seed)", seed, integer=True)
        parts = [procedural_backgrounds(count, seed)] if count > 0 else []
        if folder:
            parts.append(folder_backgrounds(folder))
        if not parts:
            raise InputError("The background bank is empty; set eot.backgrounds.count > 0 or give a folder.")
        self.images = torch.cat(parts)

    def __len__(self) -> int:
        return self.images.shape[0]

    def crops(self, index: Tensor, x: Tensor, y: Tensor, scale: Tensor, size: tuple[int, int]) -> Tensor:
        """B crops: a square of side ``scale`` (share of the image) at position (x, y) in [0, 1]."""
        if self.images.device != index.device:
            self.images = self.images.to(index.device)           # once, not per batch
        imgs = self.images[index % len(self)]
        b = index.shape[0]
        theta = torch.zeros(b, 2, 3, device=index.device)
        theta[:, 0, 0] = scale
        theta[:, 1, 1] = scale
        theta[:, 0, 2] = (2 * x - 1) * (1 - scale)
        theta[:, 1, 2] = (2 * y - 1) * (1 - scale)
        grid = F.affine_grid(theta, (b, 3, *size), align_corners=False)
        return F.grid_sample(imgs, grid, mode="bilinear", padding_mode="reflection", align_corners=False)
