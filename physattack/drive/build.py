"""A drive evaluation from plain parts: the held-out drives, how their frames are rendered, the stack a
car reads them with, the panel of victims judged beside it, and the judge.

``physattack.cli`` instantiates the configured pieces (dashcam, drive set, settings, the detector and
the classifier) and calls ``drive_evaluation``; nothing outside this part reaches into the stacks'
classes. Bad settings (a braking point beyond the first frame) are refused here, before any frame is
rendered.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from torch import Tensor

from physattack.drive.judge import (DriveSettings, Judging, check_braking, drive_metrics, evaluate_drives,
                                    panel_metrics)
from physattack.drive.report import report_drives
from physattack.drive.stacks import (DetectorStack, Panel, PanelVictim, StackSettings, TiledDetector, TwoStageStack,
                                     covering_roads)
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam


@dataclass
class DriveWorld:
    """Where the drives happen: the scene, the drives, and what their frames are rendered with."""

    scene: object
    drives: list
    renderer: object            # physattack.render.Renderer
    backgrounds: object         # physattack.eot.BackgroundBank (held-out backgrounds)
    dashcam: Dashcam
    print_retroreflects: bool = False   # the patch printed on retroreflective film (printer.material)


@dataclass
class Perception:
    """The stack a car runs and who is judged beside it.

    Args:
        detector: proposes boxes on the frames (or, with no classifier, is the stack).
        classifier: labels the detector's crop of the sign; None for a detector alone.
        names: ``{"detector": ..., "classifier": ...}`` as the reports name them.
        members: ``{name: Member}`` (victim, role, family) of the run's held-out protocol, attacked and
            held out: the panel (classifiers read the same crops; detectors scan the same frames).
        crop_px, crop_frame: the side of the classifier's crop and the sign's share of it.
    """

    detector: object
    classifier: object | None
    names: dict[str, str]
    members: dict | None = None
    crop_px: int = 96
    crop_frame: float = 0.8


@dataclass
class DriveEvaluation:
    """A drive evaluation: the held-out drives, how they are rendered, the stack that reads them, the judge."""

    scene: object
    drives: list
    renderer: DriveRenderer
    stack: object               # DetectorStack or TwoStageStack
    settings: DriveSettings
    setup: str | None = None    # the drives in one sentence, when they are not a simulated set (footage)

    def report(self, adv_texture: Tensor | None, out_dir: str | Path, summary: dict, *, tracker=None,
               photograph=None, progress: bool = False) -> dict:
        """Judge the clean sign (and ``adv_texture``, the attacked one) on the drives and write the drive
        report into ``out_dir`` (``physattack.drive.report.report_drives``); returns its summary."""
        return report_drives(self, out_dir=out_dir, clean_texture=self.scene.texture, adv_texture=adv_texture,
                             summary=summary, tracker=tracker, photograph=photograph, progress=progress)


def drive_evaluation(world: DriveWorld, perception: Perception, settings: DriveSettings,
                     stack_settings: StackSettings) -> DriveEvaluation:
    """The drive evaluation of ``perception`` on ``world``'s drives: a detector stack when there is no
    classifier, else a two-stage stack whose panel is ``perception.members``' classifiers."""
    check_braking(world.drives, settings)
    stack_settings = covering_roads(stack_settings, world.drives, world.dashcam, tuple(world.scene.texture_size_m))
    stack = perception_stack(perception, world.scene, world.dashcam, settings, stack_settings)
    return DriveEvaluation(world.scene, world.drives, DriveRenderer(world.renderer, world.backgrounds, world.dashcam,
                                                                       print_retroreflects=world.print_retroreflects),
                           stack, settings)


