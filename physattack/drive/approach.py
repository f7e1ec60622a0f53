"""EOT over approach windows: the decision-level objective (issue 26).

A car does not judge independent views; it recognises the sign when ``k`` of the last ``n`` frames
before its braking point read it (``physattack.drive.judge``). A patch that wins most views can still
lose every drive, because the few frames it loses sit together. So each optimizer step here draws
``drives`` random approaches (speed, lane offset, light, camera effects, background) and, in each,
``segments`` runs of ``n`` consecutive dashcam frames (30 fps), spread over the part of the approach
where a recognition still stops the car (from ``start_m`` down to the braking distance). Every frame is
one view of the sign as the two-stage stack sees it: the detector's box around the sign, the square crop
around the box (the box ``crop_frame`` of the crop), at the resolution the dashcam really has there.

**The framing is the detector's** (``physattack.drive.framing``). ``DetectorFraming`` renders frames of
sampled drives with the current patch, runs the stack's own detector over its tiles (``TiledDetector``) and
keeps, by distance, whether it found the sign and how its box was off (size and centre, as shares of the sign's
own box). Each view then draws a measurement from the ones nearest its distance: a missed frame reads nothing
(it cannot stop the car), a found one is cropped as that box would have been. The measurements are refitted
every ``refit_every`` steps as the patch changes (a patch that makes the detector miss or misplace the sign
changes the crops the classifier sees).

**Detectors** (``attack=hide``) read the same windows as the drive's detector stack does: each frame is
read on every tile of the stack's search (``physattack.drive.stacks.SearchTiles``: its scales, regions and
overlaps, from ``conf/drive``'s ``stack``) that holds the sign whole, the sign where that tile has it and at
that tile's scale, and the frame reads the sign when any of its tiles does (``for_detector``). One tile per
frame is not enough: the drive's detector reads a far sign at 2× *and* at the sensor's own resolution, in
two to four overlapping tiles, and a patch that hides it from one tile in three still leaves it found in
most frames. A frame reads the sign with the odds of the detector's best candidate on it over the operating
threshold's.

The loss (``ApproachObjective``) is the per-view objective plus ``weight`` times a hinge on each drive's
smooth-maximum window count (``physattack.drive.surrogate.stop_margin``): the gradient goes to the windows
that would still stop the car. A step's success is the share of its drives in which no window reaches
``k`` readings (the judge's rule on the drawn frames).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from physattack.drive.judge import check_vote
from physattack.drive.surrogate import stop_margin
from physattack.drive.conditions import Conditions
from physattack.drive.framing import BoxMeasurements, DetectorFraming, Framing
from physattack.drive.render import frame_background_crop
from physattack.drive.seen import SeenRows, SeenSettings
from physattack.drive.trajectories import Dashcam, braking_distance_m, face_corners, projected_boxes, random_drives
from physattack.eot.params import SceneParams
from physattack.eot.sampler import ViewSampler, _uniform, sensor_pixels
from physattack.errors import InputError, check_interval, check_range

Range = tuple[float, float]


#: the held-out drives' camera (conf/drive: ``blur_sigma_px`` 0.4, ``noise_std`` 0.01, the ``default`` effects preset)
CLEAN_CAMERA = {"blur_sigma_px": 0.4, "motion_px": 1.0, "exposure": 1.0, "contrast": 1.0, "noise_std": 0.01,
                "jpeg_quality": 100.0}


@dataclass
class ApproachObjective:
    """The decision-level loss of a step's windows.

    Args:
        k, n: the judge's rule (``drive.settings``): recognised when ``k`` of the last ``n`` frames read the sign.
        weight: of the drives' stop margin beside the per-view objective.
        temperature: of the smooth maximum over a drive's windows, in frames.
        every_window: the drawn windows stand for all of their drive's before its braking point (``stop_margin``'s
            ``windows``): the car judges every one of them, a step draws a few.
        threshold_scale: a detector's (attack=hide) frames are read against its score threshold times this
            (``sign_reading``): below 1 the loss keeps pushing scores that sit just under the real threshold, a
            margin for the held-out frames where a detector reads the far sign within a few hundredths of it.
    """

    k: int = 3
    n: int = 5
    weight: float = 4.0
    temperature: float = 0.5
    every_window: bool = False
    threshold_scale: float = 1.0

    def __post_init__(self) -> None:
        key = "eot.sampler.decision."
        check_vote(key, self.k, self.n)
        check_range(key + "weight", self.weight, 0.0, why="the drives' stop margin's weight")
        check_range(key + "temperature", self.temperature, 0.0, lo_open=True, why="the smooth maximum's, in frames")
        check_range(key + "threshold_scale", self.threshold_scale, 0.0, 1.0, lo_open=True,
                    why="a share of the detector's score threshold")


@dataclass(frozen=True)
class Windows:
    """One step's views: ``drives × segments × n`` frames of approach windows, in that order, then any
    independent views (``ApproachSampler.views``); ``found`` (one per window frame): whether the detector
    found the sign there (a missed frame reads nothing)."""

    params: SceneParams
    found: Tensor
    drives: int
    segments: int
    objective: ApproachObjective
    group: Tensor | None = None
    usable: Tensor | None = None     # drives: each drive's windows before its braking point (its usable frames)
    places: Tensor | None = None     # drives×segments×3: each window's drive speed (km/h), lane offset (m), first (m)
    memory: "ReplayMemory | None" = None   # where ``success`` puts the windows that stopped the car (``replay``)
    seen: SeenRows | None = None     # some window frames on the stack detector's tiles that hold the sign (``seen``)

    @property
    def frames(self) -> int:
        """The window rows of ``params`` (before any independent views): one per frame, or per tile of a frame."""
        return len(self.found)

    def _read(self, per_view: Tensor) -> Tensor:
        """drives×segments×n: each window frame's value where the detector found the sign, else 0 (the largest
        over its tiles when a frame has several)."""
        x = per_view[:self.frames] * self.found.to(per_view.device, per_view.dtype)
        if self.group is not None:
            slots = self.drives * self.segments * self.objective.n
            x = x.new_zeros(slots).scatter_reduce(0, self.group.to(x.device), x, "amax", include_self=True)
        return x.reshape(self.drives, self.segments, -1)

    def margin(self, p_sign: Tensor) -> Tensor:
        """drives: the stop margin of each drive (``stop_margin``) from each view's probability of the sign."""
        o = self.objective
        return stop_margin(self._read(p_sign), o.k, o.n, temperature=o.temperature,
                           windows=self.usable if o.every_window else None)

    def stopped(self, reads_sign: Tensor) -> Tensor:
        """drives×segments bool: the window (or one of fewer frames at its start) holds ``k`` frames the victim
        reads as the sign."""
        hits = self._read(reads_sign.float())
        n = self.objective.n
        counts = torch.nn.functional.pad(hits, (n - 1, 0)).unfold(-1, n, 1).sum(-1)
        return (counts >= self.objective.k).any(-1)

    def runs(self, reads_sign: Tensor) -> Tensor:
        """drives bool: no window of the drive (nor one of fewer frames at a segment's start) holds ``k`` frames
        the victim reads as the sign."""
        return ~self.stopped(reads_sign).any(-1)

    def success(self, reads_sign: Tensor, view_success: Tensor) -> Tensor:
        """The step's success: the share of its drives that run the sign, averaged with the share of its
        independent views (if any) that the per-view objective wins. The windows that stopped the car go to the
        sampler's replay memory, when it keeps one (``ApproachSampler.replay``)."""
        if self.memory is not None and self.places is not None:
            self.memory.add(self.places[self.stopped(reads_sign).cpu()])
        drives = self.runs(reads_sign).float().mean()
        extra = view_success[self.frames:]
        return drives if len(extra) == 0 else (drives + extra.float().mean()) / 2


