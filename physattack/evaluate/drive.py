"""Drive-by evaluation: would the car still stop?

A drive (``physattack.eot.drive``) is judged the way a car's traffic-sign recognition would judge it:
frame by frame, through a perception stack, with temporal voting, against the distance the car
needs to stop.

**Perception stacks.** (a) ``DetectorStack``: a detector alone; a frame reads the sign when a box of
the sign's class (score >= the detector's threshold) overlaps the sign (IoU >= ``iou``). (b)
``TwoStageStack``: how traffic-sign recognition is built: a detector proposes boxes (any class, score
>= threshold), the one on the sign is cropped square, framed as the classifier's training crops
(the sign's width ``crop_frame`` of the crop's), and the classifier labels it. Detections elsewhere
in the frame do not change the verdict on this sign and are not classified.

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

**Verdict.** A sign is *recognised* at the first frame where ``k`` of the last ``n`` frames read it
as its class; the car *stops* when that happens while the sign is still at least the braking
distance ``v·t_r + v²/(2a)`` away (``braking_distance_m``). Shares of drives that stop, clean and
attacked, carry Wilson intervals; success of the attack counts the drives that stop clean and run the
sign attacked (RP2's rule, per drive), beside the unconditional share that runs the sign.

**Victims over the drives.** A two-stage stack can also hand the same crops to a **panel** of
classifiers (``PanelVictim``: the attacked ones and the held-out ones of the run's held-out protocol,
``evaluation.victims``): each is judged by the same voting and braking rule on the same frames, so the
report says whether a car whose classifier the patch was *not* fitted to would still stop, and an
ensemble's members are judged one by one, as a car runs one model, not the members' mean.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.ops import batched_nms, box_iou, roi_align

from physattack.eot.drive import Dashcam, braking_distance_m, face_corners, projected_boxes
from physattack.errors import InputError, check_interval, check_range
from physattack.evaluate.members import held_out_selection
from physattack.evaluate.metrics import rate
from physattack.victims.detection import Detections

Range = tuple[float, float]
Region = tuple[int, int, int, int]


# -- temporal voting and braking: pure functions ----------------------------------------------------
def first_recognition(correct: Tensor, k: int, n: int) -> int | None:
    """The first frame at which ``k`` of the last ``n`` frames (fewer at the start) read the sign
    right, or None. ``correct``: T booleans in time order."""
    if len(correct) == 0:
        return None
    hits = torch.cat([torch.zeros(1), correct.float().cumsum(0)])
    idx = torch.arange(1, len(correct) + 1)
    window = hits[idx] - hits[(idx - n).clamp(min=0)]
    found = torch.nonzero(window >= k).flatten()
    return int(found[0]) if len(found) else None


@dataclass(frozen=True)
class DriveSettings:
    """How a drive is judged.

    Args:
        k, n: the sign is recognised when ``k`` of the last ``n`` frames read it as its class.
        reaction_s, decel_mps2: the driver's (or system's) reaction time and the braking deceleration;
            the braking distance is ``v·reaction_s + v²/(2·decel_mps2)``.
        iou: a detection is on the sign when its IoU with the sign's box is at least this.
        timelines: drives drawn as timeline plots (the first ones of the set; these and the videos'
            drives are judged to the last frame, the others only until their verdict is known).
        videos: drives written as MP4 (clean above attacked).
        video_scale: the videos' frame size as a share of the sensor's.
    """

    k: int = 3
    n: int = 5
    reaction_s: float = 1.0
    decel_mps2: float = 6.0
    iou: float = 0.3
    timelines: int = 3
    videos: int = 2
    video_scale: float = 0.5

    def __post_init__(self) -> None:
        key = "drive.settings."
        check_range(key + "n", self.n, 1, integer=True, why="frames in the voting window")
        check_range(key + "k", self.k, 1, integer=True, why="frames of the window that must read the sign")
        if self.k > self.n:
            raise InputError(f"drive.settings.k must be <= drive.settings.n (k of the last n frames must read the "
                             f"sign); got k={self.k}, n={self.n}.")
        check_range(key + "reaction_s", self.reaction_s, 0.0, why="reaction time in seconds")
        check_range(key + "decel_mps2", self.decel_mps2, 0.0, lo_open=True, why="braking deceleration in m/s²")
        check_range(key + "iou", self.iou, 0.0, 1.0, lo_open=True, why="IoU of a detection with the sign's box")
        check_range(key + "timelines", self.timelines, 0, integer=True, why="drives drawn as timeline plots")
        check_range(key + "videos", self.videos, 0, integer=True, why="drives written as MP4")
        check_range(key + "video_scale", self.video_scale, 0.05, 1.0, why="the videos' size as a share of the sensor's")

    def braking_m(self, speed_kmh: float) -> float:
        return braking_distance_m(speed_kmh, self.reaction_s, self.decel_mps2)


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
    """

    scales: list = field(default_factory=lambda: [{"scale": 2.0, "distance_m": [40.0, 85.0]},
                                                  {"scale": 1.0, "distance_m": [9.0, 45.0]}])
    lateral_m: Range = (1.5, 9.0)
    height_m: Range = (1.5, 3.0)
    overlap: float = 0.35
    crop_frame: float | None = None
    crop_px: int | None = None

    def __post_init__(self) -> None:
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


