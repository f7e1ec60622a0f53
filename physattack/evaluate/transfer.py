"""Transfer: one run's patch against other victims and through other image paths; a matrix of rates.

Victims: any classifiers (other bundled SignNets trained with other seeds or widths, torchvision
ImageNet models through their label sets where their weights are on this machine). Image paths:

- ``renderer``: physattack's own renderer and camera effects (the held-out pipeline);
- ``opencv_warp``: an independent path that shares no code with the renderer — a plain pinhole
  projection of the sign face's corners in NumPy, ``cv2.warpPerspective`` of the (attacked)
  texture onto held-out background crops, a Lambertian gain and a colour-temperature tint, then
  OpenCV resampling, blur, noise and JPEG. No shading model, mip-maps or anti-aliasing in common;
- ``pytorch3d``: PyTorch3D's rasterizer behind physattack's shader, where PyTorch3D is installed.

Each cell holds clean accuracy, attack success over clean-correct views (RP2) and over all views,
with Wilson intervals. A targeted attack is scored as targeted on victims that have the target label
(outside the true set), and as untargeted elsewhere (an ImageNet model has no "yield").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import cv2
import numpy as np
import torch
from torch import Tensor

from physattack.evaluate.metrics import classification_metrics
from physattack.victims.base import VictimError


# -- the independent OpenCV path ---------------------------------------------------------------------
def _kelvin_rgb(kelvin: float) -> np.ndarray:
    """Approximate RGB of a black body (Tanner Helland's fit), scaled to unit luminance."""
    t = kelvin / 100.0
    r = 255.0 if t <= 66 else 329.698727446 * (t - 60) ** -0.1332047592
    g = 99.4708025861 * math.log(t) - 161.1195681661 if t <= 66 else 288.1221695283 * (t - 60) ** -0.0755148492
    b = 255.0 if t >= 66 else (0.0 if t <= 19 else 138.5177312231 * math.log(t - 10) - 305.0447927307)
    rgb = np.clip(np.array([r, g, b]), 0, 255) / 255.0
    return rgb / float(rgb @ np.array([0.2126, 0.7152, 0.0722]))


def _project_corners(width_m: float, height_m: float, distance: float, azimuth: float, elevation: float,
                     focal_px: float, size: tuple[int, int]) -> np.ndarray:
    """Pixel positions of the face's corners (top-left, top-right, bottom-right, bottom-left) seen by a
    pinhole camera at ``distance`` looking at the face's centre (the origin; face normal +z, y up)."""
    a, e = math.radians(azimuth), math.radians(elevation)
    cam = distance * np.array([math.cos(e) * math.sin(a), math.sin(e), math.cos(e) * math.cos(a)])
    fwd = -cam / np.linalg.norm(cam)
    right = np.cross(fwd, [0.0, 1.0, 0.0])
    right /= np.linalg.norm(right)
    up = np.cross(right, fwd)
    w, h = width_m / 2, height_m / 2
    corners = np.array([[-w, h, 0], [w, h, 0], [w, -h, 0], [-w, -h, 0]], dtype=np.float64) - cam
    x, y, z = corners @ right, corners @ up, corners @ fwd
    hgt, wid = size
    return np.stack([wid / 2 + focal_px * x / z, hgt / 2 - focal_px * y / z], 1).astype(np.float32)


def _background(bank: np.ndarray, index: int, bx: float, by: float, scale: float, size: tuple[int, int]) -> np.ndarray:
    img = bank[index % len(bank)]
    side = max(2, int(round(img.shape[0] * scale)))
    x0 = int(round(bx * (img.shape[1] - side)))
    y0 = int(round(by * (img.shape[0] - side)))
    crop = img[y0:y0 + side, x0:x0 + side]
    return cv2.resize(crop, (size[1], size[0]), interpolation=cv2.INTER_AREA)


def opencv_warp_views(texture: Tensor, face_mask: Tensor, texture_size_m: tuple[float, float], params,
                      backgrounds: Tensor, size: tuple[int, int] = (96, 96), object_width_m: float = 0.75) -> Tensor:
    """Render views of a flat textured sign with OpenCV alone.

    Args:
        texture: 3×Ht×Wt in [0, 1]; face_mask: 1×Ht×Wt (where the sign is).
        params: SceneParams (distance, azimuth, elevation, frame, light, sensor and camera effects,
            background crop); roll and shift are taken as zero.
        backgrounds: N×3×S×S held-out background images in [0, 1].

    Returns:
        B×3×H×W float in [0, 1].
    """
    tex = np.ascontiguousarray(texture.detach().cpu().permute(1, 2, 0).numpy().astype(np.float32))
    alpha = np.ascontiguousarray(face_mask.detach().cpu()[0].numpy().astype(np.float32))
    bank = backgrounds.detach().cpu().permute(0, 2, 3, 1).numpy().astype(np.float32)
    p = params.to("cpu")
    hgt, wid = size
    out = []
    for i in range(len(p)):
        dist, frame = float(p.distance_m[i]), float(p.frame[i])
        focal = wid * dist * frame / object_width_m
        dst = _project_corners(texture_size_m[0], texture_size_m[1], dist, float(p.azimuth_deg[i]),
                               float(p.elevation_deg[i]), focal, size)
        span = float(np.linalg.norm(dst[1] - dst[0]))                  # pre-shrink: warpPerspective does not filter
        side = int(np.clip(round(2 * span), 8, tex.shape[1]))
        t_small = cv2.resize(tex, (side, side), interpolation=cv2.INTER_AREA)
        a_small = cv2.resize(alpha, (side, side), interpolation=cv2.INTER_AREA)
        src = np.array([[0, 0], [side, 0], [side, side], [0, side]], dtype=np.float32)
        h = cv2.getPerspectiveTransform(src, dst)
        sign = cv2.warpPerspective(t_small, h, (wid, hgt), flags=cv2.INTER_LINEAR, borderValue=0)
        cover = cv2.warpPerspective(a_small, h, (wid, hgt), flags=cv2.INTER_LINEAR, borderValue=0)[..., None]
        la, le = math.radians(float(p.light_azimuth_deg[i])), math.radians(float(p.light_elevation_deg[i]))
        lambert = max(0.0, math.cos(le) * math.cos(la))                 # light direction · face normal (+z)
        gain = (float(p.ambient[i]) + float(p.diffuse[i]) * lambert) * _kelvin_rgb(float(p.color_temp_k[i]))
        bg = _background(bank, int(p.background_index[i]), float(p.bg_x[i]), float(p.bg_y[i]), float(p.bg_scale[i]), size)
        img = np.clip(sign * gain, 0, 1) * cover + bg * (1 - cover)
        img = _camera(img, p, i)
        out.append(img)
    return torch.from_numpy(np.stack(out)).permute(0, 3, 1, 2).contiguous().float()


def _camera(img: np.ndarray, p, i: int) -> np.ndarray:
    """Sensor resolution, defocus, motion, contrast, exposure, noise, JPEG — with OpenCV and NumPy."""
    hgt, wid = img.shape[:2]
    sensor = float(p.sensor_px[i])
    if sensor < wid * 0.95:
        sw = max(8, int(round(sensor)))
        img = cv2.resize(cv2.resize(img, (sw, max(8, int(round(sw * hgt / wid)))), interpolation=cv2.INTER_AREA),
                         (wid, hgt), interpolation=cv2.INTER_LINEAR)
    sigma = float(p.blur_sigma_px[i])
    if sigma >= 0.05:
        img = cv2.GaussianBlur(img, (0, 0), sigma, borderType=cv2.BORDER_REPLICATE)
    length = int(p.motion_px[i])
    if length > 1:
        kernel = np.zeros((length, length), np.float32)
        kernel[length // 2] = 1.0 / length
        rot = cv2.getRotationMatrix2D(((length - 1) / 2, (length - 1) / 2), float(p.motion_angle_deg[i]), 1.0)
        kernel = cv2.warpAffine(kernel, rot, (length, length))
        img = cv2.filter2D(img, -1, kernel / max(kernel.sum(), 1e-6), borderType=cv2.BORDER_REPLICATE)
    mean = img.mean()
    img = np.clip((img - mean) * float(p.contrast[i]) + mean, 0, 1) * float(p.exposure[i])
    rng = np.random.default_rng(int(p.noise_seed[i]))
    img = np.clip(img + rng.normal(0, float(p.noise_std[i]), img.shape).astype(np.float32), 0, 1)
    q = float(p.jpeg_quality[i])
    if q < 100:
        u8 = (img * 255).round().astype(np.uint8)
        ok, buf = cv2.imencode(".jpg", u8, [cv2.IMWRITE_JPEG_QUALITY, int(q)])
        img = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED).astype(np.float32) / 255.0
    return img.astype(np.float32)


# -- the matrix --------------------------------------------------------------------------------------
@dataclass
class ImagePath:
    """A named way to make the clean and attacked images of the grid (``None`` images: skipped, with ``reason``)."""

    name: str
    clean: Tensor | None
    attacked: Tensor | None
    reason: str = ""


def render_path(name: str, make) -> ImagePath:
    """``make()`` returns (clean, attacked) images or raises; an ImportError or InputError skips the path."""
    from physattack.errors import InputError

    try:
        clean, attacked = make()
    except (ImportError, InputError) as err:
        return ImagePath(name, None, None, f"skipped: {err}")
    return ImagePath(name, clean, attacked)


@torch.no_grad()
def _probs(victim, images: Tensor, batch_size: int = 64) -> Tensor:
    return torch.cat([torch.softmax(victim(images[s:s + batch_size]).float(), 1).cpu()
                      for s in range(0, len(images), batch_size)])


def transfer_cell(victim, clean: Tensor, attacked: Tensor, scene_class: str, target: str | None) -> dict:
    """Rates of one victim on one path's images."""
    true_set = victim.label_set(scene_class)
    target_set, mode = None, "untargeted"
    if target is not None:
        try:
            target_set = victim.label_set(target)
            mode = "targeted"
        except VictimError:
            mode = f"untargeted (the victim has no '{target}')"
        if target_set is not None and set(target_set) & set(true_set):
            target_set, mode = None, f"untargeted ('{target}' shares labels with '{scene_class}')"
    cp, ap = _probs(victim, clean), _probs(victim, attacked)
    m = classification_metrics(cp.argmax(1), ap.argmax(1), ap, list(true_set), list(target_set) if target_set else None)
    return {"mode": mode, **m}


def transfer_matrix(victims: dict[str, object], paths: list[ImagePath], scene_class: str, target: str | None,
                    skipped_victims: dict[str, str] | None = None) -> dict:
    """Every victim × every path. Returns ``{"cells": {victim: {path: rates}}, "skipped": {...}}``."""
    cells: dict[str, dict[str, dict]] = {}
    for vname, victim in victims.items():
        cells[vname] = {}
        for path in paths:
            if path.clean is None:
                continue
            cells[vname][path.name] = transfer_cell(victim, path.clean.to(_device(victim)),
                                                    path.attacked.to(_device(victim)), scene_class, target)
    return {"victims": list(victims), "paths": [p.name for p in paths if p.clean is not None],
            "cells": cells, "skipped": {**{p.name: p.reason for p in paths if p.clean is None},
                                        **(skipped_victims or {})}}


def _device(victim) -> torch.device:
    try:
        return next(victim.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def load_victims(specs: dict[str, object], build) -> tuple[dict[str, object], dict[str, str]]:
    """Build each victim with ``build(spec)``; one whose weights are not here is skipped with its reason."""
    from physattack.errors import InputError

    victims, skipped = {}, {}
    for name, spec in specs.items():
        try:
            victims[name] = build(spec)
        except Exception as err:                  # hydra wraps constructor errors; find the InputError
            cause = err
            while cause is not None and not isinstance(cause, InputError):
                cause = cause.__cause__ or cause.__context__
            if cause is None:
                raise
            skipped[name] = f"skipped: {cause}"
    return victims, skipped


def matrix_markdown(result: dict, title: str) -> str:
    def pct(r):
        return f"{r['rate']:.0%} [{r['ci95'][0]:.0%}, {r['ci95'][1]:.0%}] ({r['count']}/{r['n']})" if r["n"] else "n/a"
    lines = [f"# {title}", "", "Attack success over clean-correct views (RP2) [95 % Wilson]; clean accuracy in the "
             "second table. Mode says how success is counted for that victim.", "",
             "| victim | " + " | ".join(result["paths"]) + " | mode |", "|---" * (len(result["paths"]) + 2) + "|"]
    for v in result["victims"]:
        cells = result["cells"][v]
        mode = next(iter(cells.values()))["mode"] if cells else ""
        lines.append(f"| {v} | " + " | ".join(pct(cells[p]["attack_success_rate"]) for p in result["paths"]) + f" | {mode} |")
    lines += ["", "| victim (clean accuracy) | " + " | ".join(result["paths"]) + " |", "|---" * (len(result["paths"]) + 1) + "|"]
    for v in result["victims"]:
        lines.append(f"| {v} | " + " | ".join(pct(result["cells"][v][p]["clean_accuracy"]) for p in result["paths"]) + " |")
    lines += ["", "| victim (success over all views) | " + " | ".join(result["paths"]) + " |",
              "|---" * (len(result["paths"]) + 1) + "|"]
    for v in result["victims"]:
        lines.append(f"| {v} | " + " | ".join(pct(result["cells"][v][p]["attack_success_rate_unconditional"])
                                              for p in result["paths"]) + " |")
    if result["skipped"]:
        lines += ["", "Skipped:", ""] + [f"- `{k}`: {v}" for k, v in result["skipped"].items()]
    return "\n".join(lines) + "\n"


def matrix_figure(result: dict, title: str):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    vs, ps = result["victims"], result["paths"]
    fig, axes = plt.subplots(1, 2, figsize=(3 + 2.2 * len(ps) * 2, 1.5 + 0.5 * len(vs)))
    for ax, key, name in ((axes[0], "attack_success_rate", "success (clean-correct views)"),
                          (axes[1], "clean_accuracy", "clean accuracy")):
        data = np.array([[result["cells"][v][p][key]["rate"] if result["cells"][v][p][key]["n"] else np.nan
                          for p in ps] for v in vs])
        ax.imshow(data, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(ps)), ps, fontsize=8)
        ax.set_yticks(range(len(vs)), vs, fontsize=8)
        for i in range(len(vs)):
            for j in range(len(ps)):
                if not np.isnan(data[i, j]):
                    ax.text(j, i, f"{data[i, j]:.2f}", ha="center", va="center", fontsize=8,
                            color="white" if data[i, j] < 0.6 else "black")
        ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
