"""Perception stacks: how a car reads its frames.

(a) ``DetectorStack``: a detector alone; a frame reads the sign when a box of the sign's class (score
>= the detector's threshold) overlaps the sign (IoU >= ``iou``). (b) ``TwoStageStack``: how
traffic-sign recognition is built: a detector proposes boxes (any class, score >= threshold), the one
on the sign is cropped square, framed as the classifier's training crops (the sign's width
``crop_frame`` of the crop's), and the classifier labels it. Detections elsewhere in the frame do not
change the verdict on this sign and are not classified.

**Why tiles.** A detector only finds objects at the scales it was trained on. The bundled DetNet saw
signs 13-96 px wide in its 160-px input (context frames, ``eot/frames.py``); a 0.75 m sign on a
1920-px, 90° dashcam is 720/d px wide: 9 px at 80 m, 14 px at 50 m, 90 px at 8 m. Shrinking the
whole frame to 160 px (or even a 960-px working copy) would make every sign a few pixels wide. So
``TiledDetector`` runs the detector on overlapping input-sized tiles of search regions at one or two
scales, as a real pipeline scans a pyramid of its region of interest: each ``SearchScale`` looks at
``scale`` × the sensor's resolution for signs ``distance_m`` away (far ones upsampled 2×, near ones at
native resolution), over the part of the frame where a roadside sign (``lateral_m`` right of the
camera's path, its centre ``height_m`` above the road) can be at those distances. Only those regions
are rendered for judging (``DriveRenderer`` renders a region exactly as the full frame has it).

**Panels.** A stack can also hand the same crops (or frames) to a **panel** of victims
(``PanelVictim``: the attacked ones and the held-out ones of the run's held-out protocol): each is
judged by the same voting and braking rule, so the report says whether a car whose model the patch
was *not* fitted to would still stop, and an ensemble's members are judged one by one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.ops import box_iou

from physattack.drive.boxes import join_boxes
from physattack.drive.trajectories import Dashcam, face_corners, projected_boxes
from physattack.errors import InputError, check_interval, check_range
from physattack.victims.detection import Detections
from physattack.victims.stack import square_crops

Range = tuple[float, float]
Region = tuple[int, int, int, int]
MERGES = ("nms", "nmm")


# -- searching the frame --------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchScale:
    """Look at ``scale`` × the sensor's resolution for signs ``distance_m`` (near, far) away."""

    scale: float
    distance_m: Range

    def __post_init__(self) -> None:
        check_range("drive.stack.scales[].scale", self.scale, 0.0, 8.0, lo_open=True,
                    why="the detector's view as a multiple of the sensor's resolution")
        check_interval("drive.stack.scales[].distance_m", self.distance_m, 0.0, lo_open=True,
                       why="the distances this scale looks for signs at, metres")


