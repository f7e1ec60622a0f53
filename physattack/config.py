"""Run-level settings, typed, so that a wrong value fails before any work starts."""

from __future__ import annotations

import re
from dataclasses import dataclass

from physattack.errors import InputError, check_range

DEVICE = re.compile(r"(cpu|mps|cuda(:\d+)?)")


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
        init: a finished run whose patch this run starts from (its stickers' places and colours); the victims
            that run attacked are reported as attacked here too, never as held out.
        progress: show progress bars.
        amp: run the victim under bfloat16 autocast (a CUDA speed switch; gradients stay float32).
        channels_last: feed the victim channels-last images (faster convolutions on CUDA).
        keep_freed_memory: keep freed CPU memory for the next step instead of handing it back to the
            system (glibc; ``physattack.cli.allocator``): fewer page faults, faster CPU steps, memory held
            up to the run's peak.
    """

    seed: int = 0
    device: str = "cpu"
    image_size: int = 96
    eval_batch_size: int = 64
    gallery_views: int = 16
    resume: str | None = None
    init: str | None = None
    progress: bool = True
    amp: bool = False
    channels_last: bool = False
    keep_freed_memory: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise InputError(f"seed must be an integer (it seeds the sampler and torch); got {self.seed!r}.")
        if not isinstance(self.device, str) or not DEVICE.fullmatch(self.device):
            raise InputError(f"device must be cpu, cuda, cuda:N or mps; got {self.device!r}.")
        check_range("image_size", self.image_size, 8, integer=True, why="the side of the rendered views in pixels")
        check_range("eval_batch_size", self.eval_batch_size, 1, integer=True, why="views per evaluation batch")
        check_range("gallery_views", self.gallery_views, 0, integer=True,
                    why="how many clean-vs-attacked pairs views.png shows")
