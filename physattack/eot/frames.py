"""Context frames: what a detector sees — signs at their true size somewhere in a wider camera view.

``ViewPipeline`` renders the crop a two-stage recognizer takes *around* a sign (the sign fills half
the image or more, centred). A detector instead scans a camera frame in which the sign is one small
object among background. Rendering full 1920-px dashcam frames would spend nearly every pixel (and
every millisecond of the EOT loop) on background, so a frame here is a **context crop**: a square
tile of the camera's view whose horizontal field of view ``fov_deg`` is a few times the sign's
angular size, with the sign anywhere inside it. The sign then fills between about 8 % and 60 % of the
tile's width (set by distance and field of view, as in a real camera), its post and the street
around it are in view, and the detector must find it rather than being told where it is.

Everything is a re-framing of existing draws, so the attack loop, the renderer and the view
pipeline stay the same objects:

- ``FrameSampler`` wraps a ``ViewSampler`` (all of its distance, angle, light, camera-effect and
  background ranges are kept) and replaces its framing: ``frame`` (the sign's share of the width)
  follows from the distance and a sampled field of view, the sign's position is drawn over the whole
  tile, and the sensor resolution is that of the tile.
- ``FrameGrid`` does the same to an ``EvalGrid`` with one fixed field of view, so held-out
  evaluation is a fixed, replayable set of frames.
- ``render_frames`` composites several signs (or none) into one frame by depth, for the detector's
  training set, with a ground-truth box for every sign left visible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from physattack.eot.backgrounds import BackgroundBank
from physattack.eot.effects import apply_camera_effects
from physattack.eot.fog import Fog, FogDraw
from physattack.eot.grid import EvalGrid
from physattack.eot.params import SceneParams
from physattack.eot.sampler import ViewSampler
from physattack.errors import check_interval, check_range
from physattack.render.camera import fov_for_width
from physattack.render.renderer import Renderer, mask_boxes
from physattack.scene.scene import Scene

Range = tuple[float, float]

#: Frame-level fields: one light, one set of camera effects and one background per frame.
FRAME_FIELDS = ("ambient", "diffuse", "light_azimuth_deg", "light_elevation_deg", "color_temp_k", "blur_sigma_px",
                "motion_px", "motion_angle_deg", "exposure", "contrast", "noise_std", "jpeg_quality", "noise_seed",
                "background_index", "bg_x", "bg_y", "bg_scale")


def object_share(object_width_m: Tensor | float, distance_m: Tensor, fov_deg: Tensor, bounds: Range) -> Tensor:
    """Share of a frame's width an object ``object_width_m`` wide fills at ``distance_m`` with a
    horizontal field of view ``fov_deg``, held within ``bounds`` (the camera zooms out for a sign too
    near to fit, and in for one too far to see)."""
    share = object_width_m / (2 * distance_m * torch.tan(torch.deg2rad(fov_deg) / 2))
    return share.clamp(*bounds)


def reframe(params: SceneParams, share: Tensor, position: Tensor, object_width_m: float | Tensor,
            sensor_focal_px: float, margin: float = 0.02) -> SceneParams:
    """Put each view's object at ``share`` of the width, at ``position`` (B×2 in [0, 1]) of the
    places where it stays wholly inside the frame; the sensor resolution follows from the frame's
    resulting field of view."""
    room = (0.5 - share / 2 - margin).clamp(min=0)
    shift_x, shift_y = (2 * position[:, 0] - 1) * room, (2 * position[:, 1] - 1) * room
    width = torch.as_tensor(object_width_m, dtype=share.dtype).expand_as(share)
    fov = fov_for_width(width, params.distance_m, share)
    sensor_px = sensor_focal_px * 2 * torch.tan(torch.deg2rad(fov) / 2)
    return replace(params, frame=share, shift_x=shift_x, shift_y=shift_y, sensor_px=sensor_px)


@dataclass
class FrameSampler:
    """Draws context frames of one object (see the module docstring).

    Args:
        view: the sampler whose distance, angle, light, camera-effect and background ranges are used.
        fov_deg: the frame's horizontal field of view, uniform (7°–25°: a 160-px tile of a 1400-px-focal
            dashcam image, downscaled 1–4×).
        object_share: bounds of the share of the frame's width the object fills.
        fog: the fog a share of the frames is seen through (``physattack.eot.fog``; none by default), drawn
            by ``sample_fog``.
    """

    view: ViewSampler = field(default_factory=ViewSampler)
    fov_deg: Range = (7.0, 25.0)
    object_share: Range = (0.08, 0.6)
    fog: FogDraw = field(default_factory=FogDraw)

    def __post_init__(self) -> None:
        check_interval("FrameSampler.fov_deg", self.fov_deg, 0.0, 180.0, lo_open=True, hi_open=True,
                       why="the frame's horizontal field of view in degrees")
        check_interval("FrameSampler.object_share", self.object_share, 0.0, 1.0, lo_open=True,
                       why="the share of the frame's width the object fills")

    @property
    def background_count(self) -> int:
        return self.view.background_count

    @torch.no_grad()
    def sample(self, n: int, generator: torch.Generator) -> SceneParams:
        params = self.view.sample(n, generator)
        lo, hi = self.fov_deg
        fov = lo + (hi - lo) * torch.rand(n, generator=generator)
        share = object_share(self.view.object_width_m, params.distance_m, fov, self.object_share)
        return reframe(params, share, torch.rand(n, 2, generator=generator), self.view.object_width_m,
                       self.view.sensor_focal_px)

    @torch.no_grad()
    def sample_layout(self, n: int, scene_widths_m: list[float], generator: torch.Generator,
                      signs_per_frame: tuple[float, ...] = (0.1, 0.45, 0.3, 0.15),
                      scene_weights: list[float] | None = None) -> "FrameLayout":
        """Draw ``n`` frames holding several signs each (or none).

        Args:
            scene_widths_m: physical width of each scene a slot may hold.
            signs_per_frame: probabilities of 0, 1, 2, … signs in a frame (its length - 1 is the most).
            scene_weights: relative frequency of each scene (default uniform).
        """
        g = generator
        k = len(signs_per_frame) - 1
        per_slot = self.view.sample(n * k, g)
        first = torch.arange(n).repeat_interleave(k) * k        # every slot takes its frame's slot-0 light etc.
        shared = {name: getattr(per_slot, name)[first] for name in FRAME_FIELDS}
        params = replace(per_slot, **shared)
        count = torch.multinomial(torch.tensor(signs_per_frame), n, replacement=True, generator=g)
        weights = torch.tensor(scene_weights if scene_weights else [1.0] * len(scene_widths_m))
        scene = torch.multinomial(weights, n * k, replacement=True, generator=g).view(n, k)
        scene = torch.where(torch.arange(k)[None] < count[:, None], scene, torch.full_like(scene, -1))
        lo, hi = self.fov_deg
        fov = (lo + (hi - lo) * torch.rand(n, generator=g)).repeat_interleave(k)
        widths = torch.tensor(scene_widths_m)[scene.flatten().clamp(min=0)]
        share = object_share(widths, params.distance_m, fov, self.object_share)
        position = _spread_positions(share.view(n, k), scene >= 0, g).view(n * k, 2)
        params = reframe(params, share, position, widths, self.view.sensor_focal_px)
        return FrameLayout(scene_index=scene, params=params,
                           sensor_px=(self.view.sensor_focal_px * 2 * torch.tan(torch.deg2rad(fov) / 2))[::k])

    @torch.no_grad()
    def sample_fog(self, layout: "FrameLayout", generator: torch.Generator) -> "FrameLayout":
        """``layout`` with fog drawn for its frames: one extinction per frame, set by its farthest sign (or,
        in a frame without signs, its first slot's distance), under the frame's light."""
        b, k = layout.scene_index.shape
        distance = layout.params.distance_m.view(b, k)
        far = torch.where(layout.scene_index >= 0, distance, torch.zeros_like(distance)).amax(1)
        far = torch.where(far > 0, far, distance[:, 0])
        light = layout.params[torch.arange(b) * k]
        fog = self.fog.sample(far, light.ambient, light.diffuse, light.lights().color, generator)
        return replace(layout, fog=fog)


def _spread_positions(share: Tensor, active: Tensor, g: torch.Generator, tries: int = 12) -> Tensor:
    """Positions (B×K×2 in [0, 1]) for the signs of each frame, redrawn a few times to keep signs apart."""
    b, k = share.shape
    pos = torch.rand(b, k, 2, generator=g)
    for i in range(b):
        placed: list[tuple[float, float, float]] = []
        for j in range(k):
            if not active[i, j]:
                continue
            s = float(share[i, j])
            room = max(0.0, 0.5 - s / 2 - 0.02)
            for t in range(tries):
                u = pos[i, j] if t == 0 else torch.rand(2, generator=g)
                cx, cy = ((2 * u - 1) * room).tolist()
                if all(abs(cx - px) > (s + ps) / 2 or abs(cy - py) > (s + ps) / 2 for px, py, ps in placed):
                    break
            pos[i, j] = u
            placed.append((cx, cy, s))
    return pos


@dataclass(frozen=True)
class FrameLayout:
    """B frames of up to K signs each.

    Shape:
        scene_index: B×K, an index into the frame's scenes, -1 for an empty slot.
        params: SceneParams of the B·K sign views, row ``b·K + k`` for slot k of frame b; light,
            camera effects and background are the same for every slot of a frame.
        sensor_px: B, the frame's native width in sensor pixels.
        fog: per frame, the fog it is seen through (None: clear air).
    """

    scene_index: Tensor
    params: SceneParams
    sensor_px: Tensor
    fog: Fog | None = None

    def __len__(self) -> int:
        return self.scene_index.shape[0]


@dataclass(frozen=True)
class Frames:
    """Rendered frames with their ground truth.

    Shape:
        images: B×3×H×W in [0, 1]. boxes: B tensors M_b×4 (x0, y0, x1, y1) in pixels of the visible
        part of each sign. scene_index: B tensors M_b, which scene each box is.
    """

    images: Tensor
    boxes: list[Tensor]
    scene_index: list[Tensor]


@torch.no_grad()
def render_frames(renderer: Renderer, backgrounds: BackgroundBank, scenes: list[Scene], layout: FrameLayout,
                  image_size: tuple[int, int], min_visible: float = 0.5, min_box_px: float = 3.0) -> Frames:
    """Render ``layout``: each sign on its own, composited far to near over the frame's background.

    A frame with ``layout.fog`` sees its background and each sign through that fog, by their own depths.
    A sign's box is that of its visible face (its post excluded, nearer signs and posts cut away); a
    sign less than ``min_visible`` visible, or whose box is under ``min_box_px`` on a side, gets no box.
    """
    b, k = layout.scene_index.shape
    h, w = image_size
    flat = layout.scene_index.flatten()
    rgb = torch.zeros(b * k, 3, h, w)
    alpha = torch.zeros(b * k, 1, h, w)
    face = torch.zeros(b * k, 1, h, w)
    for s in flat.unique().tolist():
        if s < 0:
            continue
        rows = torch.nonzero(flat == s).flatten()
        p = layout.params[rows]
        scene = scenes[s]
        views = renderer.render(scene, scene.texture, p.cameras(max(scene.texture_size_m), image_size), p.lights())
        rgb[rows], alpha[rows], face[rows] = views.images, views.alpha, views.object_mask
    rgb, alpha, face = (t.view(b, k, *t.shape[1:]) for t in (rgb, alpha, face))
    depth = torch.where(layout.scene_index >= 0, layout.params.distance_m.view(b, k), torch.full((b, k), math.inf))
    frame_params = layout.params[torch.arange(b) * k]
    out = backgrounds.crops(frame_params.background_index, frame_params.bg_x, frame_params.bg_y,
                            frame_params.bg_scale, image_size)
    fog = layout.fog
    if fog is not None:
        out = fog.background(out)
    order = depth.argsort(dim=1, descending=True)
    idx = torch.arange(b)
    for r in range(k):
        j = order[:, r]
        layer = rgb[idx, j]
        if fog is not None:                     # an empty slot's depth is infinite and its layer empty
            layer = fog.over(layer, alpha[idx, j], depth[idx, j].nan_to_num(posinf=0.0))
        out = out * (1 - alpha[idx, j]) + layer
    boxes, labels = [], []
    for i in range(b):
        keep_b, keep_l = [], []
        for j in range(k):
            if layout.scene_index[i, j] < 0:
                continue
            nearer = (depth[i] < depth[i, j])
            cover = alpha[i, nearer].sum(0).clamp(max=1) if nearer.any() else torch.zeros_like(face[i, j])
            visible = face[i, j] * (1 - cover)
            if float(visible.sum()) < min_visible * float(face[i, j].sum()) or float(face[i, j].sum()) == 0:
                continue
            box = mask_boxes(visible[None])[0]
            if float(box[2] - box[0]) < min_box_px or float(box[3] - box[1]) < min_box_px:
                continue
            keep_b.append(box)
            keep_l.append(int(layout.scene_index[i, j]))
        boxes.append(torch.stack(keep_b) if keep_b else torch.zeros(0, 4))
        labels.append(torch.tensor(keep_l, dtype=torch.long))
    images = apply_camera_effects(out, replace(frame_params, sensor_px=layout.sensor_px))
    return Frames(images=images, boxes=boxes, scene_index=labels)


@dataclass
class FrameGrid:
    """The held-out grid (an ``EvalGrid``: azimuth × distance × lighting presets, held-out backgrounds)
    seen as context frames with one fixed field of view; each view's position in the frame is fixed
    by ``seed``.

    Args:
        grid: the evaluation grid whose conditions are kept.
        fov_deg: the frames' horizontal field of view (12°: the stop sign fills 60 % of the width at
            4 m and 16 % at 22 m).
        object_share: bounds of the share of the width the object fills.
        seed: seed of the positions.
    """

    grid: EvalGrid = field(default_factory=EvalGrid)
    fov_deg: float = 12.0
    object_share: Range = (0.1, 0.6)
    seed: int = 2000

    def __post_init__(self) -> None:
        check_range("FrameGrid.fov_deg", self.fov_deg, 0.0, 180.0, lo_open=True, hi_open=True,
                    why="the frames' horizontal field of view in degrees")
        check_interval("FrameGrid.object_share", self.object_share, 0.0, 1.0, lo_open=True,
                       why="the share of the frame's width the object fills")
        check_range("FrameGrid.seed", self.seed, integer=True)

    def conditions(self) -> list[dict]:
        return self.grid.conditions()

    def __len__(self) -> int:
        return len(self.grid)

    @property
    def background_count(self) -> int:
        return self.grid.background_count

    def params(self) -> SceneParams:
        params = self.grid.params()
        n = len(params)
        share = object_share(self.grid.object_width_m, params.distance_m, torch.full((n,), self.fov_deg),
                             self.object_share)
        position = torch.rand(n, 2, generator=torch.Generator().manual_seed(self.seed))
        return reframe(params, share, position, self.grid.object_width_m, self.grid.sensor_focal_px)