@dataclass(frozen=True)
class Tile:
    scale_index: int
    x: int           # top-left in the scaled search region's pixels
    y: int


class TiledDetector:
    """A detector run over overlapping tiles of its search regions (see the module docstring).

    Args:
        detector: a ``Detector`` (``input_size`` is its tile side).
        dashcam: the camera the frames come from.
        sign_size_m: the sign's (width, height).
        settings: the scales, where signs stand, and the tiles' overlap.
    """

    def __init__(self, detector, dashcam: Dashcam, sign_size_m: tuple[float, float], settings: StackSettings):
        self.detector, self.dashcam, self.settings = detector, dashcam, settings
        self.scales = settings.scales
        self.tile = int(detector.input_size)
        self.regions = [self._search_region(s, sign_size_m, settings.lateral_m, settings.height_m) for s in self.scales]
        self.region: Region = (min(r[0] for r in self.regions), min(r[1] for r in self.regions),
                               max(r[2] for r in self.regions), max(r[3] for r in self.regions))
        self.tiles = [Tile(i, x, y) for i, (s, r) in enumerate(zip(self.scales, self.regions))
                      for y in _starts(round((r[3] - r[1]) * s.scale), self.tile, settings.overlap)
                      for x in _starts(round((r[2] - r[0]) * s.scale), self.tile, settings.overlap)]

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

    @torch.no_grad()
    def __call__(self, images: Tensor, region: Region, batch: int = 64) -> list[Detections]:
        """Detections (full-frame pixels, after NMS across tiles and scales) in each of T frames;
        ``images`` (T×3×h×w) show ``region`` of the frame, which must hold ``self.region``."""
        gx, gy = region[0], region[1]
        t = images.shape[0]
        tiles, where = [], []
        for i, (s, r) in enumerate(zip(self.scales, self.regions)):
            crop = images[:, :, r[1] - gy:r[3] - gy, r[0] - gx:r[2] - gx]
            size = (round(crop.shape[-2] * s.scale), round(crop.shape[-1] * s.scale))
            scaled = crop if s.scale == 1 else F.interpolate(crop, size=size, mode="bilinear", align_corners=False,
                                                             antialias=s.scale < 1)
            short = (max(0, self.tile - scaled.shape[-1]), max(0, self.tile - scaled.shape[-2]))
            if any(short):                           # a frame smaller than one tile
                scaled = F.pad(scaled, (0, short[0], 0, short[1]), mode="replicate")
            for tile in (tl for tl in self.tiles if tl.scale_index == i):
                tiles.append(scaled[:, :, tile.y:tile.y + self.tile, tile.x:tile.x + self.tile])
                where.append((s.scale, r[0] + tile.x / s.scale, r[1] + tile.y / s.scale))
        device = next((p.device for p in self.detector.parameters()), images.device)
        stacked = torch.stack(tiles, 1).flatten(0, 1).to(device)    # frame-major: T·K tiles
        found: list[Detections] = []
        for start in range(0, stacked.shape[0], batch):
            found += self.detector(stacked[start:start + batch]).detections
        out = []
        k = len(tiles)
        for f in range(t):
            boxes, scores, labels = [], [], []
            for j, (scale, ox, oy) in enumerate(where):
                d = found[f * k + j]
                boxes.append(d.boxes.detach().cpu() / scale + torch.tensor([ox, oy, ox, oy]))
                scores.append(d.scores.detach().cpu())
                labels.append(d.labels.detach().cpu())
            b, s, lab = torch.cat(boxes), torch.cat(scores), torch.cat(labels)
            keep = batched_nms(b, s, lab, 0.5)
            out.append(Detections(b[keep], s[keep], lab[keep]))
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
    the sign, its role in the run (``attacked`` or ``held-out``) and its architecture family."""

    model: object
    true_labels: tuple[int, ...]
    role: str
    family: str | None = None


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

    ``panel``: more detectors (name -> ``PanelVictim`` holding a ``TiledDetector``) that scan the same
    frames by the same rule, each one's verdicts in ``Readings.panel``; the frames rendered then cover
    every panel detector's search region too. ``panel_skipped``: name -> why one is not on the panel."""

    kind = "detector"

    def __init__(self, tiled: TiledDetector, true_label: int, iou: float, names: dict[str, str],
                 panel: dict[str, PanelVictim] | None = None, panel_skipped: dict[str, str] | None = None):
        self.tiled, self.true_label, self.iou, self.names = tiled, true_label, iou, names
        self.labels = tuple(tiled.detector.labels)
        self.panel, self.panel_skipped = dict(panel or {}), dict(panel_skipped or {})

    @property
    def region(self) -> Region:
        regions = [self.tiled.region] + [m.model.region for m in self.panel.values()]
        return (min(r[0] for r in regions), min(r[1] for r in regions),
                max(r[2] for r in regions), max(r[3] for r in regions))

    def read(self, images: Tensor, region: Region, sign_boxes: Tensor) -> Readings:
        dets = self.tiled(images, region)
        thr = self.tiled.detector.score_threshold
        t = len(dets)
        correct, label, score, box = _blank(t)
        for i, (d, sign) in enumerate(zip(dets, sign_boxes)):
            near = _on_sign(d, sign, self.iou, 0.0)
            own = near & (d.labels == self.true_label)
            if own.any():
                score[i] = d.scores[own].max()
            hit = near & (d.scores >= thr)
            if hit.any():
                j = int(torch.nonzero(hit).flatten()[d.scores[hit].argmax()])
                label[i], box[i] = int(d.labels[j]), d.boxes[j]
                correct[i] = bool((hit & (d.labels == self.true_label)).any())
        panel = {name: _sees(member.model(images, region), sign_boxes, member.true_labels, self.iou,
                             member.model.detector.score_threshold) for name, member in self.panel.items()}
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
        panel: more classifiers (name -> ``PanelVictim``) that read the same crops; each one's verdicts
            go into ``Readings.panel``. ``panel_skipped``: name -> why a victim is not on the panel.
    """

    kind = "two-stage"

    def __init__(self, tiled: TiledDetector, classifier, true_labels: tuple[int, ...], iou: float, crop_frame: float,
                 crop_px: int, names: dict[str, str], panel: dict[str, PanelVictim] | None = None,
                 panel_skipped: dict[str, str] | None = None):
        self.tiled, self.classifier, self.iou, self.names = tiled, classifier, iou, names
        self.panel, self.panel_skipped = dict(panel or {}), dict(panel_skipped or {})
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
        c = (boxes[:, :2] + boxes[:, 2:]) / 2 - torch.tensor([region[0], region[1]], dtype=boxes.dtype)
        half = (boxes[:, 2:] - boxes[:, :2]).amax(1, keepdim=True) / self.crop_frame / 2
        rois = torch.cat([torch.arange(len(boxes), dtype=boxes.dtype)[:, None], c - half, c + half], 1)
        return roi_align(images, rois.to(images.dtype), self.crop_px, 1.0, sampling_ratio=2, aligned=True)

    @torch.no_grad()
    def read(self, images: Tensor, region: Region, sign_boxes: Tensor) -> Readings:
        dets = self.tiled(images, region)
        thr = self.tiled.detector.score_threshold
        t = len(dets)
        correct, label, score, box = _blank(t)
        panel = {name: torch.zeros(t, dtype=torch.bool) for name in self.panel}
        found = []
        for i, (d, sign) in enumerate(zip(dets, sign_boxes)):
            hit = _on_sign(d, sign, self.iou, thr)
            if hit.any():
                j = int(torch.nonzero(hit).flatten()[d.scores[hit].argmax()])
                box[i] = d.boxes[j]
                found.append(i)
        if found:
            idx = torch.tensor(found)
            crops = self.crops(images[idx], region, box[idx])
            probs = _probs(self.classifier, crops)
            pred = probs.argmax(-1)
            label[idx] = pred
            correct[idx] = torch.isin(pred, self.true_labels)
            score[idx] = probs[:, self.true_labels].sum(-1)
            for name, member in self.panel.items():          # one after another: memory stays near one's
                panel[name][idx] = torch.isin(_probs(member.model, crops).argmax(-1),
                                              torch.tensor(list(member.true_labels)))
        return Readings(correct, label, score, box, dets, panel)


def _probs(classifier, crops: Tensor) -> Tensor:
    """``classifier``'s softmax on ``crops``, on the classifier's device, returned on the CPU."""
    device = next((p.device for p in classifier.parameters()), crops.device)
    return torch.softmax(classifier(crops.to(device)).float(), -1).cpu()


def _cat_readings(parts: list[Readings]) -> Readings:
    return Readings(torch.cat([p.correct for p in parts]), torch.cat([p.label for p in parts]),
                    torch.cat([p.score for p in parts]), torch.cat([p.box for p in parts]),
                    [d for p in parts for d in p.detections],
                    {name: torch.cat([p.panel[name] for p in parts]) for name in (parts[0].panel if parts else {})})


# -- judging drives -------------------------------------------------------------------------------
def check_braking(drives: list, settings: DriveSettings) -> None:
    """Every drive starts before its braking point, or the question "did it stop in time?" has no answer."""
    for d in drives:
        need = settings.braking_m(d.speed_kmh)
        if need >= d.start_m:
            raise InputError(f"At {d.speed_kmh:g} km/h the braking distance is {need:.1f} m (drive.settings.reaction_s="
                             f"{settings.reaction_s:g}, decel_mps2={settings.decel_mps2:g}), beyond the first frame at "
                             f"drive.drives.start_m={d.start_m:g}: start the drives farther away or lower the speed.")


@dataclass
class DriveOutcome:
    """One drive judged with the clean and the attacked sign.

    ``recognised``: name (``clean``, ``attacked``) -> the frame index at which the sign was
    recognised (k of n), or None; ``readings``: name -> the stack's ``Readings`` of the judged frames
    (the first ``judged`` frames of ``frames``).
    """

    index: int
    drive: object
    frames: object
    braking_m: float
    judged: int
    readings: dict[str, Readings]
    recognised: dict[str, int | None]
    panel_recognised: dict[str, dict[str, int | None]] = field(default_factory=dict)   # texture -> victim -> frame

    def recognised_at_m(self, name: str, victim: str | None = None) -> float | None:
        """Where the sign was recognised with texture ``name``, by the stack or by panel ``victim``."""
        i = self.recognised[name] if victim is None else self.panel_recognised[name][victim]
        return None if i is None else float(self.frames.distance_m[i])

    def stops(self, name: str, victim: str | None = None) -> bool:
        at = self.recognised_at_m(name, victim)
        return at is not None and at >= self.braking_m

    def summary(self) -> dict:
        out = {"drive": self.index, **self.drive.describe(), "braking_m": round(self.braking_m, 2),
               "frames": len(self.frames), "judged_frames": self.judged}
        for name in self.readings:
            at = self.recognised_at_m(name)
            out[name] = {"stops": self.stops(name), "recognised_at_m": None if at is None else round(at, 2)}
        return out

    def timeline(self, name: str, labels: tuple[str, ...]) -> dict:
        r = self.readings[name]
        return {"distance_m": [round(float(v), 2) for v in self.frames.distance_m[:self.judged]],
                "label": [labels[int(v)] if v >= 0 else None for v in r.label],
                "score": [round(float(v), 4) for v in r.score], "correct": [bool(v) for v in r.correct]}


def judge_drive(index: int, drive, frames, renderer, scene, textures: dict[str, Tensor], stack,
                settings: DriveSettings, whole: bool, photograph=None, chunk: int = 16) -> DriveOutcome:
    """Render and read one drive with each of ``textures`` (name -> texture), ``chunk`` frames at a time.

    ``whole``: judge every frame and keep every frame's detections (for timelines and videos); else stop
    at the first frame past the braking point, where the verdict is known, and keep no detections.
    ``photograph``: the colour model's camera stage, applied to the frames as the run's views had it.
    """
    braking = settings.braking_m(drive.speed_kmh)
    past = torch.nonzero(frames.distance_m < braking).flatten()
    judged = len(frames) if whole or len(past) == 0 else int(past[0]) + 1
    readings = {}
    for name, texture in textures.items():
        parts = []
        for start in range(0, judged, chunk):
            sub = frames[start:min(judged, start + chunk)]
            views = renderer.render(scene, texture, sub, region=stack.region)
            images = views.images if photograph is None else photograph(views.images)
            read = stack.read(images, views.region, views.boxes)
            parts.append(read if whole else read.verdicts())
        readings[name] = _cat_readings(parts)
    recognised = {n: first_recognition(r.correct, settings.k, settings.n) for n, r in readings.items()}
    panel = {n: {v: first_recognition(c, settings.k, settings.n) for v, c in r.panel.items()}
             for n, r in readings.items()}
    return DriveOutcome(index, drive, frames, braking, judged, readings, recognised, panel)


def drive_metrics(outcomes: list[DriveOutcome]) -> dict:
    """Shares of drives that stop, clean and attacked, overall and per speed and per light; the
    attack's success (drives that stop clean and run the sign attacked, over drives that stop clean)."""
    def block(subset: list[DriveOutcome]) -> dict:
        clean = torch.tensor([o.stops("clean") for o in subset], dtype=torch.bool)
        out = {"drives": len(subset), "stop_rate_clean": rate(clean)}
        if subset and "attacked" in subset[0].readings:
            adv = torch.tensor([o.stops("attacked") for o in subset], dtype=torch.bool)
            out.update(stop_rate_attacked=rate(adv), run_rate_attacked=rate(~adv),
                       attack_success_rate=rate(~adv[clean]))
        return out

    speeds = sorted({o.drive.speed_kmh for o in outcomes})
    lights = list(dict.fromkeys(o.drive.light for o in outcomes))
    return {**block(outcomes),
            "by_speed": {f"{s:g}": block([o for o in outcomes if o.drive.speed_kmh == s]) for s in speeds},
            "by_lighting": {li: block([o for o in outcomes if o.drive.light == li]) for li in lights}}


