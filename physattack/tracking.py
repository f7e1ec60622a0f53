"""Experiment tracking: Weights & Biases (offline unless told otherwise) or nothing, behind one interface."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from physattack.errors import InputError, check_range


class NullTracker:
    """Tracks nothing; the interface every tracker has."""

    run_id: str | None = None

    def __init__(self, dir: str | Path | None = None, run_config: dict | None = None):
        pass

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        pass

    def log_images(self, images: dict[str, np.ndarray], step: int | None = None) -> None:
        """``images``: name -> H×W×3 uint8 RGB."""

    def log_table(self, name: str, columns: list[str], rows: list[list]) -> None:
        pass

    def log_video(self, name: str, path: str | Path) -> None:
        """A video file (MP4) written by the run."""

    def log_artifact(self, name: str, kind: str, paths: list[Path]) -> None:
        pass

    def summary(self, metrics: dict[str, Any]) -> None:
        pass

    def finish(self) -> None:
        pass


@dataclass(eq=False)
class WandbTracker(NullTracker):
    """A W&B run, started when the tracker is made from its settings (``conf/logger/wandb.yaml``, and
    ``dir``, ``run_config`` and ``resume_id`` from the command). ``mode="offline"`` (default) writes
    under ``dir`` for a later ``wandb sync``; ``"online"`` needs an API key; ``"disabled"`` writes nothing.

    Args:
        project, entity, group, name, tags: as in ``wandb.init``.
        mode: offline, online or disabled.
        dir: where the ``wandb/`` folder goes (the run directory).
        run_config: the resolved run configuration.
        resume_id: continue this W&B run (used when resuming from a checkpoint).
        init_timeout_s: online, seconds to wait for the W&B server.
    """

    project: str = "physattack"
    mode: str = "offline"
    entity: str | None = None
    group: str | None = None
    name: str | None = None
    tags: list[str] | None = None
    dir: str | Path = "."
    run_config: dict | None = field(default=None, repr=False)
    resume_id: str | None = None
    init_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        import wandb

        if self.mode not in {"offline", "online", "disabled"}:
            raise InputError(f"logger.mode must be offline, online or disabled, not '{self.mode}'.")
        if self.mode == "online" and not _has_api_key():
            raise InputError("logger.mode=online needs a W&B API key: run `wandb login` or set WANDB_API_KEY, or keep "
                             "logger.mode=offline and `wandb sync` the run's wandb/ folder later.")
        check_range("logger.init_timeout_s", self.init_timeout_s, 0, lo_open=True,
                    why="seconds to wait for the W&B server")
        self._wandb = wandb
        try:
            self.run = wandb.init(project=self.project, entity=self.entity, group=self.group, name=self.name,
                                  tags=list(self.tags or []), mode=self.mode, dir=str(self.dir), config=self.run_config,
                                  id=self.resume_id, resume="allow" if self.resume_id else None,
                                  settings=wandb.Settings(silent=True, init_timeout=float(self.init_timeout_s)))
        except (wandb.errors.CommError, wandb.errors.AuthenticationError) as e:
            raise InputError(f"logger.mode=online could not reach the W&B server within {self.init_timeout_s:g} s "
                             f"({_first_line(e)}); check the network, or run with logger.mode=offline and "
                             "`wandb sync` the run's wandb/ folder later.") from None
        except ValueError as e:             # pydantic's ValidationError: a WANDB_* variable W&B cannot take
            detail = " ".join(str(e).split())[:200]
            raise InputError(f"W&B refused its settings ({detail}); check the WANDB_* environment variables "
                             "(e.g. WANDB_MODE must be online, offline or disabled) and logger.*.") from None
        self.run_id = self.run.id

    def log(self, metrics, step=None):
        self.run.log(metrics, step=step)

    def log_images(self, images, step=None):
        self.run.log({k: self._wandb.Image(v) for k, v in images.items()}, step=step)

    def log_table(self, name, columns, rows):
        self.run.log({name: self._wandb.Table(columns=columns, data=rows)})

    def log_video(self, name, path):
        path = Path(path)
        if path.suffix.lower() not in {".mp4", ".gif", ".webm", ".ogg"}:
            return                     # W&B plays only these; the file stays in the run folder
        self.run.log({name: self._wandb.Video(str(path), format=path.suffix.lower().lstrip("."))})

    def log_artifact(self, name, kind, paths):
        art = self._wandb.Artifact(name, type=kind)
        for p in paths:
            art.add_file(str(p))
        self.run.log_artifact(art)

    def summary(self, metrics):
        self.run.summary.update(metrics)

    def finish(self):
        self.run.finish()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]


def _has_api_key() -> bool:
    """Whether W&B can log in without asking: WANDB_API_KEY, or a netrc entry for its host."""
    import netrc
    import os
    from urllib.parse import urlparse

    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False
