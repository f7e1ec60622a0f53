"""What the bundled victims are trained on: the attack's own renderer, view sampler, training and
held-out background banks and evaluation grid, built by the command from the same configs as an
attack (``conf/renderer``, ``conf/eot``: ``physattack.cli.train.training_world``), so that a victim
learns from the views an attack optimizes through and is measured on the grid an attack is judged on.

Training's own held-out test sets (background seed 7777, the hard banks) are training's, not the
attack's: they are never drawn by an attack or by its protocol.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TrainingWorld:
    """The attack's parts a training renders with.

    Args:
        renderer: ``physattack.render.Renderer``.
        sampler: the attack's ``ViewSampler`` (``conf/eot/default.yaml``'s ``sampler``).
        backgrounds: the attack's training background bank (``eot.backgrounds``).
        eval_backgrounds: the attack's held-out bank (``eot.eval_backgrounds``).
        grid: the attack's evaluation grid (``eot.grid``).
    """

    renderer: object
    sampler: object
    backgrounds: object
    eval_backgrounds: object
    grid: object


@dataclass(frozen=True)
class ViewSource:
    """Where a training set's views come from: a renderer, a sampler and the background bank it draws on."""

    renderer: object
    sampler: object
    bank: object


__all__ = ["TrainingWorld", "ViewSource"]