def panel_metrics(outcomes: list[DriveOutcome], panel: dict[str, PanelVictim], skipped: dict[str, str] | None = None
                  ) -> dict:
    """Each panel victim's shares of drives that stop, clean and attacked, and the attack's success on it
    (drives it stops in clean and runs attacked, over those it stops in clean); the held-out victims'
    mean success, and that of the held-out victims of families no attacked victim belongs to (as the
    held-out protocol's members table, ``physattack.evaluate.members``)."""
    attacked = bool(outcomes) and "attacked" in outcomes[0].readings
    rows = {}
    for name, member in panel.items():
        clean = torch.tensor([o.stops("clean", name) for o in outcomes], dtype=torch.bool)
        row = {"role": member.role, "family": member.family, "drives": len(outcomes), "stop_rate_clean": rate(clean)}
        if attacked:
            adv = torch.tensor([o.stops("attacked", name) for o in outcomes], dtype=torch.bool)
            row.update(stop_rate_attacked=rate(adv), attack_success_rate=rate(~adv[clean]))
        rows[name] = row
    defined, other = held_out_selection(rows, {r["family"] for r in rows.values()
                                               if r["role"] == "attacked" and r["family"]})

    def mean(names: list[str]) -> float | None:
        return sum(rows[n]["attack_success_rate"]["rate"] for n in names) / len(names) if names else None

    return {"members": rows, "skipped": dict(skipped or {}),
            "held_out_mean": {"victims": defined, "attack_success_rate": mean(defined)},
            "held_out_families": {"victims": other, "families": sorted({rows[n]["family"] for n in other}),
                                  "attack_success_rate": mean(other)}}