@dataclass
class StackSettings:
    """How a perception stack searches the frame and crops for its classifier (see the module docstring).

    Args:
        scales: ``SearchScale`` s, or dicts ``{scale, distance_m}``.
        lateral_m, height_m: where roadside signs stand: metres right of the camera's path, and their
            centres' height above the road.
        overlap: the tiles' overlap as a share of their side.
        crop_frame: two-stage: the sign's width as a share of the classifier's crop (None: the caller's,
            e.g. the run's ``eot.grid.frame``).
        crop_px: two-stage: the crops' side in pixels (None: the caller's, e.g. the run's ``image_size``).
        merge: how the tiles' detections of a frame are joined: ``nms`` (non-maximum suppression at IoU 0.5 across
            tiles and scales: of two boxes on one sign the higher-scoring stays, so a box on the part of the sign a
            tile's edge cuts can be the one taken) or ``nmm`` (non-maximum merging, as slicing-aided inference does
            it: SAHI, Akyon et al. ICIP'22; of the detections made, those at or above the detector's score threshold,
            boxes of a class whose intersection covers half of the smaller merge into their union, with the higher
            score, so a cut part joins the whole sign's box; ``merge_boxes``. The candidates under the threshold are
            suppressed as before: merged in, a model's many faint boxes around a sign would swell its box past the
            sign's, and the clean car would miss it).
    """

    scales: list = field(default_factory=lambda: [{"scale": 2.0, "distance_m": [40.0, 85.0]},
                                                  {"scale": 1.0, "distance_m": [9.0, 45.0]}])
    lateral_m: Range = (1.5, 9.0)
    height_m: Range = (1.5, 3.0)
    overlap: float = 0.35
    crop_frame: float | None = None
    crop_px: int | None = None
    merge: str = "nms"

    def __post_init__(self) -> None:
        if self.merge not in MERGES:
            raise InputError(f"drive.stack.merge must be one of {', '.join(MERGES)}, not {self.merge!r}.")
        if isinstance(self.scales, (str, bytes)) or not self.scales:
            raise InputError("drive.stack.scales must be a non-empty list of {scale, distance_m}; "
                             f"got {self.scales!r}.")
        try:
            self.scales = [s if isinstance(s, SearchScale) else SearchScale(float(s["scale"]), tuple(s["distance_m"]))
                           for s in self.scales]
        except (KeyError, TypeError, ValueError):
            raise InputError("drive.stack.scales must be a list of {scale: <multiple of the sensor's resolution>, "
                             f"distance_m: [near, far]}}; got {self.scales!r}.") from None
        check_interval("drive.stack.lateral_m", self.lateral_m, why="metres right of the camera's path")
        check_interval("drive.stack.height_m", self.height_m, why="metres above the road")
        check_range("drive.stack.overlap", self.overlap, 0.0, 0.9, why="the tiles' overlap as a share of their side")
        if self.crop_frame is not None:
            check_range("drive.stack.crop_frame", self.crop_frame, 0.0, 1.0, lo_open=True,
                        why="the sign's width as a share of the classifier's crop")
        if self.crop_px is not None:
            check_range("drive.stack.crop_px", self.crop_px, 8, integer=True, why="the crops' side in pixels")


def covering_roads(settings: StackSettings, drives: list, dashcam: Dashcam, size_m) -> StackSettings:
    """``settings`` with ``lateral_m`` and ``height_m`` widened so that the search regions hold the sign in every
    frame of the drives on bends or grades among ``drives`` (``Drive.curve_radius_m``, ``Drive.grade_pct``): a region
    of interest made for a straight, level road never looks where a sign round a left bend first shows (left of
    ahead), and the clean car would miss it for that reason alone. The lateral offset (height) a frame needs is the
    sign's side of ahead (its height in the frame) times its distance over the focal length: the straight road's
    projection read backwards. Straight, level drives leave ``settings`` as they are."""
    (lo, hi), (bottom, top) = settings.lateral_m, settings.height_m
    roads = [d for d in drives if getattr(d, "curve_radius_m", 0.0) or getattr(d, "grade_pct", 0.0)]
    for drive in roads:
        frames = drive.frames(dashcam, size_m)
        boxes, depth = frames.face_boxes, frames.distance_m
        for x in (boxes[:, 0], boxes[:, 2]):
            lateral = (x - dashcam.width_px / 2) * depth / dashcam.focal_px
            lo, hi = min(lo, float(lateral.min())), max(hi, float(lateral.max()))
        for y in (boxes[:, 1], boxes[:, 3]):
            height = dashcam.height_m - (y - dashcam.height_px / 2) * depth / dashcam.focal_px
            bottom, top = min(bottom, float(height.min())), max(top, float(height.max()))
    if not roads:
        return settings
    return replace(settings, lateral_m=(math.floor(lo), math.ceil(hi)), height_m=(math.floor(bottom), math.ceil(top)))


@dataclass(frozen=True)
class Tile:
    scale_index: int
    x: int           # top-left in the scaled search region's pixels
    y: int


