"""Checkpoints of the EOT loop: plain data only (tensors, numbers, lists, dicts), so they load with
``weights_only=True``; a run resumed from one (``resume=``) continues as if it had never stopped."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path

import torch

from physattack.atomic import load_torch, save_torch
from physattack.attack.errors import AttackError


@dataclass
class LoopState:
    """Where the loop stands; checkpoints keep it as a plain dict (``as_dict``), so they load as data."""

    step: int = 0
    ema_success: float = 0.0
    ema_loss: float = math.inf
    best_key: tuple[float, float] = (-1.0, -math.inf)     # (running success rounded, -running loss)
    best_state: dict = field(default_factory=dict)
    best_step: int = 0
    history: list[dict] = field(default_factory=list)
    zero_grad: int = 0
    starts: list[dict] = field(default_factory=list)     # attack.restarts: each start's seed and running success

    def as_dict(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self)}, "best_key": list(self.best_key)}

    @classmethod
    def from_dict(cls, data: dict) -> "LoopState":
        return cls(**{**data, "best_key": tuple(data["best_key"])})


def save_checkpoint(attack, path: Path, loop, state: LoopState, tracker) -> None:
    """Write ``loop``'s patch, optimizer, schedule, generators, ``state`` and what ``attack`` learns besides the
    patch (``attack.checkpoint_state``) to ``path``."""
    save_torch(path, {"patch": loop.setup.patch.state_dict(), "optimizer": loop.opt.state_dict(),
                      "scheduler": loop.sched.state_dict(), "generator": loop.generator.get_state(),
                      "torch_rng": torch.get_rng_state(), "state": state.as_dict(),
                      "attack": attack.checkpoint_state(), "wandb_run_id": getattr(tracker, "run_id", None),
                      "sampler": loop.setup.sampler.state_dict() if hasattr(loop.setup.sampler, "state_dict")
                      else {}})

def load_checkpoint(attack, path: str | Path, loop) -> LoopState:
    """Restore a checkpoint (a run directory or its checkpoint.pt) into ``loop``; returns its state."""
    path = Path(path)
    if path.is_dir():
        path = path / "checkpoint.pt"
    if not path.is_file():
        raise AttackError(f"No checkpoint at {path}; give resume= a run directory or its checkpoint.pt.")
    ckpt = load_torch(path, "checkpoint")
    missing = {"patch", "optimizer", "scheduler", "generator", "torch_rng", "state"} - set(
        ckpt if isinstance(ckpt, dict) else ())
    if missing:
        raise AttackError(f"{path} is not a physattack checkpoint (it lacks {', '.join(sorted(missing))}); "
                          "give resume= the run directory an attack wrote.")
    try:
        state = LoopState.from_dict(ckpt["state"])
    except (TypeError, KeyError):
        raise AttackError(f"{path} holds a loop state this version cannot read; start a new run instead "
                          "of resuming it.") from None
    try:
        loop.setup.patch.load_state_dict(ckpt["patch"])
        loop.opt.load_state_dict(ckpt["optimizer"])
        loop.sched.load_state_dict(ckpt["scheduler"])
    except (RuntimeError, ValueError, KeyError, TypeError) as e:
        raise AttackError(f"The checkpoint {path} holds a different patch (shape or type) than this run's "
                          f"configuration; resume with the patch it was made with. ({str(e).splitlines()[0]})") from None
    loop.generator.set_state(ckpt["generator"])
    torch.set_rng_state(ckpt["torch_rng"])
    attack.load_checkpoint_state(ckpt.get("attack", {}))
    if hasattr(loop.setup.sampler, "load_state_dict"):
        loop.setup.sampler.load_state_dict(ckpt.get("sampler") or {})
    return state