def evaluate_drives(*, scene, textures: dict[str, Tensor], drives: list, renderer, stack, settings: DriveSettings,
                    photograph=None, progress: bool = False) -> list[DriveOutcome]:
    """Judge every drive with each texture (``clean``, ``attacked``); the first ``max(timelines,
    videos)`` drives are judged to their last frame, the others until their verdict is known."""
    from tqdm import tqdm

    check_braking(drives, settings)
    shown = max(settings.timelines, settings.videos)
    outcomes = []
    for i, drive in enumerate(tqdm(drives, desc="drives", unit="drive", disable=not progress)):
        frames = drive.frames(renderer.dashcam, scene.texture_size_m)
        outcomes.append(judge_drive(i, drive, frames, renderer, scene, textures, stack, settings, whole=i < shown,
                                    photograph=photograph))
    return outcomes


# -- pictures -------------------------------------------------------------------------------------
GREEN, RED, GREY, ORANGE = (40, 200, 60), (230, 40, 40), (150, 150, 150), (255, 150, 0)


def timeline_figure(outcome: DriveOutcome, labels: tuple[str, ...], sign_label: str, settings: DriveSettings):
    """Score of the sign's class and the label read, against the distance to the sign, one row per
    texture; the braking point and the moment of recognition (k of n) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(outcome.readings)
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.6 * len(names) + 0.6), sharex=True, squeeze=False)
    d = outcome.frames.distance_m[:outcome.judged].numpy()
    cmap = matplotlib.colormaps["tab10"]
    for ax, name in zip(axes[:, 0], names):
        r = outcome.readings[name]
        ax.plot(d, r.score.numpy(), color="black", lw=1.2, label=f"score of '{sign_label}'")
        for lab in sorted(set(r.label.tolist())):
            sel = (r.label == lab).numpy()
            text = "not found" if lab < 0 else labels[lab]
            colour = "lightgrey" if lab < 0 else ("tab:green" if r.correct[sel].all() else cmap(lab % 10))
            ax.scatter(d[sel], np.full(sel.sum(), -0.08), s=9, marker="s", color=colour, label=f"read: {text}")
        ax.axvline(outcome.braking_m, color="tab:red", ls="--", lw=1, label=f"braking point {outcome.braking_m:.1f} m")
        at = outcome.recognised_at_m(name)
        if at is not None:
            ax.axvline(at, color="tab:green", lw=1.5, label=f"recognised ({settings.k} of {settings.n}) at {at:.1f} m")
        verdict = "stops" if outcome.stops(name) else "runs the sign"
        ax.set_title(f"{name}: {verdict}", fontsize=10, loc="left")
        ax.set_ylim(-0.15, 1.05)
        ax.set_ylabel("score")
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        ax.grid(alpha=0.3)
    axes[-1, 0].set_xlabel("distance to the sign along the road (m)")
    axes[-1, 0].invert_xaxis()
    dr = outcome.drive
    fig.suptitle(f"drive {outcome.index}: {dr.speed_kmh:g} km/h, {dr.light}, {dr.effects}, lane offset "
                 f"{dr.lane_offset_m:g} m, background {dr.background}", fontsize=10)
    fig.tight_layout()
    return fig


def _draw_frame(img: np.ndarray, scale: float, r: Readings, i: int, stack, outcome: DriveOutcome, name: str,
                settings: DriveSettings) -> np.ndarray:
    """One video frame (H×W×3 uint8 RGB) with the stack's search region, its detections and the verdict so far."""
    img = np.ascontiguousarray(img)
    px = lambda box: tuple(int(round(float(v) * scale)) for v in box)  # noqa: E731
    x0, y0, x1, y1 = px(stack.region)
    cv2.rectangle(img, (x0, y0), (x1, y1), GREY, 1)
    det_labels = stack.tiled.detector.labels
    thr = stack.tiled.detector.score_threshold
    if r.detections:
        shown = r.detections[i].above(thr)
        for box, score, lab in zip(shown.boxes, shown.scores.tolist(), shown.labels.tolist()):
            a, b, c, e = px(box)
            cv2.rectangle(img, (a, b), (c, e), ORANGE, 1)
            cv2.putText(img, f"{det_labels[lab][:12]} {score:.2f}", (a, max(10, b - 3)), cv2.FONT_HERSHEY_SIMPLEX,
                        0.35, ORANGE, 1, cv2.LINE_AA)
    if r.label[i] >= 0:
        colour = GREEN if r.correct[i] else RED
        a, b, c, e = px(r.box[i])
        cv2.rectangle(img, (a, b), (c, e), colour, 2)
        text = f"{stack.labels[int(r.label[i])]} {float(r.score[i]):.2f}"
        cv2.putText(img, text, (a, e + 14), cv2.FONT_HERSHEY_SIMPLEX, 0.45, colour, 1, cv2.LINE_AA)
    dist = float(outcome.frames.distance_m[i])
    rec = outcome.recognised[name]
    if rec is not None and rec <= i:
        at = outcome.recognised_at_m(name)
        status, colour = ((f"recognised at {at:.1f} m: STOPS", GREEN) if outcome.stops(name)
                          else (f"recognised at {at:.1f} m: too late, RUNS THE SIGN", RED))
    elif dist < outcome.braking_m:
        status, colour = "not recognised before the braking point: RUNS THE SIGN", RED
    else:
        status, colour = "not recognised yet", (255, 255, 255)
    lines = [(f"{name} | {outcome.drive.speed_kmh:g} km/h | sign {dist:.1f} m ahead | braking point "
              f"{outcome.braking_m:.1f} m", (255, 255, 255)), (status, colour)]
    band = img[:8 + 18 * len(lines)]
    band[:] = (band * 0.45).astype(np.uint8)                       # a dark band keeps the text readable
    for j, (text, col) in enumerate(lines):
        cv2.putText(img, text, (8, 18 + 18 * j), cv2.FONT_HERSHEY_SIMPLEX, 0.5, col, 1, cv2.LINE_AA)
    return img


