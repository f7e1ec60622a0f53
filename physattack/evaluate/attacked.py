"""What the evaluation of a finished attack is handed: the attack as it ended (``FinishedAttack``) and
where and how to judge it (``EvaluationSetup``). The attack kinds (``physattack.cli.kinds``) fill both
and call their kind's report (``report.report_classifier_attack``, ``detection.report_detection_attack``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from torch import Tensor


@dataclass
class FinishedAttack:
    """A finished (or interrupted) attack.

    Args:
        scene, victim, patch: what was attacked, and the patch (its best state loaded).
        attack: the attack object (objective, target, steps, batch size).
        result: its ``AttackResult`` (steps done, best step, history, interrupted, zero-gradient steps).
        adv_texture: the patch applied to the scene's texture; ``eval_texture``: as the held-out views
            show it (printed by the colour model, when the run has one).
        victim_names: the attacked victims' names; ``timing``: (the run's start, the attack's seconds).
        init: ``{"run", "attacked_by_gradient"}`` when the patch started from a finished run (``init=``).
    """

    scene: object
    victim: object
    patch: object
    attack: object
    result: object
    adv_texture: Tensor
    eval_texture: Tensor
    victim_names: list[str]
    timing: tuple[float, float] = (0.0, 0.0)
    init: dict | None = None

    @property
    def started(self) -> float:
        return self.timing[0]

    @property
    def attack_seconds(self) -> float:
        return self.timing[1]

    def stopped(self) -> dict:
        """Whether (and by which signal) the attack was interrupted, as the report records it."""
        return {"interrupted": self.result.interrupted, "interrupted_by": self.result.signal}

    def elapsed(self) -> float:
        return round(time.time() - self.started, 1)


@dataclass
class EvaluationSetup:
    """Where and how a finished attack is judged.

    Args:
        pipeline: the held-out view pipeline; ``grid``: the run's quick grid (a detector's frame grid).
        run_dir: where the outputs go; ``tracker``: the run's tracker.
        run: the run's ``RunConfig`` (seed, device, eval batch size, gallery views).
        protocol: the held-out protocol of the kind (``protocol.HeldOutRun`` for classifiers, the
            ``{name: Member}`` detectors pool for detectors), or None when the run skips it.
        export: writes the print bundle, given what the manifest records of the attack.
        colour_model: the printer/camera colour model the attack printed its patch with.
    """

    pipeline: object
    grid: object
    run_dir: Path
    tracker: object
    run: object
    protocol: object | None = None
    export: Callable[[dict], None] = field(default=lambda source: None)
    colour_model: object | None = None


__all__ = ["EvaluationSetup", "FinishedAttack"]
