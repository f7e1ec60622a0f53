"""Camera effects applied to rendered views, in the order light meets the sensor; differentiable.

Resolution (the crop's native sensor pixels), defocus blur, motion blur, exposure and contrast,
sensor noise, JPEG. Each is always applied; "no change" is a value in its range (sensor_px at or
above the image width, sigma 0, motion length 1, gain 1, noise 0, quality 100).
"""

from __future__ import annotations

import kornia
import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.eot.params import SceneParams


def resample_to_sensor(images: Tensor, sensor_px: Tensor) -> Tensor:
    """Downsample each view to its native sensor width (area filter) and back up (bilinear)."""
    b, _, h, w = images.shape
    low = torch.nonzero(sensor_px < w * 0.95).flatten()
    if len(low) == 0:
        return images
    resampled = []
    for i in low.tolist():
        sw = max(8, int(round(float(sensor_px[i]))))
        sh = max(8, int(round(sw * h / w)))
        small = F.interpolate(images[i:i + 1], size=(sh, sw), mode="area")
        resampled.append(F.interpolate(small, size=(h, w), mode="bilinear", align_corners=False))
    return images.index_copy(0, low.to(images.device), torch.cat(resampled))


def gaussian_blur(images: Tensor, sigma_px: Tensor) -> Tensor:
    if float(sigma_px.max()) < 0.05:
        return images
    k = 2 * int(torch.ceil(3 * sigma_px.max())) + 1
    sigma = sigma_px.clamp(min=1e-3).unsqueeze(-1).expand(-1, 2)
    return kornia.filters.gaussian_blur2d(images, (k, k), sigma, border_type="replicate")


def motion_blur(images: Tensor, length_px: Tensor, angle_deg: Tensor) -> Tensor:
    out = images
    for length in length_px.unique().tolist():
        if length <= 1:
            continue
        sel = torch.nonzero(length_px == length).flatten()
        blurred = kornia.filters.motion_blur(images[sel], int(length), angle_deg[sel],
                                             torch.zeros_like(angle_deg[sel]), border_type="replicate")
        out = out.index_copy(0, sel, blurred)
    return out


def sensor_noise(images: Tensor, std: Tensor, seeds: Tensor) -> Tensor:
    """Gaussian noise drawn from each view's own seed, so a view replays exactly."""
    noise = torch.stack([torch.randn(images.shape[1:], generator=torch.Generator().manual_seed(int(s)))
                         for s in seeds.tolist()]).to(images.device, images.dtype)
    return images + noise * std[:, None, None, None]


def jpeg(images: Tensor, quality: Tensor) -> Tensor:
    sel = torch.nonzero(quality < 100).flatten()
    if len(sel) == 0:
        return images
    coded = kornia.enhance.jpeg_codec_differentiable(images[sel], quality[sel].to(images.dtype))
    return images.index_copy(0, sel, coded)


def apply_camera_effects(images: Tensor, params: SceneParams) -> Tensor:
    """Apply ``params``' camera effects to B×3×H×W images in [0, 1]."""
    x = resample_to_sensor(images, params.sensor_px)
    x = gaussian_blur(x, params.blur_sigma_px)
    x = motion_blur(x, params.motion_px, params.motion_angle_deg)
    x = kornia.enhance.adjust_contrast_with_mean_subtraction(x.clamp(0, 1), params.contrast)
    x = (x * params.exposure[:, None, None, None]).clamp(0, 1)
    x = sensor_noise(x, params.noise_std, params.noise_seed).clamp(0, 1)
    return jpeg(x, params.jpeg_quality).clamp(0, 1)