def write_video(path, outcome: DriveOutcome, renderer, scene, textures: dict[str, Tensor], stack,
                settings: DriveSettings, photograph=None, chunk: int = 16):
    """The drive as a video: each texture's frames (re-rendered at ``video_scale`` of the sensor, the
    stack's readings of the judged frames drawn on them), stacked top to bottom. MP4 (``mp4v``);
    Motion-JPEG AVI where this OpenCV cannot write MP4. Returns the path written."""
    from pathlib import Path

    from physattack.atomic import save_with
    from physattack.eot.drive import DriveRenderer

    small = DriveRenderer(renderer.renderer, renderer.backgrounds, renderer.dashcam.scaled(settings.video_scale),
                          margin_px=renderer.margin_px)
    scale = small.dashcam.width_px / renderer.dashcam.width_px
    w, h = small.dashcam.width_px, small.dashcam.height_px
    path = Path(path)
    fourcc, out = "mp4v", path.with_suffix(".mp4")
    probe = cv2.VideoWriter(str(path.with_name(f".probe-{path.stem}.mp4")), cv2.VideoWriter_fourcc(*fourcc), 1, (w, h))
    if not probe.isOpened():
        fourcc, out = "MJPG", path.with_suffix(".avi")
    probe.release()
    path.with_name(f".probe-{path.stem}.mp4").unlink(missing_ok=True)

    def write(tmp: Path) -> None:
        writer = cv2.VideoWriter(str(tmp), cv2.VideoWriter_fourcc(*fourcc), float(outcome.drive.fps),
                                 (w, h * len(textures)))
        if not writer.isOpened():
            raise OSError(f"OpenCV could not open a video writer for {out} (fourcc {fourcc}).")
        try:
            for start in range(0, outcome.judged, chunk):
                sub = outcome.frames[start:min(outcome.judged, start + chunk)]
                rows = []
                for name, texture in textures.items():
                    images = small.render(scene, texture, sub).images
                    images = images if photograph is None else photograph(images)
                    u8 = (images.clamp(0, 1).permute(0, 2, 3, 1).cpu().numpy() * 255).round().astype(np.uint8)
                    rows.append([_draw_frame(u8[j], scale, outcome.readings[name], start + j, stack, outcome, name,
                                             settings) for j in range(len(sub))])
                for frame in zip(*rows):
                    writer.write(cv2.cvtColor(np.concatenate(frame, 0), cv2.COLOR_RGB2BGR))
        finally:
            writer.release()
    return save_with(out, write)