class SearchTiles:
    """Where a detector of ``tile_px`` input looks in a dashcam's frames: overlapping tiles of the search
    regions at each of ``settings``' scales (see the module docstring). The geometry alone: ``TiledDetector``
    runs a detector over these tiles, and the approach windows of a detector attack
    (``physattack.drive.approach``) put each window frame's sign in the tiles that hold it, as the drive's
    detector will read it.

    Args:
        tile_px: the detector's input side.
        dashcam: the camera the frames come from.
        sign_size_m: the sign's (width, height).
        settings: the scales, where signs stand, and the tiles' overlap.
    """

    def __init__(self, tile_px: int, dashcam: Dashcam, sign_size_m: tuple[float, float], settings: StackSettings):
        self.dashcam, self.settings = dashcam, settings
        self.scales = settings.scales
        self.tile = int(tile_px)
        self.regions = [self._search_region(s, sign_size_m, settings.lateral_m, settings.height_m) for s in self.scales]
        self.region: Region = (min(r[0] for r in self.regions), min(r[1] for r in self.regions),
                               max(r[2] for r in self.regions), max(r[3] for r in self.regions))
        self.tiles = [Tile(i, x, y) for i, (s, r) in enumerate(zip(self.scales, self.regions))
                      for y in _starts(round((r[3] - r[1]) * s.scale), self.tile, settings.overlap)
                      for x in _starts(round((r[2] - r[0]) * s.scale), self.tile, settings.overlap)]
        # each tile's scale and its extent in full-frame pixels (x0, y0, x1, y1)
        self.spans = []
        for tile in self.tiles:
            s, r = self.scales[tile.scale_index], self.regions[tile.scale_index]
            x0, y0 = r[0] + tile.x / s.scale, r[1] + tile.y / s.scale
            self.spans.append((s.scale, x0, y0, x0 + self.tile / s.scale, y0 + self.tile / s.scale))
        self.extents = torch.tensor([sp[1:] for sp in self.spans], dtype=torch.float64)      # K×4
        self.tile_scales = torch.tensor([sp[0] for sp in self.spans], dtype=torch.float64)   # K

    def _search_region(self, scale: SearchScale, size_m, lateral_m: Range, height_m: Range) -> Region:
        cam = self.dashcam
        corners = torch.tensor([[-lat, cam.height_m - h, d] for lat in lateral_m for h in height_m
                                for d in scale.distance_m], dtype=torch.float64)
        boxes, _ = projected_boxes(cam.cameras(corners), face_corners(size_m).double())
        x0, y0 = float(boxes[:, 0].min()), float(boxes[:, 1].min())
        x1, y1 = float(boxes[:, 2].max()), float(boxes[:, 3].max())
        side = self.tile / scale.scale                      # at least one tile's worth of the frame
        x0, x1 = _widen(x0, x1, side, cam.width_px)
        y0, y1 = _widen(y0, y1, side, cam.height_px)
        return int(x0), int(y0), int(x1), int(y1)

    def near(self, boxes: Tensor) -> Tensor:
        """T×K bool: tile k's extent meets frame t's box widened by the box's own width and height."""
        tiles = self.extents
        b = boxes.detach().double().cpu()
        wh = (b[:, 2:] - b[:, :2]).clamp(min=1.0)
        lo, hi = b[:, :2] - wh, b[:, 2:] + wh
        return ((tiles[None, :, 0] < hi[:, None, 0]) & (tiles[None, :, 2] > lo[:, None, 0])
                & (tiles[None, :, 1] < hi[:, None, 1]) & (tiles[None, :, 3] > lo[:, None, 1]))

    def holding(self, boxes: Tensor) -> Tensor:
        """T×K bool: the tiles that hold frame t's box whole; a box no tile holds whole (one larger than a tile's
        share of the frame, or at a region's edge) gets the tile whose centre is nearest the box's, so every frame
        is read somewhere."""
        tiles = self.extents
        b = boxes.detach().double().cpu()
        whole = ((tiles[None, :, 0] <= b[:, None, 0]) & (tiles[None, :, 1] <= b[:, None, 1])
                 & (tiles[None, :, 2] >= b[:, None, 2]) & (tiles[None, :, 3] >= b[:, None, 3]))
        lost = ~whole.any(1)
        if lost.any():
            gap = ((tiles[None, :, :2] + tiles[None, :, 2:]) / 2 - (b[lost, None, :2] + b[lost, None, 2:]) / 2)
            nearest = gap.norm(dim=-1).argmin(1)
            whole[torch.nonzero(lost).flatten(), nearest] = True
        return whole

    def reading(self, boxes: Tensor, share: float = 1.0) -> Tensor:
        """T×K bool: the tiles ``holding`` frame t's box, and with ``share`` < 1 also every tile that holds at least
        that share of the box's area: a tile whose edge cuts the sign still shows the detector part of it, and a box
        on that part counts as reading the sign when it overlaps the sign's box by the stack's ``iou``."""
        held = self.holding(boxes)
        if share >= 1.0:
            return held
        return held | (self.parts(boxes)[1] >= share)

    def cut_parts(self, boxes: Tensor) -> tuple[Tensor, Tensor]:
        """T×K×4 ``parts`` and T×K bool: the tiles whose edge cuts frame t's box, holding 30-99.9 % of it (enough of
        the sign for a box on it to overlap the sign's by the stack's IoU, and not the whole)."""
        parts, share = self.parts(boxes)
        return parts, (share >= 0.3) & (share < 0.999)

    def parts(self, boxes: Tensor) -> tuple[Tensor, Tensor]:
        """T×K×4: the part of frame t's box (T×4, px) that tile k holds (empty where they do not meet), and T×K the
        share of the box's area that part is: a tile whose edge cuts the sign holds a share between 0 and 1, and
        the detector on that tile can box only that part (``physattack.drive.framing.FramingDraw.edge``)."""
        b = boxes.detach().double().cpu()
        lo = torch.maximum(self.extents[None, :, :2], b[:, None, :2])
        hi = torch.minimum(self.extents[None, :, 2:], b[:, None, 2:])
        inside = (hi - lo).clamp(min=0).prod(-1)
        return torch.cat([lo, hi], -1), inside / (b[:, 2:] - b[:, :2]).clamp(min=1e-9).prod(-1)[:, None]


