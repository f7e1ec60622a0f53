"""Drives: a dashcam's approach to the sign, the perception stacks a car runs on its frames, the judge
(k of n frames before the braking point) and the drive report with timelines and videos.

``trajectories`` (dashcam, drives and the EOT sampler of drive views), ``render`` (the drive renderer: the sign
over the street or a background, occlusion, glare, weather, exposure), ``street``, ``night``, ``weather``,
``occlusion`` and ``glare`` (what a drive's world holds), ``stacks``
(tiled detectors, detector and two-stage stacks, panels), ``judge`` (the verdict and its shares),
``video`` (timelines and videos), ``report`` (drive.json, drive.md, W&B), ``footage`` (drives over the
user's own video: tracks, compositing, relighting) and ``build`` (a drive evaluation from plain parts: what
``cli`` calls).
"""

from physattack.drive.judge import DriveOutcome, DriveSettings, check_braking, evaluate_drives, first_recognition
from physattack.drive.render import DriveRenderer
from physattack.drive.stacks import (DetectorStack, PanelVictim, Readings, SearchScale, StackSettings, TiledDetector,
                                     TwoStageStack)
from physattack.drive.trajectories import Dashcam, Drive, DriveFrames, DriveSampler, DriveSet, braking_distance_m

__all__ = ["Dashcam", "DetectorStack", "Drive", "DriveFrames", "DriveOutcome", "DriveRenderer", "DriveSampler",
           "DriveSet", "DriveSettings", "PanelVictim", "Readings", "SearchScale", "StackSettings", "TiledDetector",
           "TwoStageStack", "braking_distance_m", "check_braking", "evaluate_drives", "first_recognition"]