# -- the report -----------------------------------------------------------------------------------
def _pct(r: dict) -> str:
    if not r["n"]:
        return "n/a"
    return f"{r['rate']:.1%} [{r['ci95'][0]:.0%}-{r['ci95'][1]:.0%}] ({r['count']}/{r['n']})"


def stack_line(stack_info: dict) -> str:
    v = stack_info["victims"]
    return (f"two-stage ({v['detector']} -> {v['classifier']})" if stack_info["stack"] == "two-stage"
            else f"detector alone ({v['detector']})")


def drive_markdown(summary: dict, metrics: dict, outcomes: list[DriveOutcome], settings: DriveSettings,
                   files: dict[str, list[str]]) -> str:
    attacked = "stop_rate_attacked" in metrics
    lines = ["# Drive-by evaluation: would the car still stop?", "",
             f"{summary.get('scene', '')}, {summary.get('attack', '')}: {len(outcomes)} held-out drives through the "
             f"**{stack_line(summary)}** stack. {summary['setup']}", "",
             f"A sign is *recognised* when {settings.k} of the last {settings.n} frames read it as its class; the car "
             "*stops* when that happens at or before the braking point, the braking distance "
             f"v·{settings.reaction_s:g} s + v²/(2·{settings.decel_mps2:g} m/s²) from the sign. Attack success counts "
             "drives that stop clean and run the sign attacked, over the drives that stop clean. Rates with 95 % "
             "Wilson intervals.", "",
             "| drives | n | stop, clean | stop, attacked | run the sign, attacked | attack success |",
             "|---|---|---|---|---|---|"]

    def row(title: str, m: dict) -> str:
        cells = [_pct(m["stop_rate_clean"])]
        cells += ([_pct(m["stop_rate_attacked"]), _pct(m["run_rate_attacked"]), _pct(m["attack_success_rate"])]
                  if attacked else ["", "", ""])
        return f"| {title} | {m['drives']} | " + " | ".join(cells) + " |"

    lines.append(row("all", metrics))
    for s, m in metrics["by_speed"].items():
        lines.append(row(f"{s} km/h (braking {settings.braking_m(float(s)):.1f} m)", m))
    for li, m in metrics["by_lighting"].items():
        lines.append(row(li, m))
    lines += ["", "## Every drive", "",
              "| # | speed km/h | light | effects | lane offset m | background | braking m | clean: recognised at m | "
              "attacked: recognised at m |", "|---|---|---|---|---|---|---|---|---|"]
    for o in outcomes:
        cells = []
        for name in ("clean", "attacked"):
            if name not in o.readings:
                cells.append("")
                continue
            at = o.recognised_at_m(name)
            where = f" ({at:.1f})" if at is not None else " (never)"
            cells.append(("stops" if o.stops(name) else "**runs**") + where)
        d = o.drive
        lines.append(f"| {o.index} | {d.speed_kmh:g} | {d.light} | {d.effects} | {d.lane_offset_m:g} | "
                     f"{d.background} | {o.braking_m:.1f} | {cells[0]} | {cells[1]} |")
    lines += ["", "Drives not drawn are judged until the frame past their braking point (their verdict is known "
              "there): a 'never' means never before the braking point.", ""]
    if metrics.get("panel"):
        lines += panel_markdown(metrics["panel"], attacked)
    for kind, paths in files.items():
        if paths:
            lines.append(f"{kind}: " + ", ".join(f"[{p}]({p})" for p in paths))
    if any(p.endswith(".avi") for p in files.get("videos", [])):
        lines.append("(OpenCV on this machine cannot write MP4, so the videos are Motion-JPEG AVI, which W&B does not "
                     "play: they are only in this folder.)")
    return "\n".join(lines) + "\n"