def footage_evaluation(scene, footage: str | Path, track: str | Path, perception: Perception, settings: DriveSettings,
                       stack_settings: StackSettings, options=None) -> DriveEvaluation:
    """The drive evaluation of ``perception`` on the user's ``footage`` (a video or a folder of frames) where
    ``track`` gives the sign face's corners per frame (``physattack.drive.footage``): one drive, the attacked
    sign composited onto the real one, judged by the same stack and rule as a simulated drive. ``options``: a
    ``FootageOptions`` (the camera's field of view, the speed, ...; its defaults when None)."""
    from physattack.drive.footage import Footage, FootageOptions, FootageRenderer, footage_drive, read_track

    options = options or FootageOptions()
    track = read_track(track)
    frames = Footage(footage, options.fps)
    dashcam = Dashcam(width_px=frames.width, height_px=frames.height, hfov_deg=options.hfov_deg,
                      height_m=options.height_m)
    drive = footage_drive(frames, track, dashcam, tuple(scene.texture_size_m), settings.braking_m, options.speed_kmh)
    stack = perception_stack(perception, scene, dashcam, settings, stack_settings)
    speed = (f"{drive.speed_kmh:.1f} km/h" + (" (estimated from the track: the slope of the sign's distance by its "
                                               "corners)" if drive.speed_source == "track" else ""))
    setup = (f"Footage {drive.footage} ({frames.width}×{frames.height} px, {options.hfov_deg:g}° horizontal: focal "
             f"{dashcam.focal_px:.0f} px), frames {drive.first_frame}-{drive.last_frame} at {drive.fps:g} fps tracked "
             f"by {drive.track}; the sign from {drive.start_m:.1f} m (by its corners), {drive.lane_offset_m:.1f} m right "
             f"of the camera; {speed}. The attacked texels are composited onto the real sign and relit per frame "
             "(a gain and offset per channel fitted to the clean sign); the clean drive is the footage itself.")
    return DriveEvaluation(scene, [drive], FootageRenderer(frames, dashcam, options.blur_sigma_px), stack, settings,
                           setup)


def perception_stack(perception: Perception, scene, dashcam: Dashcam, settings: DriveSettings,
                     stack_settings: StackSettings):
    """The stack ``perception`` describes on ``dashcam``'s frames: a detector stack when there is no classifier,
    else a two-stage stack; either with its panel of ``perception.members``."""
    size_m = tuple(scene.texture_size_m)
    tiled = TiledDetector(perception.detector, dashcam, size_m, stack_settings)
    frame = stack_settings.crop_frame if stack_settings.crop_frame is not None else perception.crop_frame
    side = stack_settings.crop_px if stack_settings.crop_px is not None else perception.crop_px
    if perception.classifier is None:
        panel, skipped = drive_panel(perception.members, scene.class_name, detectors=True)
        panel = {n: replace(m, model=TiledDetector(m.model, dashcam, size_m, stack_settings)) for n, m in panel.items()}
        stack = DetectorStack(tiled, perception.detector.label_index(scene.class_name), settings.iou, perception.names,
                              Panel(panel, skipped))
    else:
        classifier = perception.classifier
        panel, skipped = drive_panel(perception.members, scene.class_name)
        stack = TwoStageStack(tiled, classifier, classifier.label_set(scene.class_name), settings.iou, frame, side,
                              perception.names, Panel(panel, skipped))
    return stack


def drive_panel(members: dict | None, scene_class: str, detectors: bool = False) -> tuple[dict, dict]:
    """The drive panel of ``members`` (name -> ``PanelVictim``) and the members left off it with the reason:
    classifiers for a two-stage stack, detectors (``detectors=True``) for a detector stack; a member of the
    other kind, or without the sign's class, is skipped."""
    from physattack.evaluate.members import label_sets
    from physattack.victims.base import VictimError

    panel, skipped = {}, {}
    for name, member in (members or {}).items():
        if bool(getattr(member.victim, "is_detector", False)) != detectors:
            skipped[name] = "a classifier, on a detector stack" if detectors else "a detector, on a two-stage stack"
            continue
        if detectors:
            try:
                panel[name] = PanelVictim(member.victim, (member.victim.label_index(scene_class),), member.role,
                                          member.family, member.data)
            except VictimError:
                skipped[name] = f"its labels lack the scene's class '{scene_class}'"
            continue
        sets = label_sets(member.victim, scene_class, None)
        if isinstance(sets, str):
            skipped[name] = sets
        else:
            panel[name] = PanelVictim(member.victim, sets.true_set, member.role, member.family, member.data)
    return panel, skipped


