"""Judging drives: would the car still stop?

A sign is *recognised* at the first frame where ``k`` of the last ``n`` frames read it as its class;
the car *stops* when that happens while the sign is still at least the braking distance
``v·t_r + v²/(2a)`` away (``braking_distance_m``). Shares of drives that stop, clean and attacked,
carry Wilson intervals; success of the attack counts the drives that stop clean and run the sign
attacked (RP2's rule, per drive), beside the unconditional share that runs the sign.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass, field, replace
from typing import Callable

import torch
from torch import Tensor

from physattack.drive.stacks import Needed, PanelVictim, Readings, cat_readings
from physattack.drive.trajectories import braking_distance_m
from physattack.errors import InputError, Interrupted, check_range
from physattack.evaluate.members import held_out_selection, other_data_selection
from physattack.evaluate.metrics import rate


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


def check_vote(key: str, k: int, n: int) -> None:
    """``k`` of ``n`` frames is a rule that can be met (``key``: the settings' prefix, e.g. ``drive.settings.``)."""
    check_range(key + "n", n, 1, integer=True, why="frames in the voting window")
    check_range(key + "k", k, 1, integer=True, why="frames of the window that must read the sign")
    if k > n:
        raise InputError(f"{key}k must be <= {key}n (k of the last n frames must read the sign); got k={k}, n={n}.")


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
        early_stop: stop reading a drive for the stack or a panel victim once it has recognised the sign
            (its verdict is then known); ``false`` reads every drive to its braking point, for a check that
            the verdicts are the same.
        near_sign: detectors scan only the tiles near the sign (all a detection on it can come from) on the
            drives not drawn as videos; ``false`` scans every tile of the search region, as a car would.
    """

    k: int = 3
    n: int = 5
    reaction_s: float = 1.0
    decel_mps2: float = 6.0
    iou: float = 0.3
    timelines: int = 3
    videos: int = 2
    video_scale: float = 0.5
    early_stop: bool = True
    near_sign: bool = True

    def __post_init__(self) -> None:
        key = "drive.settings."
        check_vote(key, self.k, self.n)
        check_range(key + "reaction_s", self.reaction_s, 0.0, why="reaction time in seconds")
        check_range(key + "decel_mps2", self.decel_mps2, 0.0, lo_open=True, why="braking deceleration in m/s²")
        check_range(key + "iou", self.iou, 0.0, 1.0, lo_open=True, why="IoU of a detection with the sign's box")
        check_range(key + "timelines", self.timelines, 0, integer=True, why="drives drawn as timeline plots")
        check_range(key + "videos", self.videos, 0, integer=True, why="drives written as MP4")
        check_range(key + "video_scale", self.video_scale, 0.05, 1.0, why="the videos' size as a share of the sensor's")

    def braking_m(self, speed_kmh: float) -> float:
        return braking_distance_m(speed_kmh, self.reaction_s, self.decel_mps2)



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
    recognised (k of n), or None; ``readings``: name -> the stack's ``Readings`` of the frames read (the
    first ones of ``frames``; ``judged``: the most read for any texture).
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
            if self.panel_recognised.get(name):
                out[name]["panel"] = {v: {"stops": self.stops(name, v), "recognised_at_m": _m(self.recognised_at_m(name, v))}
                                      for v in self.panel_recognised[name]}
        return out

    def timeline(self, name: str, labels: tuple[str, ...]) -> dict:
        r = self.readings[name]
        return {"distance_m": [round(float(v), 2) for v in self.frames.distance_m[:len(r.correct)]],
                "label": [labels[int(v)] if v >= 0 else None for v in r.label],
                "score": [round(float(v), 4) for v in r.score], "correct": [bool(v) for v in r.correct]}


def _m(distance: float | None) -> float | None:
    return None if distance is None else round(distance, 2)


@dataclass
class Judging:
    """What judging a drive takes besides the drive: the scene and its textures (name -> texture:
    ``clean``, ``attacked``), the drive renderer, the stack that reads the frames, the settings, the
    colour model's camera stage applied to the frames as the run's views had it (``photograph``),
    how many frames are rendered at a time (``chunk``), and whether the stack's own readings are wanted
    (``own``; False: only its panel's, each victim alone — the restart judge's, which never reads the stack's)."""

    scene: object
    textures: dict[str, Tensor]
    renderer: object                 # physattack.drive.trajectories.DriveRenderer
    stack: object                    # physattack.drive.stacks.DetectorStack or TwoStageStack
    settings: DriveSettings
    photograph: Callable[[Tensor], Tensor] | None = None
    chunk: int = 16
    own: bool = True

    def images(self, views) -> Tensor:
        return views.images if self.photograph is None else self.photograph(views.images)


def judge_drive(index: int, drive, frames, judging: Judging, whole: bool) -> DriveOutcome:
    """Render and read one drive with each of ``judging``'s textures, ``chunk`` frames at a time.

    ``whole``: read every frame with the stack and keep every frame's detections (for timelines and
    videos). Else stop where the verdict is known and keep no detections: at the first frame past the
    braking point, or — with ``settings.early_stop`` — as soon as the stack and every panel victim has
    recognised the sign (the frame it did so, and so the verdict, does not change with the frames after
    it). With ``early_stop`` a panel victim whose verdict is known stops reading while the others go on,
    on a whole drive too (only the stack's readings are drawn). Detectors scan only the tiles near the sign
    (``Needed.near_sign``: no detection elsewhere bears on a verdict) except on drives drawn as videos, which
    show every detection in the frame.
    """
    settings, stack, chunk = judging.settings, judging.stack, judging.chunk
    near_sign = settings.near_sign and index >= settings.videos    # a video shows every detection in the frame
    braking = settings.braking_m(drive.speed_kmh)
    past = torch.nonzero(frames.distance_m < braking).flatten()
    judged = len(frames) if whole or len(past) == 0 else int(past[0]) + 1
    readings, read_frames = {}, 0
    for name, texture in judging.textures.items():
        parts: list[Readings] = []
        needed = Needed(judging.own, None, near_sign=near_sign)
        for start in range(0, judged, chunk):
            sub = frames[start:min(judged, start + chunk)]
            views = judging.renderer.render(judging.scene, texture.detach(), sub, region=stack.region)
            read = stack.read(judging.images(views), views.region, views.boxes, needed)
            parts.append(read if whole else read.verdicts())
            if settings.early_stop:
                needed = still_needed(cat_readings(parts), settings)
                needed = replace(needed, own=needed.own and judging.own, near_sign=near_sign)
                if whole:                  # the timeline and the video show the stack's readings, every frame
                    needed = replace(needed, own=True)
                elif not needed.own and not needed.panel:
                    break
        readings[name] = cat_readings(parts)
        read_frames = max(read_frames, len(readings[name].correct))
    recognised = {n: first_recognition(r.correct, settings.k, settings.n) for n, r in readings.items()}
    panel = {n: {v: first_recognition(c, settings.k, settings.n) for v, c in r.panel.items()}
             for n, r in readings.items()}
    return DriveOutcome(index, drive, frames, braking, read_frames, readings, recognised, panel)


def still_needed(readings: Readings, settings: DriveSettings) -> Needed:
    """Whose readings a drive still needs: the stack's and the panel victims' that have not recognised the
    sign yet (once one has, the frame it did and so its verdict are fixed)."""
    known = lambda correct: first_recognition(correct, settings.k, settings.n) is not None  # noqa: E731
    return Needed(not known(readings.correct), frozenset(v for v, c in readings.panel.items() if not known(c)))


def drive_metrics(outcomes: list[DriveOutcome]) -> dict:
    """Shares of drives that stop, clean and attacked, overall and per speed and per light (and per weather,
    occlusion and sign yaw where the drives have more than clear air, nothing in the way and a sign square to the
    road); the
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
    out = {**block(outcomes),
           "by_speed": {f"{s:g}": block([o for o in outcomes if o.drive.speed_kmh == s]) for s in speeds},
           "by_lighting": {li: block([o for o in outcomes if o.drive.light == li]) for li in lights}}
    for key, attr, default in (("by_weather", "weather", "clear"), ("by_occlusion", "occlusion", "none"),
                               ("by_sign_yaw", "sign_yaw_deg", 0.0), ("by_curve", "curve_radius_m", 0.0),
                               ("by_grade", "grade_pct", 0.0)):
        values = list(dict.fromkeys(getattr(o.drive, attr, default) for o in outcomes))
        if values != [default]:
            out[key] = {f"{v:g}" if isinstance(v, float) else v:
                        block([o for o in outcomes if getattr(o.drive, attr, default) == v]) for v in values}
    return out


def panel_metrics(outcomes: list[DriveOutcome], panel: dict[str, PanelVictim], skipped: dict[str, str] | None = None
                  ) -> dict:
    """Each panel victim's shares of drives that stop, clean and attacked, and the attack's success on it
    (drives it stops in clean and runs attacked, over those it stops in clean); the held-out victims'
    mean success, that of the held-out victims of families no attacked victim belongs to, and that of those
    trained on other data than the renders (as the held-out protocol's members table,
    ``physattack.evaluate.members``)."""
    attacked = bool(outcomes) and "attacked" in outcomes[0].readings
    rows = {}
    for name, member in panel.items():
        clean = torch.tensor([o.stops("clean", name) for o in outcomes], dtype=torch.bool)
        row = {"role": member.role, "family": member.family, "data": member.data, "drives": len(outcomes),
               "stop_rate_clean": rate(clean)}
        if attacked:
            adv = torch.tensor([o.stops("attacked", name) for o in outcomes], dtype=torch.bool)
            row.update(stop_rate_attacked=rate(adv), attack_success_rate=rate(~adv[clean]))
        rows[name] = row
    defined, other = held_out_selection(rows, {r["family"] for r in rows.values()
                                               if r["role"] == "attacked" and r["family"]})
    other_data = other_data_selection(rows)

    def mean(names: list[str]) -> float | None:
        return sum(rows[n]["attack_success_rate"]["rate"] for n in names) / len(names) if names else None

    return {"members": rows, "skipped": dict(skipped or {}),
            "held_out_mean": {"victims": defined, "attack_success_rate": mean(defined)},
            "held_out_families": {"victims": other, "families": sorted({rows[n]["family"] for n in other}),
                                  "attack_success_rate": mean(other)},
            "held_out_other_data": {"victims": other_data, "data": sorted({rows[n]["data"] for n in other_data}),
                                    "attack_success_rate": mean(other_data),
                                    "attack_success_rate_min": min((rows[n]["attack_success_rate"]["rate"]
                                                                    for n in other_data), default=None)}}


def evaluate_drives(judging: Judging, drives: list, progress: bool = False, store=None) -> list[DriveOutcome]:
    """Judge every drive with each texture (``clean``, ``attacked``); the first ``max(timelines,
    videos)`` drives are judged to their last frame, the others until their verdict is known.

    ``store`` (a ``physattack.drive.store.DriveStore``) keeps each drive's results as it finishes and
    gives back those an earlier run of the same report finished; stopped by Ctrl-C or SIGTERM, this says
    in one sentence how many drives it kept."""
    from tqdm import tqdm

    settings = judging.settings
    check_braking(drives, settings)
    shown = max(settings.timelines, settings.videos)
    outcomes = []
    try:
        for i, drive in enumerate(tqdm(drives, desc="drives", unit="drive", disable=not progress)):
            frames = drive.frames(judging.renderer.dashcam, judging.scene.texture_size_m)
            outcome = store.load(i, drive, frames) if store is not None else None
            if outcome is None:
                outcome = judge_drive(i, drive, frames, judging, whole=i < shown)
                if store is not None:
                    store.save(outcome)
            outcomes.append(outcome)
    except (KeyboardInterrupt, Interrupted) as stop:
        if store is None:
            raise
        signum = stop.signum if isinstance(stop, Interrupted) else signal.SIGINT
        raise Interrupted(signum, f"{store.kept()} of {len(drives)} drives are judged and kept in "
                                  f"{store.folder.parent}; run the same command again to continue from there") from None
    return outcomes
