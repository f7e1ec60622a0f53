"""Drawing a drive's frames: the sign in a window at true resolution, over the street or a background image.

Rendering a 1920×1080 frame through the sign renderer would spend 2 M pixels of rasterization on
background. Instead the sign (with its post) is rendered in a window around its projected box at the
frame's true sensor resolution, with the full frame's camera whose principal point is shifted to the
window (a sub-window of a pinhole camera is the same camera), and composited onto the frame's
background: a held-out bank image stretched to the frame and zoomed slowly towards the vanishing
point over the drive (approach parallax), or the street of ``street.py``. Then, in order: what hides part
of the sign (``occlusion.py``), a low sun's veil (``glare.py``), rain (``weather.py``), the dashcam's
auto-exposure, white balance and highlights (``trajectories.Dashcam``) and the camera's effects.
``DriveRenderer.render`` can render only a region of the frame (the part a perception stack reads):
every pixel of a region is the pixel the full frame has there (up to the sensor noise's draw and
the contrast effect's image mean, which are per rendered image).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.eot.night import NIGHT_BACKDROP, headlit
from physattack.drive.occlusion import ambient_only
from physattack.drive.trajectories import Dashcam, DriveFrames, Region, projected_boxes
from physattack.drive.weather import add_rain, fogged
from physattack.eot.fog import BACKDROP_DEPTH_M
from physattack.eot.backgrounds import BackgroundBank
from physattack.eot.effects import apply_camera_effects
from physattack.eot.params import REC709_LUMA, SceneParams
from physattack.errors import InputError, check_range
from physattack.render.renderer import Renderer
from physattack.scene.scene import Scene



def roll_off(images: Tensor, knee: float) -> Tensor:
    """``images`` (B×3×h×w, linear, any brightness) through an HDR camera's highlight roll-off: each pixel's brightest
    channel kept below ``knee`` and compressed above it as ``knee + (1 − knee)·(1 − exp(−(m − knee)/(1 − knee)))``
    (continuous in value and slope, white only in the limit), every channel scaled by that factor. No channel clips,
    so the hue is kept: a headlit red face stays red. (Scaling by the luminance instead lets the red channel clip
    while a white-balanced blue one does not, which turned a headlit face magenta under street lamps.)"""
    peak = images.amax(1, keepdim=True)
    soft = knee + (1 - knee) * (1 - torch.exp(-(peak - knee).clamp_min(0) / (1 - knee)))
    scale = torch.where(peak > knee, soft / peak.clamp_min(1e-6), torch.ones_like(peak))
    return (images * scale).clamp(0, 1)


@dataclass(frozen=True)
class DriveImages:
    """Rendered frames of a drive (or a region of them).

    Shape:
        images: T×3×h×w in [0, 1], the frames' ``region``.
        boxes: T×4 (x0, y0, x1, y1) of the sign's visible face in full-frame pixels, zeros where it is
            not in the frame.
        region: (x0, y0, x1, y1) of the full frame the images show.
    """

    images: Tensor
    boxes: Tensor
    region: Region


class DriveRenderer:
    """Renders drives: the sign in a window at true resolution, over a stretched background.

    Args:
        renderer: the rasterizer + shader pair.
        backgrounds: the bank ``Drive.background`` points into (the held-out one for evaluation).
        dashcam: the camera.
        margin_px: pixels around the sign's projected box that are rendered with it.
        print_retroreflects: at night, the patch's print retroreflects as the sheeting does (``printer.material``:
            retroreflective film); False: it is matte (``physattack.eot.night``).
    """

    #: auto-exposure meters a frame this many times smaller per side (the sign, a few pixels of it, left out)
    METERING_SCALE = 8

    def __init__(self, renderer: Renderer, backgrounds: BackgroundBank, dashcam: Dashcam, margin_px: int = 3,
                 print_retroreflects: bool = False):
        self.renderer, self.backgrounds, self.dashcam = renderer, backgrounds, dashcam
        self.print_retroreflects = bool(print_retroreflects)
        self.margin_px = check_range("margin_px", margin_px, 0, integer=True, why="pixels around the sign's box")
        self._gains: dict[tuple, list[float]] = {}   # a frame's metering: gain, then white balance

    def exposure_gains(self, frames: DriveFrames) -> Tensor:
        """T: each frame's auto-exposure gain (``Dashcam.auto_exposure``; ones without it): ``exposure_target``
        over the mean luminance (Rec. 709) of the frame's backdrop, metered on the whole frame at
        1/``METERING_SCALE`` of its size, within ``exposure_range``. The sign is left out of the metering (at 10 m
        it is 0.25 % of a 1920×1080 frame), so every region of a frame gets the full frame's gain."""
        if not self.dashcam.auto_exposure:
            return torch.ones(len(frames))
        return self._meter(frames)[:, 0]

    def white_balance(self, frames: DriveFrames) -> Tensor:
        """T×3: each frame's white-balance gains (``Dashcam.auto_white_balance``; ones without it): grey world on the
        same metering as ``exposure_gains``, each channel's mean brought to the mean luminance (within 0.25-4×), so
        the frame's luminance is kept and a cast (4000-K street lamps, dusk) is taken out."""
        if not self.dashcam.auto_white_balance:
            return torch.ones(len(frames), 3)
        return self._meter(frames)[:, 1:]

    def _meter(self, frames: DriveFrames) -> Tensor:
        """T×4: the auto-exposure gain and the three white-balance gains of each frame, metered once per frame."""
        cam = self.dashcam
        p = frames.params
        street = None if frames.street is None else frames.street.seed
        keys = [(street, int(p.background_index[i]), float(p.bg_scale[i]), float(p.ambient[i]), float(p.diffuse[i]),
                 float(p.light_azimuth_deg[i]), float(p.light_elevation_deg[i]), float(p.color_temp_k[i]),
                 frames.headlights is not None, getattr(frames.weather, "name", None), frames.yaw_deg,
                 *frames.camera_m[i].tolist(),
                 *(None if v is None else float(v[i]) for v in (frames.heading_deg, frames.slope_deg)))
                for i in range(len(frames))]
        todo = sorted({i for i, k in enumerate(keys) if k not in self._gains})
        if todo:                                   # a frame is metered once, whatever regions of it are drawn
            small = self.scaled(1 / self.METERING_SCALE)
            sub = frames[torch.tensor(todo)]
            luma = torch.tensor(REC709_LUMA).view(1, 3, 1, 1)
            backdrop = small._backdrop(sub, 0, len(sub), small.full_region(), sub.params, torch.device("cpu"))
            mean = (backdrop * luma).sum(1).mean((1, 2)).clamp_min(1e-4)
            channels = backdrop.mean((2, 3)).clamp_min(1e-4)                       # B×3
            balance = (mean[:, None] / channels).clamp(0.25, 4.0)
            gain = (cam.exposure_target / mean).clamp(*cam.exposure_range)
            if len(self._gains) > 200_000:
                self._gains.clear()
            self._gains.update(zip((keys[i] for i in todo), torch.cat([gain[:, None], balance], 1).tolist()))
        return torch.tensor([self._gains[k] for k in keys])

    def _behind_crest(self, frames: DriveFrames, region: Region) -> Tensor:
        """B×1×h×w: the pixels of ``region`` below the crest's line in each frame whose car has not reached the crest
        (``DriveFrames.crest``): the road before the crest is all a camera sees there."""
        z, y = frames.crest
        x0, y0, x1, y1 = region
        uv, _ = frames.road_cameras(self.dashcam).project(torch.tensor([[-10.0, y, z], [10.0, y, z]]))
        a, b = uv[:, 0].double(), uv[:, 1].double()                              # B×2 each: the crest's line
        us = torch.arange(x0, x1, dtype=torch.float64) + 0.5
        vs = torch.arange(y0, y1, dtype=torch.float64) + 0.5
        slope = (b[:, 1] - a[:, 1]) / (b[:, 0] - a[:, 0]).clamp_min(1e-9)
        line = a[:, 1, None] + (us[None] - a[:, 0, None]) * slope[:, None]          # B×w: the line's row per column
        below = vs[None, :, None] > line[:, None, :]
        before = (frames.distance_m > z)[:, None, None]
        return (below & before)[:, None]

    def _backdrop(self, frames: DriveFrames, start: int, stop: int, region: Region, params: SceneParams,
                  device) -> Tensor:
        """Frames ``start:stop``'s street or background image through ``region``, at night and in fog as the
        frames have them (``params``: those frames')."""
        if frames.street is not None:
            return self._street(frames, start, stop, region, params)[0].to(device)
        out = self.background(params, region).to(device)
        if frames.headlights is not None:
            out = out * NIGHT_BACKDROP               # a bank image is a daylight photograph
        if frames.weather is not None and frames.weather.visibility_m is not None:
            out = fogged(out, torch.ones_like(out[:, :1]), BACKDROP_DEPTH_M, frames.weather, params)
        return out

    def _street(self, frames: DriveFrames, start: int, stop: int, region: Region, params: SceneParams):
        """Frames ``start:stop``'s street through ``region`` (B×3×h×w) and, on a wet street, its road's mirror weight
        (B×1×h×w) and mirror (B×3×h×w) (``street.street_backdrop``; None, None when dry)."""
        from physattack.drive.street import street_backdrop

        wet = frames.weather is not None and frames.weather.wet
        drawn = street_backdrop(frames.street, frames[start:stop].road_cameras(self.dashcam), region, params.lights(),
                                frames.weather, frames.headlights, frames.yaw_deg, reflections=wet)
        return drawn if wet else (drawn, None, None)

    def _reflect(self, out: Tensor, views, win: Region, foot_v: float, gloss: Tensor, mirror: Tensor,
                 region: Region) -> None:
        """Adds to ``out`` (3×h×w of ``region``, in place) the sign's window (``views``, premultiplied, at ``win``)
        reflected in the wet road: flipped about ``foot_v``, the row of the road below the sign (exact for a level
        camera on a level road: every point of the face is at one depth), streaked as the street's mirror is
        (``weather.streak_px``) and laid over the mirror the street shows there, by its weight ``gloss`` (1×h×w).
        Differentiable in the window."""
        from kornia.filters import gaussian_blur2d

        from physattack.drive.weather import streak_px

        sy, sx, py, px = streak_px(self.dashcam.focal_px)
        layer = torch.cat([views.images[0], views.alpha[0]]).flip(1)[None]            # upside down
        layer = gaussian_blur2d(F.pad(layer, (px, px, py, py)), (2 * py + 1, 2 * px + 1), (sy, sx))[0]
        top, left = round(2 * foot_v - win[3]) - py, win[0] - px                    # full-frame pixels
        x0, y0, x1, y1 = region
        ix0, iy0 = max(left, x0), max(top, y0)
        ix1, iy1 = min(left + layer.shape[2], x1), min(top + layer.shape[1], y1)
        if ix1 <= ix0 or iy1 <= iy0:
            return
        src = layer[:, iy0 - top:iy1 - top, ix0 - left:ix1 - left]
        dst = (slice(None), slice(iy0 - y0, iy1 - y0), slice(ix0 - x0, ix1 - x0))
        out[dst] = out[dst] + gloss[dst].to(out) * (src[:3] - src[3:] * mirror[dst].to(out))

    def _post_below(self, verts: Tensor, frames: DriveFrames):
        """The post from the scene's post's foot down to the road, for a sign mounted higher than the scene's post
        reaches (``physattack.drive.occlusion.Occluder`` of one polygon, in the sign's coordinates), or None."""
        if len(frames) == 0:
            return None
        foot = -float(verts[:, 1].min())                       # the scene's post ends this far below the face centre
        height = self._sign_height(frames)
        if height < foot - 1e-3:
            raise InputError(f"drive.drives.sign_height_m={height:g} puts the scene's {foot:g}-m post below the road; "
                             f"use a height of at least {foot:g} m (a higher one gets a longer post).")
        if height <= foot + 1e-3:
            return None
        from physattack.drive.occlusion import Occluder
        from physattack.drive.street import POST, _quad

        return Occluder("post", polygons=(_quad(-0.025, 0.025, -height, -foot + 0.01, -0.002, -0.002, POST,
                                                (0, 0, 1)),))

    def _sign_height(self, frames: DriveFrames) -> float:
        """The sign's face centre above the road, in metres."""
        return (frames.sign_height_m if frames.sign_height_m is not None
                else self.dashcam.height_m - float(frames.camera_m[0, 1]))

    def full_region(self) -> Region:
        return 0, 0, self.dashcam.width_px, self.dashcam.height_px

    def scaled(self, factor: float) -> "DriveRenderer":
        """The same drives on a camera with ``factor`` times the pixels per side (videos)."""
        return type(self)(self.renderer, self.backgrounds, self.dashcam.scaled(factor), margin_px=self.margin_px,
                          print_retroreflects=self.print_retroreflects)

    def background(self, params: SceneParams, region: Region) -> Tensor:
        """B×3×h×w: each frame's bank image stretched to the full frame, zoomed by 1/``bg_scale``
        about the vanishing point, seen through ``region``."""
        x0, y0, x1, y1 = region
        w, h = self.dashcam.width_px, self.dashcam.height_px
        vx, vy = self.dashcam.vanishing_point()
        b = len(params)
        zoom = params.bg_scale.float()
        # full-frame pixel centre u -> bank coordinate (normalized to [-1, 1] over the full frame)
        us = torch.arange(x0, x1, dtype=torch.float32) + 0.5
        vs = torch.arange(y0, y1, dtype=torch.float32) + 0.5
        gx = (vx + (us[None] - vx) * zoom[:, None]) / w * 2 - 1
        gy = (vy + (vs[None] - vy) * zoom[:, None]) / h * 2 - 1
        grid = torch.stack([gx[:, None, :].expand(b, len(vs), len(us)), gy[:, :, None].expand(b, len(vs), len(us))], -1)
        imgs = self.backgrounds.images[params.background_index % len(self.backgrounds)]
        return F.grid_sample(imgs, grid.to(imgs.device), mode="bilinear", padding_mode="reflection",
                             align_corners=False)

    def render(self, scene: Scene, texture: Tensor, frames: DriveFrames, region: Region | None = None,
               effects: bool = True, batch: int = 16) -> DriveImages:
        """Render ``frames`` (all of the frame, or its ``region``) with ``texture`` on the scene; the images
        are differentiable in ``texture`` when it requires a gradient (judging passes it detached)."""
        cam_w, cam_h = self.dashcam.width_px, self.dashcam.height_px
        region = self.full_region() if region is None else tuple(int(v) for v in region)
        x0, y0, x1, y1 = region
        if not (0 <= x0 < x1 <= cam_w and 0 <= y0 < y1 <= cam_h):
            raise InputError(f"The region {list(region)} is not inside the {cam_w}×{cam_h} frame.")
        verts = scene.mesh.verts.cpu()
        cams = frames.cameras(self.dashcam)
        windows, ahead = projected_boxes(cams, verts)
        post = self._post_below(verts, frames)
        dash = self.dashcam
        metered = effects and (dash.auto_exposure or dash.auto_white_balance)
        meter = self._meter(frames) if metered else torch.ones(len(frames), 4)     # metered once for the call
        gains = meter[:, 0] if dash.auto_exposure else torch.ones(len(frames))
        images, boxes = [], torch.zeros(len(frames), 4)
        wet = frames.street is not None and frames.weather is not None and frames.weather.wet
        if wet:                                      # each frame's row of the road under the sign: its mirror's axis
            foot = cams.project(torch.tensor([[0.0, -self._sign_height(frames), 0.0]], dtype=cams.R.dtype))[0]
        for start in range(0, len(frames), batch):
            rows = range(start, min(start + batch, len(frames)))
            params = frames.params[start:rows.stop]
            if wet:                                  # the road's mirror, for the sign's reflection in it
                out, gloss, mirror = self._street(frames, start, rows.stop, region, params)
                out = out.to(texture.device)
            else:
                out = self._backdrop(frames, start, rows.stop, region, params, texture.device)
            clear = out.clone() if frames.crest is not None else None     # what the road before a crest shows
            if post is not None:                                   # the post down to the road, behind the sign
                out = post.cover(out, frames[start:rows.stop].cameras(self.dashcam), region, params, frames.weather)
            for j, i in enumerate(rows):
                if not bool(ahead[i]):
                    continue
                wx0, wy0, wx1, wy1 = windows[i].tolist()
                m = self.margin_px
                win = (max(0, math.floor(wx0) - m), max(0, math.floor(wy0) - m),
                       min(cam_w, math.ceil(wx1) + m), min(cam_h, math.ceil(wy1) + m))
                if win[2] <= win[0] or win[3] <= win[1]:
                    continue
                heading, slope = (None if v is None else v[i:i + 1].to(texture.device)
                                  for v in (frames.heading_deg, frames.slope_deg))
                cam = self.dashcam.cameras(frames.camera_m[i:i + 1].to(texture.device), win, frames.yaw_deg, heading,
                                           slope)
                views = self.renderer.render(scene, texture, cam, frames.params[i].to(texture.device).lights())
                if frames.occlusion is not None and frames.occlusion.shadow is not None:
                    unlit = self.renderer.render(scene, texture, cam,
                                                 ambient_only(frames.params[i]).to(texture.device).lights())
                    views = replace(views, images=frames.occlusion.shade(views.images, unlit.images, cam))
                if frames.headlights is not None:
                    lit = headlit(self.renderer, scene, texture, cam, views.alpha, frames.headlights,
                                  frames.camera_m[i:i + 1], self.print_retroreflects)
                    views = replace(views, images=views.images + lit)
                if frames.weather is not None and frames.weather.visibility_m is not None:
                    views = replace(views, images=fogged(views.images, views.alpha, float(frames.params.distance_m[i]),
                                                         frames.weather, frames.params[i]))
                if float(views.boxes[0, 2]) > 0:
                    boxes[i] = views.boxes[0].cpu() + torch.tensor([win[0], win[1], win[0], win[1]]).float()
                if wet:
                    self._reflect(out[j], views, win, float(foot[i, 0, 1]), gloss[j], mirror[j], region)
                # paste the part of the window inside the region, composited over the region's background
                ix0, iy0, ix1, iy1 = max(win[0], x0), max(win[1], y0), min(win[2], x1), min(win[3], y1)
                if ix1 <= ix0 or iy1 <= iy0:
                    continue
                sub = (slice(iy0 - win[1], iy1 - win[1]), slice(ix0 - win[0], ix1 - win[0]))
                dst = (slice(iy0 - y0, iy1 - y0), slice(ix0 - x0, ix1 - x0))
                a = views.alpha[0, :, sub[0], sub[1]]
                bg = out[j, :, dst[0], dst[1]]
                out[j, :, dst[0], dst[1]] = views.images[0, :, sub[0], sub[1]] + bg * (1 - a)   # premultiplied
            if frames.occlusion is not None and frames.occlusion.polygons:
                out = frames.occlusion.cover(out, frames[start:rows.stop].road_cameras(self.dashcam), region,
                                             params, frames.weather, frames.yaw_deg)
            if clear is not None:                       # everything beyond a crest, below the sight line over it
                out = torch.where(self._behind_crest(frames[start:rows.stop], region).to(out.device), clear, out)
            if frames.glare is not None:
                out = out + frames.glare.veil(frames[start:rows.stop].cameras(self.dashcam), region, params).to(out)
            if frames.weather is not None:
                out = add_rain(out, frames.weather, params.noise_seed)
            if effects:
                gain = gains[start:rows.stop]
                if self.dashcam.auto_white_balance:
                    out = out * meter[start:rows.stop, 1:].to(out)[:, :, None, None]
                if self.dashcam.highlights == "rolloff":          # the gain, then the tone curve, before the effects
                    out = roll_off(out * gain.to(out)[:, None, None, None], self.dashcam.knee)
                    gain = torch.ones_like(gain)
                native = replace(params, sensor_px=torch.full((len(params),), float(x1 - x0)),   # no resampling
                                 exposure=params.exposure * gain)
                out = apply_camera_effects(out, native.to(out.device))
            images.append(out.cpu())
        return DriveImages(torch.cat(images), boxes, region)