class ReplayMemory:
    """The last ``size`` approach windows that stopped the car (rows of speed km/h, lane offset m, first frame's
    distance m), for ``ApproachSampler.replay``: the drives' stops come at a few places (a lane, a distance where a
    tile frames the far sign just so) that random windows seldom hit, so a step redraws some of them."""

    def __init__(self, size: int = 64, rows: Tensor | None = None):
        self.size = size
        self.rows = torch.zeros(0, 3) if rows is None else rows.reshape(-1, 3).float()

    def add(self, rows: Tensor) -> None:
        self.rows = torch.cat([self.rows, rows.reshape(-1, 3).float()])[-self.size:]

    def __len__(self) -> int:
        return len(self.rows)


@dataclass
class ApproachSampler:
    """Approach windows of random drives, framed by the detector (see the module docstring).

    Args:
        dashcam: the car's camera.
        speed_kmh, lane_offset_m: uniform ranges of the drives' speed and the sign's offset from the car's path.
        start_m: the sign's distance at a drive's first frame.
        fps: frame rate.
        sign_height_m: the sign's centre above the road.
        reaction_s, decel_mps2: the braking rule (``drive.settings``): frames nearer than the braking distance
            are not drawn (a recognition there is too late to stop).
        drives, segments: drives per step, and windows of ``decision.n`` consecutive frames per drive.
        band_m: (near, far), the sign's distances in metres where a drive's windows after its first may start
            (clipped to the braking point and the first frame), and where its ``every_window`` count of windows is
            taken; None: anywhere before the braking point. A band of the far frames trains the patch where a
            stack that still stops the car first reads the sign (the held-out stacks at 55-79 m, issue 28).
        crop_frame: the detector box's longer side as a share of the classifier's crop (the stack's); None: the
            run's ``eot.grid.frame``, which the builder sets (``with_crop_frame``).
        decision: the loss (``ApproachObjective``).
        refit_every: steps between fits of the detector framing (``DetectorFraming``); 0 fits once.
        fit: how each fit measures the detector: ``drives``, ``frames_per_drive``, ``neighbours``, ``by``
            (``DetectorFraming``'s arguments).
        view: everything but the camera's place and the crop's framing (light, camera effects, background);
            its ``frame``/``shift`` frame the views when no detector framing is attached.
        background_count: images in the background bank (passed on to ``view`` and ``views``).
        views, views_per_step: independent views (a ``ViewSampler``, e.g. the default EOT's 3-25 m crops) added to
            each step with the per-view objective alone, so that the patch also wins the views a close-range test
            takes; 0 adds none.
        clean_camera: the share of drives filmed by the held-out drives' own camera (``CLEAN_CAMERA``: conf/drive's
            blur and noise, no motion blur, exposure, contrast or JPEG) instead of ``view``'s drawn effects. A car's
            verdict turns on the frames it reads best, and those are the sharp ones: a patch fitted only to the
            drawn (mostly degraded) frames hides in them and is read in the clean ones.
        conditions: the drives' light and weather (``physattack.drive.conditions.Conditions``: shares in fog, at
            night in the headlights, at dusk); none by default. The detector framing's drives are drawn in the same
            shares, and a view draws the boxes measured in its own conditions.
        framing: a classifier's detector framing (``DetectorFraming``; the builder attaches it).
        tiles: a detector's windows: the drive stack's search tiles (``physattack.drive.stacks.SearchTiles``), which
            ``for_detector`` sets.
        tile_share: a detector's: each window frame is read on the tiles that hold the sign whole (1) or also on
            every tile holding at least this share of its box (``SearchTiles.reading``): the drive's detector scans
            the tiles near the sign, and one whose edge cuts it finds the part it shows (a box overlapping the
            sign's by the stack's ``iou``, 0.3, reads it), so 0.3 puts those tiles in the windows too.
        background: what each window frame shows behind the sign. ``view``: ``view``'s crop of a bank image (a share
            ``bg_scale`` of it, 0.35-1, filling the crop or tile); ``frame``: what that crop (a classifier's) or tile
            (a detector's) of a drive's frame shows (``physattack.drive.render.frame_background_crop``: the bank image
            stretched over the whole frame, of which a far sign's crop or tile spans 1-8 %), so a far sign stands
            against the smooth sky or hill it has in the drives, not a whole scene shrunk behind it.
        replay: the share of each step's drives that redraw a window which stopped the car in an earlier step (one
            of the last 64, ``ReplayMemory``): its speed, lane offset and distance as its last window, its light,
            camera effects and background drawn afresh. The drives are lost at a few places that random windows
            seldom draw; 0 (the default) draws every drive afresh.
        seen: a classifier's: ``physattack.drive.seen.SeenSettings``, a term that keeps the stack's detector reading
            the whole sign on the tiles of a few window frames a step (``Windows.seen``: those tiles' rows); off by
            default.
    """

    dashcam: Dashcam = field(default_factory=Dashcam)
    speed_kmh: Range = (25.0, 75.0)
    lane_offset_m: Range = (2.0, 8.0)
    start_m: float = 80.0
    fps: float = 30.0
    sign_height_m: float = 2.1
    reaction_s: float = 1.0
    decel_mps2: float = 6.0
    drives: int = 4
    segments: int = 2
    band_m: Range | None = None
    crop_frame: float | None = 0.62
    decision: ApproachObjective = field(default_factory=ApproachObjective)
    refit_every: int = 100
    fit: dict = field(default_factory=lambda: {"drives": 6, "frames_per_drive": 8, "neighbours": 6})
    view: ViewSampler = field(default_factory=ViewSampler)
    background_count: int | None = None
    views: ViewSampler | None = None
    views_per_step: int = 0
    clean_camera: float = 0.0
    conditions: Conditions = field(default_factory=Conditions)
    framing: DetectorFraming | None = None
    tiles: object | None = None     # a detector's: physattack.drive.stacks.SearchTiles, the drive stack's tiling
    tile_share: float = 1.0
    background: str = "view"
    replay: float = 0.0
    seen: SeenSettings = field(default_factory=SeenSettings)

    def __post_init__(self) -> None:
        key = "eot.sampler."
        if isinstance(self.dashcam, dict):
            self.dashcam = Dashcam(**self.dashcam)
        if isinstance(self.view, dict):
            self.view = ViewSampler.under(key + "view.", self.view)
        if isinstance(self.decision, dict):
            self.decision = ApproachObjective(**self.decision)
        if isinstance(self.views, dict):
            self.views = ViewSampler.under(key + "views.", self.views)
        if isinstance(self.conditions, dict):
            self.conditions = Conditions(**self.conditions)
        self.seen = SeenSettings.of(self.seen)
        if self.background_count is not None:
            self.view = replace(self.view, background_count=self.background_count)
            if isinstance(self.views, ViewSampler):
                self.views = replace(self.views, background_count=self.background_count)
        check_range(key + "views_per_step", self.views_per_step, 0, integer=True, why="independent views per step")
        if self.views_per_step and self.views is None:
            raise InputError(f"{key}views_per_step={self.views_per_step} needs {key}views, the sampler of those views.")
        check_interval(key + "speed_kmh", self.speed_kmh, 0.0, lo_open=True, why="the cars' speeds in km/h")
        check_interval(key + "lane_offset_m", self.lane_offset_m, 0.0, why="metres from the car's path to the sign")
        check_range(key + "start_m", self.start_m, 0.0, lo_open=True, why="the sign's distance at the first frame, m")
        check_range(key + "fps", self.fps, 0.0, lo_open=True, why="frames per second")
        check_range(key + "sign_height_m", self.sign_height_m, 0.0, lo_open=True, why="metres above the road")
        check_range(key + "reaction_s", self.reaction_s, 0.0, why="reaction time in seconds")
        check_range(key + "decel_mps2", self.decel_mps2, 0.0, lo_open=True, why="braking deceleration in m/s²")
        check_range(key + "drives", self.drives, 1, integer=True, why="drives per step")
        check_range(key + "segments", self.segments, 1, integer=True, why="windows per drive")
        if self.band_m is not None:
            self.band_m = check_interval(key + "band_m", self.band_m, 0.0, self.start_m,
                                         why="the sign's distances in metres where later windows start, nearer "
                                             f"than the first frame (eot.sampler.start_m={self.start_m:g})")
        if self.crop_frame is not None:
            check_range(key + "crop_frame", self.crop_frame, 0.0, 1.0, lo_open=True,
                        why="the detector box's share of the classifier's crop")
        check_range(key + "clean_camera", self.clean_camera, 0.0, 1.0, why="the share of drives filmed by the drives' "
                    "own camera")
        check_range(key + "refit_every", self.refit_every, 0, integer=True, why="steps between framing fits")
        check_range(key + "tile_share", self.tile_share, 0.0, 1.0, lo_open=True,
                    why="the least share of the sign's box a tile must hold to read a window frame on it")
        check_range(key + "replay", self.replay, 0.0, 1.0, why="the share of a step's drives that redraw a window "
                    "which stopped the car")
        self._memory = ReplayMemory() if self.replay else None
        if self.background not in ("view", "frame"):
            raise InputError(f"{key}background={self.background!r} is not a background a window frame can show: "
                             "choose view (the view sampler's crop of a bank image) or frame (that part of a drive's "
                             "frame).")
        fastest = self.speed_kmh[1]
        brake = braking_distance_m(fastest, self.reaction_s, self.decel_mps2)
        window_m = self.decision.n * fastest / 3.6 / self.fps
        if brake + window_m >= self.start_m:
            raise InputError(f"At {fastest:g} km/h (eot.sampler.speed_kmh) the braking distance is {brake:.1f} m, so "
                             f"no window of {self.decision.n} frames fits between it and the first frame at "
                             f"eot.sampler.start_m={self.start_m:g}: lower the speed or start farther away.")

    def with_crop_frame(self, frame: float) -> "ApproachSampler":
        """This sampler, its crops framed as ``frame`` when its own ``crop_frame`` is None."""
        if self.crop_frame is None:
            self.crop_frame = float(frame)
        return self

    def for_detector(self, tile_px: int, stack=None) -> "ApproachSampler":
        """This sampler with its window frames read as the drive's detector stack reads them: on each tile of the
        stack's search (``stack``: a ``physattack.drive.stacks.StackSettings``, its defaults when None, for a
        ``tile_px`` detector) that holds the sign whole; its independent views as context frames
        (``physattack.eot.frames.FrameSampler``) of the same size. The detector reads the tiles itself: no
        detector framing."""
        from physattack.drive.stacks import SearchTiles, StackSettings
        from physattack.eot.frames import FrameSampler

        check_range("tile_px", tile_px, 8, integer=True, why="the detector's input side")
        width = self.view.object_width_m
        search = SearchTiles(int(tile_px), self.dashcam, (width, width), stack or StackSettings())
        views = self.views
        if self.tiles is not None:                       # already a detector's: only the tiling changes
            return replace(self, tiles=search)
        return replace(self, tiles=search, framing=None, views=FrameSampler(views) if views is not None else None)

    # -- the view-sampler interface --------------------------------------------------------------------
    @property
    def object_width_m(self) -> float:
        return self.view.object_width_m

    @property
    def memory(self) -> "ReplayMemory | None":
        """The windows that stopped the car in earlier steps (``replay``); None when ``replay`` is 0."""
        return self._memory

    @property
    def sensor_focal_px(self) -> float:
        return self.dashcam.focal_px

    @property
    def batch_size(self) -> int:
        """Views per step: drives × segments × n window frames (a detector's: the tiles that hold them, as one
        fixed draw has them; a step's own count varies with its drives), and the independent views."""
        rows = self.drives * self.segments * self.decision.n
        if self.tiles is not None:
            rows = self.windows(torch.Generator().manual_seed(0)).frames
        return rows + self.views_per_step

    def sample(self, n: int, generator: torch.Generator) -> SceneParams:
        """``n`` views of approach windows (for whatever wants plain views: the sticker mask search)."""
        parts, left = [], n
        while left > 0:
            w = self.windows(generator)
            parts.append(w.params[:min(left, len(w.params))])
            left -= len(parts[-1])
        return SceneParams.cat(parts)

    def _tiled(self, params: SceneParams, x: Tensor, y: Tensor, along_m: Tensor, search=None,
               share: float | None = None) -> tuple[SceneParams, Tensor]:
        """``params`` (one per window frame, the sign ``x`` right and ``y`` below the camera, ``along_m`` ahead)
        as the rows of the tiles the drive's detector reads each frame on (``search``'s ``reading``: a
        ``SearchTiles``, ``tiles`` when None; tiles holding ``share`` of the sign's box, ``tile_share`` when None):
        the sign at its place and size in each tile (partly outside a tile that cuts it); returns the rows and the
        frame of each."""
        search = self.tiles if search is None else search
        boxes = self._boxes(x, y, along_m)
        share = self.tile_share if share is None else share
        frame, tile = torch.nonzero(search.reading(boxes, share), as_tuple=True)
        scale, origin, b = search.tile_scales[tile], search.extents[tile, :2], boxes[frame]
        side = float(search.tile)
        share = (b[:, 2] - b[:, 0]) * scale / side
        centre = ((b[:, :2] + b[:, 2:]) / 2 - origin) * scale[:, None] / side - 0.5
        rows = replace(params[frame], frame=share.float(), shift_x=centre[:, 0].float(), shift_y=centre[:, 1].float(),
                       sensor_px=(side / scale).float())
        if self.background == "frame":
            rows = replace(rows, **frame_background_crop(search.extents[tile], self.dashcam))
        return rows, frame

    def _boxes(self, x: Tensor, y: Tensor, along_m: Tensor) -> Tensor:
        """The sign's box in the dashcam's frame (px, float64) at ``x`` right, ``y`` below and ``along_m`` ahead."""
        width = self.view.object_width_m
        points = torch.stack([x, y, along_m], -1).double()
        boxes, _ = projected_boxes(self.dashcam.cameras(points), face_corners((width, width)).double())
        return boxes

    def _framing(self, x: Tensor, y: Tensor, dist: Tensor, condition: Tensor, g: torch.Generator) -> Framing:
        """One drawn detector measurement per window frame (``x``, ``y``, ``dist``: drives×segments×n, the sign's
        place; ``condition``: per drive): each frame's own, or with ``fit.per=window`` the one drawn for its
        window's first frame."""
        framing, n = self.framing, dist.shape[-1]
        every = (x, y, dist)
        if framing.draw.per == "window":
            x, y, dist = x[..., :1], y[..., :1], dist[..., :1]
        reps = dist.shape[1] * dist.shape[2]
        place = None
        if framing.draw.by == "place":
            b = self._boxes(x.reshape(-1), y.reshape(-1), dist.reshape(-1))
            place = torch.cat([(b[:, :2] + b[:, 2:]) / 2, (b[:, 2:] - b[:, :2]).amax(1, keepdim=True)], 1)
        f = framing.sample(dist.reshape(-1), g, place, condition.repeat_interleave(reps) if self.conditions.any
                           else None)
        if framing.draw.per == "window":
            f = Framing(*(t.repeat_interleave(n) for t in (f.found, f.ratio, f.dx, f.dy)))
        if framing.draw.edge:
            boxes = self._boxes(*(t.reshape(-1) for t in every))
            f = framing.at_tile_edges(f, boxes, torch.arange(boxes.shape[0]) // n, g)
        return f

    def state_dict(self) -> dict:
        """The detector framing's measurements and the replay memory (plain tensors, for checkpoints): a resumed
        run frames and redraws its views as the interrupted one did until the next fit."""
        m = self.framing.measured if self.framing is not None else None
        state = {} if m is None else {k: getattr(m, k) for k in BoxMeasurements.__dataclass_fields__}
        if self._memory is not None:
            state["replay_memory"] = self._memory.rows.clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        state = dict(state)
        rows = state.pop("replay_memory", None)
        if self._memory is not None and rows is not None:
            self._memory = ReplayMemory(self._memory.size, rows)
        if self.framing is not None:        # none kept: the next step fits it again (refit_due)
            self.framing.measured = BoxMeasurements(**state) if state else None

    # -- approach windows -----------------------------------------------------------------------------
    def braking_m(self, speed_kmh: Tensor) -> Tensor:
        v = speed_kmh / 3.6
        return v * self.reaction_s + v * v / (2 * self.decel_mps2)

    def refit_due(self, step: int) -> bool:
        """Whether ``refit`` at ``step`` fits the detector framing: at step 0 (or after a resume that kept none)
        and every ``refit_every`` steps; never without a framing attached."""
        if self.framing is None:
            return False
        return step == 0 or self.framing.measured is None or bool(self.refit_every and step % self.refit_every == 0)

    def refit(self, step: int, scene, texture: Tensor, generator: torch.Generator) -> BoxMeasurements | None:
        """Fit the detector framing on drives drawn with ``generator`` when it is due (``refit_due``)."""
        if not self.refit_due(step):
            return None
        drives = random_drives(self.framing.drives, self.speed_kmh, self.lane_offset_m, self.view.background_count,
                               generator, start_m=self.start_m, fps=self.fps, sign_height_m=self.sign_height_m)
        drives = self.framing.on_streets(self.conditions.on_drives(drives, generator), generator)
        braking = self.braking_m(torch.tensor([d.speed_kmh for d in drives]))
        return self.framing.fit(scene, texture, drives, [float(b) for b in braking])

    @torch.no_grad()
    def windows(self, generator: torch.Generator) -> Windows:
        g = generator
        d, s, n = self.drives, self.segments, self.decision.n
        speed = _uniform(d, self.speed_kmh, g)
        offset = _uniform(d, self.lane_offset_m, g)
        again = self._replayed(d, g)                                      # drives×3 rows of the memory, or none
        speed[:len(again)], offset[:len(again)] = again[:, 0], again[:, 1]
        brake = self.braking_m(speed)
        step_m = speed / 3.6 / self.fps                                   # metres per frame
        near, far = brake, torch.full_like(brake, self.start_m)
        if self.band_m is not None:     # a band nearer than a fast drive's braking point keeps one window at it
            near = brake.clamp(min=self.band_m[0])
            far = torch.maximum(torch.full_like(brake, self.band_m[1]), near + (n - 1) * step_m).clamp(max=self.start_m)
        span = (far - near - (n - 1) * step_m).clamp(min=0.0)            # where a later window's first frame can be
        # the first segment is the drive's first frames (where a far sign, 9 px wide, is hardest to disguise, and
        # where the judge already counts windows of fewer than n frames); the others start in equal parts of the rest
        rest = s - 1
        later = (torch.arange(rest)[None, :] + torch.rand(d, rest, generator=g)) / max(1, rest)
        first = torch.cat([torch.full((d, 1), self.start_m), far[:, None] - later * span[:, None]], 1)   # d×s
        if len(again):      # a replayed drive's last window is the remembered one (within its drive's reach)
            k = len(again)
            first[:k, -1] = torch.maximum(torch.minimum(again[:, 2], far[:k]), near[:k] + (n - 1) * step_m[:k])
        dist = first[..., None] - torch.arange(n)[None, None, :] * step_m[:, None, None]      # d×s×n
        x = (-offset)[:, None, None].expand_as(dist)
        y = torch.full_like(dist, self.dashcam.height_m - self.sign_height_m)
        rng = torch.sqrt(x * x + y * y + dist * dist)
        base = self.view.sample(d, g)
        if self.clean_camera:
            clean = torch.rand(d, generator=g) < self.clean_camera
            base = replace(base, **{k: torch.where(clean, torch.full_like(getattr(base, k), v), getattr(base, k))
                                    for k, v in CLEAN_CAMERA.items()})
        base, condition = self.conditions.draw(base, g)
        per = lambda t: t.repeat_interleave(s * n)  # noqa: E731
        flat = lambda t: t.reshape(-1)  # noqa: E731
        count = d * s * n
        if self.framing is not None and self.framing.measured is not None:
            f = self._framing(x, y, dist, condition, g)
            found = f.found
            frame = self.crop_frame / f.ratio.clamp(min=0.2)
            shift_x, shift_y = -f.dx * frame, -f.dy * frame
        else:
            found = torch.ones(count, dtype=torch.bool)
            frame, shift_x, shift_y = per(base.frame), per(base.shift_x), per(base.shift_y)
        fields = {name: per(getattr(base, name)) for name in SceneParams.__dataclass_fields__}
        fields.update(
            distance_m=flat(rng), azimuth_deg=flat(torch.rad2deg(torch.atan2(x, dist))),
            elevation_deg=flat(torch.rad2deg(torch.asin(y / rng))), frame=frame, shift_x=shift_x, shift_y=shift_y,
            sensor_px=sensor_pixels(self.view.object_width_m, flat(rng), frame, self.dashcam.focal_px),
            noise_seed=torch.randint(0, 2**31 - 1, (count,), generator=g))
        params, group = SceneParams(**fields), None
        if self.background == "frame" and self.tiles is None:       # the crop's part of the frame
            box = self._boxes(flat(x), flat(y), flat(dist))
            side = (box[:, 2] - box[:, 0]) / frame.double()
            centre = (box[:, :2] + box[:, 2:]) / 2 - torch.stack([shift_x, shift_y], -1).double() * side[:, None]
            crop = torch.cat([centre - side[:, None] / 2, centre + side[:, None] / 2], 1)
            params = replace(params, **frame_background_crop(crop, self.dashcam))
        seen = self._seen(params, flat(x), flat(y), flat(dist), g) if self.tiles is None else None
        if self.tiles is not None:
            params, group = self._tiled(params, flat(x), flat(y), flat(dist))
            found = found[group]
        if self.views_per_step:
            params = SceneParams.cat([params, self.views.sample(self.views_per_step, g)])
        usable = ((far - near) / step_m).floor().clamp(min=0) + 1       # the windows the drawn ones stand for
        places = torch.stack([speed[:, None].expand(d, s), offset[:, None].expand(d, s), first], -1)
        return Windows(params, found, d, s, self.decision, group, usable, places, self._memory, seen)

    def _seen(self, params: SceneParams, x: Tensor, y: Tensor, dist: Tensor, g: torch.Generator) -> SeenRows | None:
        """``seen.frames`` window frames drawn at random, as the rows of the stack detector's tiles that hold the
        sign whole (``seen``); None when the term is off or no detector framing is attached (nothing drawn then)."""
        if not self.seen.on or self.framing is None:
            return None
        pick = torch.randperm(len(dist), generator=g)[:self.seen.frames]
        return SeenRows(*self._tiled(params[pick], x[pick], y[pick], dist[pick], self.framing.tiled.search, 1.0))

    def _replayed(self, drives: int, g: torch.Generator) -> Tensor:
        """k×3: the remembered windows this step's first k drives redraw (``replay``); none while the memory is
        empty or ``replay`` is 0 (then nothing is drawn from ``g``, so the draws are those without it)."""
        if not self.replay or self._memory is None or not len(self._memory):
            return torch.zeros(0, 3)
        k = int(round(self.replay * drives))
        return self._memory.rows[torch.randint(len(self._memory), (k,), generator=g)]


__all__ = ["CLEAN_CAMERA", "ApproachObjective", "ApproachSampler", "BoxMeasurements", "DetectorFraming", "Framing",
           "ReplayMemory", "Windows"]