def panel_markdown(table: dict, attacked: bool) -> list[str]:
    """The victims-over-the-drives table of ``drive.md``."""
    kind = table.get("kind", "classifier")
    seen = "read the same crops" if kind == "classifier" else "scanned the same frames"
    lines = ["## Victims over the drives", "",
             f"Every {kind} of the run's held-out protocol {seen} of the same drives, judged by the same rule. A "
             f"held-out one was never called by the optimizer: its row is what a car whose {kind} the patch was "
             "not fitted to would do.", "",
             "| victim | role | family | stop, clean | stop, attacked | attack success |", "|---|---|---|---|---|---|"]
    for name, r in table["members"].items():
        cells = [_pct(r["stop_rate_clean"])] + ([_pct(r["stop_rate_attacked"]), _pct(r["attack_success_rate"])]
                                                 if attacked else ["", ""])
        lines.append(f"| {name} | {r['role']} | {r['family'] or '–'} | " + " | ".join(cells) + " |")
    lines.append("")
    mean, fam = table["held_out_mean"], table["held_out_families"]
    if mean["attack_success_rate"] is not None:
        lines.append(f"Mean attack success over the {len(mean['victims'])} held-out victims that stop in some drive "
                     f"clean: **{mean['attack_success_rate']:.1%}**"
                     + (f"; over the {len(fam['victims'])} of families no attacked victim belongs to "
                        f"({', '.join(fam['families'])}): **{fam['attack_success_rate']:.1%}**."
                        if fam["attack_success_rate"] is not None else "."))
        lines.append("")
    if table["skipped"]:
        lines += [f"Skipped: {', '.join(f'`{n}` ({why})' for n, why in table['skipped'].items())}.", ""]
    return lines


def panel_phrase(table: dict) -> str:
    """How the panel fared over the drives, in words: an ensemble's attacked members one by one (a car
    runs one model, not the members' mean), and the held-out victims' mean (empty when none was scored)."""
    text = ""
    attacked = {n: r for n, r in table["members"].items() if r["role"] == "attacked" and "attack_success_rate" in r}
    if len(attacked) > 1:
        text += ("; each attacked member alone: " + ", ".join(
            f"{n} {r['attack_success_rate']['rate']:.1%}" if r["attack_success_rate"]["n"] else f"{n} n/a"
            for n, r in attacked.items()) + " of the drives it stops in clean")
    mean, fam = table["held_out_mean"], table["held_out_families"]
    if mean["attack_success_rate"] is None:
        return text
    k, kind = len(mean["victims"]), table.get("kind", "classifier")
    text += (f"; not fitted to: with {k} held-out {kind}{'' if k == 1 else 's'} it runs the sign in "
             f"{mean['attack_success_rate']:.1%} of the drives they stop in clean on average")
    if fam["attack_success_rate"] is not None:
        text += f", {fam['attack_success_rate']:.1%} for the {len(fam['victims'])} of families it never saw"
    return text


def drive_setup(dashcam, drives: list) -> str:
    """The drives' camera and conditions in one sentence."""
    values = lambda key: ", ".join(dict.fromkeys(f"{getattr(d, key):g}" if not isinstance(getattr(d, key), str)  # noqa: E731
                                                 else getattr(d, key) for d in drives))
    return (f"Dashcam {dashcam.width_px}×{dashcam.height_px} px, {dashcam.hfov_deg:g}° horizontal (focal "
            f"{dashcam.focal_px:.0f} px), {dashcam.height_m:g} m high, pitch {dashcam.pitch_deg:g}°; speeds "
            f"{values('speed_kmh')} km/h; light {values('light')}; camera effects {values('effects')}; lane offsets "
            f"{values('lane_offset_m')} m; from {values('start_m')} m at {values('fps')} fps until the sign leaves the "
            "frame; held-out backgrounds.")