class TiledDetector:
    """A detector run over overlapping tiles of its search regions (``SearchTiles``; see the module docstring).

    Args:
        detector: a ``Detector`` (``input_size`` is its tile side).
        dashcam: the camera the frames come from.
        sign_size_m: the sign's (width, height).
        settings: the scales, where signs stand, and the tiles' overlap.
    """

    def __init__(self, detector, dashcam: Dashcam, sign_size_m: tuple[float, float], settings: StackSettings):
        self.detector, self.dashcam, self.settings = detector, dashcam, settings
        self.search = SearchTiles(int(detector.input_size), dashcam, sign_size_m, settings)
        s = self.search
        self.scales, self.tile, self.regions, self.region = s.scales, s.tile, s.regions, s.region
        self.tiles, self.spans, self.extents = s.tiles, s.spans, s.extents

    @torch.no_grad()
    def __call__(self, images: Tensor, region: Region, batch: int = 64,
                 near: Tensor | None = None) -> list[Detections]:
        """Detections (full-frame pixels, after NMS across tiles and scales) in each of T frames;
        ``images`` (T×3×h×w) show ``region`` of the frame, which must hold ``self.region``.

        ``near`` (T×4 full-frame boxes, the sign's in each frame): scan only the tiles that meet the box
        widened by its own size on every side (all a detection on the sign, or one that could suppress
        it, comes from); None scans every tile."""
        t = images.shape[0]
        scaled_all = self.scaled_regions(images, region)
        wanted = self.search.near(near) if near is not None else torch.ones(t, len(self.tiles), dtype=torch.bool)
        pairs = torch.nonzero(wanted).tolist()                       # frame-major (frame, tile) pairs
        device = next((p.device for p in self.detector.parameters()), images.device)
        found: list[Detections] = []
        for start in range(0, len(pairs), batch):
            chunk = [scaled_all[self.tiles[j].scale_index][f, :, self.tiles[j].y:self.tiles[j].y + self.tile,
                                                           self.tiles[j].x:self.tiles[j].x + self.tile]
                     for f, j in pairs[start:start + batch]]
            found += self.detector(torch.stack(chunk).to(device)).detections
        per_frame: list[list[tuple[int, Detections]]] = [[] for _ in range(t)]
        for (f, j), d in zip(pairs, found):
            per_frame[f].append((j, d))
        out = []
        for frame in per_frame:
            if not frame:
                out.append(Detections.empty())
                continue
            boxes, scores, labels = [], [], []
            for j, d in frame:
                scale, ox, oy = self.spans[j][:3]
                boxes.append(d.boxes.detach().cpu() / scale + torch.tensor([ox, oy, ox, oy]))
                scores.append(d.scores.detach().cpu())
                labels.append(d.labels.detach().cpu())
            b, s, lab = torch.cat(boxes), torch.cat(scores), torch.cat(labels)
            out.append(Detections(*join_boxes(b, s, lab, self.settings.merge, self.detector.score_threshold)))
        return out

    def scaled_regions(self, images: Tensor, region: Region) -> list[Tensor]:
        """Each scale's search region of ``images`` (T×3×h×w showing ``region``) at that scale, padded to at least one
        tile: tile k's input is ``[..., y:y + tile, x:x + tile]`` of entry ``tiles[k].scale_index``."""
        gx, gy = region[0], region[1]
        out = []
        for s, r in zip(self.scales, self.regions):
            crop = images[:, :, r[1] - gy:r[3] - gy, r[0] - gx:r[2] - gx]
            size = (round(crop.shape[-2] * s.scale), round(crop.shape[-1] * s.scale))
            scaled = crop if s.scale == 1 else F.interpolate(crop, size=size, mode="bilinear", align_corners=False,
                                                             antialias=s.scale < 1)
            short = (max(0, self.tile - scaled.shape[-1]), max(0, self.tile - scaled.shape[-2]))
            if any(short):                           # a frame smaller than one tile
                scaled = F.pad(scaled, (0, short[0], 0, short[1]), mode="replicate")
            out.append(scaled)
        return out


