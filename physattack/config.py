"""Run-level settings, typed, so that a wrong value fails before any work starts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RunConfig:
    """Scalars of one run (the top level of ``conf/config.yaml``).

    Args:
        seed: seeds the sampler's generator and torch; a fixed seed gives the same patch on CPU.
        device: ``cpu`` or ``cuda`` (or ``cuda:N``).
        image_size: side of the rendered views in pixels.
        eval_batch_size: views per batch during grid evaluation.
        gallery_views: how many grid views the clean-vs-attacked picture shows.
        resume: a run directory or checkpoint.pt to continue from.
        progress: show progress bars.
        amp: run the victim under bfloat16 autocast (a CUDA speed switch; gradients stay float32).
        channels_last: feed the victim channels-last images (faster convolutions on CUDA).
    """

    seed: int = 0
    device: str = "cpu"
    image_size: int = 96
    eval_batch_size: int = 64
    gallery_views: int = 16
    resume: str | None = None
    progress: bool = True
    amp: bool = False
    channels_last: bool = False