def drive_headline(result: dict) -> str:
    """One line for the terminal: stop share clean vs attacked, through which victims."""
    c = result["stop_rate_clean"]
    line = (f"drive-by ({stack_line(result)}, {result['drives']} held-out drives): the car stops in {c['rate']:.1%} "
            f"(95% CI {c['ci95'][0]:.1%}-{c['ci95'][1]:.1%}) clean")
    if "stop_rate_attacked" in result:
        a, s = result["stop_rate_attacked"], result["attack_success_rate"]
        line += (f", {a['rate']:.1%} (95% CI {a['ci95'][0]:.1%}-{a['ci95'][1]:.1%}) attacked; the patch makes it run "
                 f"the sign in {s['rate']:.1%} of the drives it stops in clean ({s['count']}/{s['n']})")
        if result.get("panel"):
            line += panel_phrase(result["panel"])
    return line + f"; report {result['report']}"


def report_drives(*, out_dir, scene, clean_texture: Tensor, adv_texture: Tensor | None, drives: list, renderer,
                  stack, settings: DriveSettings, summary: dict, tracker=None, photograph=None,
                  progress: bool = False) -> dict:
    """Judge ``drives`` clean and attacked, write ``drive.json``, ``drive.md``, timeline plots and videos
    into ``out_dir`` and log them; returns what goes into a run's ``metrics.json`` under ``drive``."""
    from pathlib import Path

    import matplotlib.pyplot as plt

    from physattack.atomic import save_figure, save_json, save_text

    out_dir = Path(out_dir)
    textures = {"clean": clean_texture} if adv_texture is None else {"clean": clean_texture, "attacked": adv_texture}
    outcomes = evaluate_drives(scene=scene, textures=textures, drives=drives, renderer=renderer, stack=stack,
                               settings=settings, photograph=photograph, progress=progress)
    metrics = drive_metrics(outcomes)
    if stack.panel:
        metrics["panel"] = {**panel_metrics(outcomes, stack.panel, stack.panel_skipped),
                            "kind": "detector" if stack.kind == "detector" else "classifier"}
    sign_label = scene.class_name
    files: dict[str, list[str]] = {"timelines": [], "videos": []}
    for o in outcomes[:settings.timelines]:
        fig = timeline_figure(o, stack.labels, sign_label, settings)
        files["timelines"].append(save_figure(out_dir / f"timeline_{o.index}.png", fig).name)
        plt.close(fig)
    for o in outcomes[:settings.videos]:
        files["videos"].append(write_video(out_dir / f"drive_{o.index}.mp4", o, renderer, scene, textures, stack,
                                           settings, photograph).name)
    head = {**summary, "stack": stack.kind, "victims": stack.names, "setup": drive_setup(renderer.dashcam, drives)}
    result = {**head, **metrics, "report": str(out_dir / "drive.md"), "files": files}
    save_text(out_dir / "drive.md", drive_markdown(head, metrics, outcomes, settings, files))
    save_json(out_dir / "drive.json", {
        **result, "settings": {k: getattr(settings, k) for k in settings.__dataclass_fields__},
        "per_drive": [{**o.summary(), "timeline": {n: o.timeline(n, stack.labels) for n in o.readings}}
                      for o in outcomes]})
    if tracker is not None:
        flat = {f"drive/{k}": metrics[k]["rate"] for k in ("stop_rate_clean", "stop_rate_attacked", "run_rate_attacked",
                                                           "attack_success_rate") if k in metrics}
        panel = metrics.get("panel")
        if panel:
            flat.update({f"drive/{n}/attack_success_rate": r["attack_success_rate"]["rate"]
                         for n, r in panel["members"].items() if "attack_success_rate" in r})
            for key in ("held_out_mean", "held_out_families"):
                if panel[key]["attack_success_rate"] is not None:
                    flat[f"drive/{key}_attack_success_rate"] = panel[key]["attack_success_rate"]
            keys = ("stop_rate_clean", "stop_rate_attacked", "attack_success_rate")
            tracker.log_table("drive/victims", ["victim", "role", "family", *keys],
                              [[n, r["role"], r["family"], *(r[k]["rate"] if k in r else None for k in keys)]
                               for n, r in panel["members"].items()])
        tracker.summary(flat)
        tracker.log(flat)
        tracker.log_images({f"drive/timeline_{i}": cv2.cvtColor(cv2.imread(str(out_dir / p)), cv2.COLOR_BGR2RGB)
                            for i, p in enumerate(files["timelines"])})
        for p in files["videos"]:
            tracker.log_video(f"drive/{Path(p).stem}", out_dir / p)
        tracker.log_table("drive/per_drive", ["drive", "speed_kmh", "light", "lane_offset_m", "braking_m",
                                              *(f"{n}_stops" for n in textures)],
                          [[o.index, o.drive.speed_kmh, o.drive.light, o.drive.lane_offset_m, round(o.braking_m, 2),
                            *(o.stops(n) for n in textures)] for o in outcomes])
    return result