def _starts(length: int, tile: int, overlap: float) -> list[int]:
    """Tile origins covering ``length`` pixels with tiles of ``tile`` overlapping by at least ``overlap``."""
    if length <= tile:
        return [0]
    stride = tile * (1 - overlap)
    n = math.ceil((length - tile) / stride) + 1
    return [round(i * (length - tile) / (n - 1)) for i in range(n)]


def _widen(lo: float, hi: float, side: float, limit: int) -> tuple[int, int]:
    """[lo, hi] in whole pixels, clipped to [0, limit] and widened about its centre to at least ``side``."""
    lo, hi = max(0, math.floor(lo)), min(limit, math.ceil(hi))
    need = min(limit, math.ceil(side))
    if hi - lo < need:
        lo = min(max(0, round((lo + hi - need) / 2)), limit - need)
        hi = lo + need
    return lo, hi


# -- perception stacks ----------------------------------------------------------------------------
@dataclass
class Readings:
    """What a stack read in each of T frames of a drive.

    Shape:
        correct: T bool, the frame read the sign as its class.
        label: T label indices into the stack's ``labels`` (-1: the sign was not found).
        score: T, the sign's class score on the sign (detector) or its probability (classifier), 0 when not found.
        box: T×4, the detection taken as the sign (zeros when none).
        detections: T ``Detections`` (full-frame pixels), for pictures.
    """

    correct: Tensor
    label: Tensor
    score: Tensor
    box: Tensor
    detections: list[Detections] = field(default_factory=list)
    panel: dict[str, Tensor] = field(default_factory=dict)    # name -> T bool: that panel victim read the sign

    def verdicts(self) -> Readings:
        """The same readings without the detections (all a verdict needs)."""
        return Readings(self.correct, self.label, self.score, self.box, panel=self.panel)