def frame_background_crop(extents: Tensor, dashcam: Dashcam) -> dict:
    """``SceneParams``' background crop (``bg_x``, ``bg_y``, ``bg_scale``: ``BackgroundBank.crops``) that shows behind
    regions ``extents`` (K×4 full-frame pixels) what ``DriveRenderer.background`` shows there at a drive's first frame:
    the bank image stretched over the whole frame, of which a region spans its share of the frame's width and height
    (a crop is square, so its side is their geometric mean; the zoom over a drive is left out)."""
    w, h = float(dashcam.width_px), float(dashcam.height_px)
    size = ((extents[:, 2] - extents[:, 0]) / w * (extents[:, 3] - extents[:, 1]) / h).sqrt().clamp(max=1.0)
    centre = torch.stack([(extents[:, 0] + extents[:, 2]) / w, (extents[:, 1] + extents[:, 3]) / h], -1) - 1
    room = (1 - size).clamp(min=1e-6)[:, None]
    at = ((centre / room + 1) / 2).clamp(0.0, 1.0)       # BackgroundBank.crops: centre (2x - 1)(1 - scale)
    return {"bg_x": at[:, 0].float(), "bg_y": at[:, 1].float(), "bg_scale": size.float()}


__all__ = ["DriveImages", "DriveRenderer", "frame_background_crop", "roll_off"]