def _outcomes(evaluation, clean_texture: Tensor, photograph=None, own: bool = True) -> Callable[[Tensor], list]:
    """``texture -> outcomes`` of ``evaluation``'s drives: the clean sign judged once, here, each texture after it
    only attacked; no timelines or videos. ``own`` False: the panel's readings alone (the stack's own are not read)."""
    settings = replace(evaluation.settings, timelines=0, videos=0)
    clean = evaluate_drives(Judging(evaluation.scene, {"clean": clean_texture}, evaluation.renderer, evaluation.stack,
                                    settings, photograph, own=own), evaluation.drives)

    def outcomes(texture: Tensor) -> list:
        adv = evaluate_drives(Judging(evaluation.scene, {"attacked": texture}, evaluation.renderer, evaluation.stack,
                                      settings, photograph, own=own), evaluation.drives)
        return [replace(a, readings={**c.readings, **a.readings}, recognised={**c.recognised, **a.recognised},
                        panel_recognised={**c.panel_recognised, **a.panel_recognised}) for c, a in zip(clean, adv)]

    return outcomes


def members_judge(evaluation, clean_texture: Tensor, photograph=None, own: bool = False
                  ) -> Callable[[Tensor], dict[str, float]]:
    """``texture -> {member: share of drives run}``: each attacked member of ``evaluation``'s panel alone, over the
    drives it stops clean (a member that stops none is left out); what ``attack.restart_judge.by=drives`` reads.
    ``judge.drives`` is how many drives it judges on. The stack's own reading (the members' mean) is not made unless
    ``own`` (a benchmark's baseline: the shares are the same)."""
    outcomes_of = _outcomes(evaluation, clean_texture, photograph, own=own)

    def judge(texture: Tensor) -> dict[str, float]:
        p = panel_metrics(outcomes_of(texture), evaluation.stack.panel, evaluation.stack.panel_skipped)
        return {name: r["attack_success_rate"]["rate"] for name, r in p["members"].items()
                if r["role"] == "attacked" and r["attack_success_rate"]["n"]}

    judge.drives = len(evaluation.drives)
    return judge


def frontier_judge(evaluation, clean_texture: Tensor, photograph=None) -> Callable[[Tensor], dict]:
    """A judge of ``evaluation``'s drives (a ``DriveEvaluation``) for the area frontier (``physattack.evaluate.area``):
    the clean sign is judged once, each texture after it only attacked; no timelines or videos."""
    outcomes_of = _outcomes(evaluation, clean_texture, photograph)

    def judge(texture: Tensor) -> dict:
        outcomes = outcomes_of(texture)
        m = drive_metrics(outcomes)
        out = {"drives": m["drives"], "attack_success_rate": m["attack_success_rate"]}
        if evaluation.stack.panel:
            p = panel_metrics(outcomes, evaluation.stack.panel, evaluation.stack.panel_skipped)
            out["held_out_mean"] = p["held_out_mean"]["attack_success_rate"]
            out["held_out_families"] = p["held_out_families"]["attack_success_rate"]
            out["held_out_other_data"] = p["held_out_other_data"]["attack_success_rate"]
            members = [r["attack_success_rate"]["rate"] for r in p["members"].values()
                       if r["role"] == "attacked" and r["attack_success_rate"]["n"]]
            if len(members) > 1:                  # an ensemble: a car runs one member, not the stack's mean
                out["attacked_min"] = min(members)
        return out

    return judge


__all__ = ["DriveEvaluation", "DriveWorld", "Perception", "drive_evaluation", "drive_panel", "footage_evaluation",
           "frontier_judge", "members_judge", "perception_stack"]