@dataclass(frozen=True)
class PanelVictim:
    """A model a stack also reads every frame with: a classifier (two-stage stacks: it labels the same
    crops) or a ``TiledDetector`` (detector stacks: it scans the same frames); its true label set for
    the sign, its role in the run (``attacked`` or ``held-out``), its architecture family and the data it
    learned from (``render`` or another image path, ``physattack.evaluate.members``)."""

    model: object
    true_labels: tuple[int, ...]
    role: str
    family: str | None = None
    data: str = "render"


@dataclass(frozen=True)
class Panel:
    """The victims judged beside a stack on the same crops or frames, and those left off it with the reason."""

    victims: dict[str, PanelVictim] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Needed:
    """Whose readings a stack must still make: its own (``own``) and those of the panel victims named in
    ``panel`` (None: every one). A reader whose verdict on a drive is known need not read on."""

    own: bool = True
    panel: frozenset[str] | None = None
    near_sign: bool = False     # only detections on or near the sign are wanted (no pictures drawn of the frames)

    def wants(self, name: str) -> bool:
        return self.panel is None or name in self.panel


def _blank(t: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Readings' fields for T frames in which nothing was found."""
    return torch.zeros(t, dtype=torch.bool), torch.full((t,), -1), torch.zeros(t), torch.zeros(t, 4)


def _on_sign(det: Detections, sign_box: Tensor, iou: float, threshold: float) -> Tensor:
    """Which detections (score >= threshold) overlap ``sign_box`` with IoU >= ``iou``."""
    if len(det) == 0 or float((sign_box[2:] - sign_box[:2]).min()) <= 0:
        return torch.zeros(len(det), dtype=torch.bool)
    return (box_iou(det.boxes.float(), sign_box[None].float())[:, 0] >= iou) & (det.scores >= threshold)


class DetectorStack:
    """(a) A detector alone: a frame reads the sign when a box of its class overlaps it.

    ``panel``: more detectors (``Panel.victims``: name -> ``PanelVictim`` holding a ``TiledDetector``) that
    scan the same frames by the same rule, each one's verdicts in ``Readings.panel``; the frames rendered
    then cover every panel detector's search region too. ``Panel.skipped``: name -> why one is not on it."""

    kind = "detector"

    def __init__(self, tiled: TiledDetector, true_label: int, iou: float, names: dict[str, str],
                 panel: Panel | None = None):
        self.tiled, self.true_label, self.iou, self.names = tiled, true_label, iou, names
        self.labels = tuple(tiled.detector.labels)
        panel = panel or Panel()
        self.panel, self.panel_skipped = dict(panel.victims), dict(panel.skipped)

    @property
    def region(self) -> Region:
        regions = [self.tiled.region] + [m.model.region for m in self.panel.values()]
        return (min(r[0] for r in regions), min(r[1] for r in regions),
                max(r[2] for r in regions), max(r[3] for r in regions))

    def read(self, images: Tensor, region: Region, sign_boxes: Tensor, needed: Needed | None = None) -> Readings:
        """What the stack (and its panel) read in each frame; ``needed``: whose readings are still wanted
        (the others' verdicts are known: their detectors do not run and their frames read as not seen)."""
        needed = needed or Needed(True, None)
        t = images.shape[0]
        near = sign_boxes if needed.near_sign else None
        dets = self.tiled(images, region, near=near) if needed.own else [Detections.empty() for _ in range(t)]
        thr = self.tiled.detector.score_threshold
        correct, label, score, box = _blank(t)
        for i, (d, sign) in enumerate(zip(dets, sign_boxes)):
            on = _on_sign(d, sign, self.iou, 0.0)
            own = on & (d.labels == self.true_label)
            if own.any():
                score[i] = d.scores[own].max()
            hit = on & (d.scores >= thr)
            if hit.any():
                j = int(torch.nonzero(hit).flatten()[d.scores[hit].argmax()])
                label[i], box[i] = int(d.labels[j]), d.boxes[j]
                correct[i] = bool((hit & (d.labels == self.true_label)).any())
        panel = {name: _sees(member.model(images, region, near=near), sign_boxes, member.true_labels, self.iou,
                             member.model.detector.score_threshold) if needed.wants(name)
                 else torch.zeros(t, dtype=torch.bool) for name, member in self.panel.items()}
        return Readings(correct, label, score, box, dets, panel)


def _sees(dets: list[Detections], sign_boxes: Tensor, true_labels: tuple[int, ...], iou: float,
          threshold: float) -> Tensor:
    """T bool: a box of one of ``true_labels`` (score >= ``threshold``) overlaps the sign in the frame."""
    wanted = torch.tensor(list(true_labels))
    return torch.tensor([bool((_on_sign(d, sign, iou, threshold) & torch.isin(d.labels, wanted)).any())
                         for d, sign in zip(dets, sign_boxes)], dtype=torch.bool)


class TwoStageStack:
    """(b) Detector -> square crop around the detection on the sign -> classifier -> label.

    Args:
        tiled: the detector over its search regions.
        classifier: a ``Classifier`` victim (B×3×S×S in [0, 1] -> logits).
        true_labels: the classifier's label indices that count as the sign's class (its label set).
        iou: a detection is on the sign when its IoU with the sign's box is at least this.
        crop_frame: the sign's (box's) width as a share of the crop's, as in the classifier's training crops.
        crop_px: the crops' side in pixels (the classifier resizes as it always does).
        panel: more classifiers (``Panel.victims``: name -> ``PanelVictim``) that read the same crops; each
            one's verdicts go into ``Readings.panel``; ``Panel.skipped``: name -> why one is not on it.
    """

    kind = "two-stage"

    def __init__(self, tiled: TiledDetector, classifier, true_labels: tuple[int, ...], iou: float, crop_frame: float,
                 crop_px: int, names: dict[str, str], panel: Panel | None = None):
        self.tiled, self.classifier, self.iou, self.names = tiled, classifier, iou, names
        panel = panel or Panel()
        self.panel, self.panel_skipped = dict(panel.victims), dict(panel.skipped)
        self.true_labels = torch.tensor(list(true_labels))
        self.crop_frame = check_range("drive.stack.crop_frame", crop_frame, 0.0, 1.0, lo_open=True,
                                      why="the sign's width as a share of the classifier's crop")
        self.crop_px = check_range("drive.stack.crop_px", crop_px, 8, integer=True, why="the crops' side in pixels")
        self.labels = tuple(classifier.labels)

    @property
    def region(self) -> Region:
        return self.tiled.region

    def crops(self, images: Tensor, region: Region, boxes: Tensor) -> Tensor:
        """B square crops (B×3×crop_px×crop_px) of ``images`` (one per box, B×4 full-frame pixels, row i
        from image i) centred on each box, the box's longer side ``crop_frame`` of the crop's."""
        return square_crops(images, boxes, self.crop_frame, self.crop_px, (region[0], region[1]))

    @torch.no_grad()
    def read(self, images: Tensor, region: Region, sign_boxes: Tensor, needed: Needed | None = None) -> Readings:
        """What the stack (and its panel) read in each frame; ``needed``: whose readings are still wanted (the
        detector runs whenever anyone's are: the panel reads its crops; the others read as not seen)."""
        needed = needed or Needed(True, None)
        dets = self.tiled(images, region, near=sign_boxes if needed.near_sign else None)
        t = len(dets)
        correct, label, score, box = _blank(t)
        panel = {name: torch.zeros(t, dtype=torch.bool) for name in self.panel}
        idx, taken = self.on_sign(dets, sign_boxes)
        if len(idx):
            box[idx] = taken
            crops = self.crops(images[idx], region, taken)
            asked = {}            # id(model) -> its probabilities: the stack's classifier (or its members), asked once
            if needed.own:
                probs = _probs(self.classifier, crops, asked)
                pred = probs.argmax(-1)
                label[idx] = pred
                correct[idx] = torch.isin(pred, self.true_labels)
                score[idx] = probs[:, self.true_labels].sum(-1)
            for name, member in self.panel.items():          # one after another: memory stays near one's
                if needed.wants(name):
                    probs = asked[id(member.model)] if id(member.model) in asked else _probs(member.model, crops)
                    panel[name][idx] = torch.isin(probs.argmax(-1), torch.tensor(list(member.true_labels)))
        return Readings(correct, label, score, box, dets, panel)

    def on_sign(self, dets: list[Detections], sign_boxes: Tensor) -> tuple[Tensor, Tensor]:
        """The frames in which the detector found the sign (a box of score >= its threshold with IoU >= ``iou``),
        and in each the box taken as the sign (the highest-scoring such box; K×4)."""
        thr = self.tiled.detector.score_threshold
        found, boxes = [], []
        for i, (d, sign) in enumerate(zip(dets, sign_boxes)):
            hit = _on_sign(d, sign, self.iou, thr)
            if hit.any():
                found.append(i)
                boxes.append(d.boxes[int(torch.nonzero(hit).flatten()[d.scores[hit].argmax()])])
        return torch.tensor(found, dtype=torch.long), torch.stack(boxes) if boxes else torch.zeros(0, 4)

    def soft_read(self, images: Tensor, region: Region, sign_boxes: Tensor) -> Tensor:
        """T, each frame's probability (of the stack's classifier) of the sign's class, differentiable in
        ``images`` through the crops; the detector's boxes are taken as they are (detached: the framing
        error is the detector's), and a frame in which it finds no box on the sign reads 0. The input of
        ``physattack.drive.surrogate.soft_stop`` for an objective over approach windows."""
        with torch.no_grad():
            idx, taken = self.on_sign(self.tiled(images.detach(), region, near=sign_boxes), sign_boxes)
        p = images.new_zeros(images.shape[0])
        if len(idx):
            probs = _probs(self.classifier, self.crops(images[idx], region, taken.to(images.device)))
            p = p.index_put((idx.to(images.device),), probs[:, self.true_labels].sum(-1).to(images.device))
        return p


def _probs(classifier, crops: Tensor, asked: dict | None = None) -> Tensor:
    """``classifier``'s softmax on ``crops``, on the classifier's device, returned on the CPU. Given ``asked``, it
    goes there too (id(classifier) -> it), and a classifier ensemble puts each member's own softmax there (what the
    member reads of the crops as the ensemble resizes them for it): a panel holding the same model need not ask it
    again."""
    device = next((p.device for p in classifier.parameters()), crops.device)
    crops = crops.to(device)
    if asked is None or not hasattr(classifier, "combine"):
        probs = torch.softmax(classifier(crops).float(), -1).cpu()
        if asked is not None:
            asked[id(classifier)] = probs
        return probs
    outputs = [m(classifier.member_inputs(m, crops)) for m in classifier.members]
    asked.update({id(m): torch.softmax(o.float(), -1).cpu() for m, o in zip(classifier.members, outputs)})
    return torch.softmax(classifier.combine(outputs).float(), -1).cpu()


def cat_readings(parts: list[Readings]) -> Readings:
    return Readings(torch.cat([p.correct for p in parts]), torch.cat([p.label for p in parts]),
                    torch.cat([p.score for p in parts]), torch.cat([p.box for p in parts]),
                    [d for p in parts for d in p.detections],
                    {name: torch.cat([p.panel[name] for p in parts]) for name in (parts[0].panel if parts else {})})


