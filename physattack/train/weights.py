"""Where trained weights go: ``<name>.safetensors`` (the state dict) beside ``<name>.json`` (the
metadata a loader reads back), both written atomically. Whether a file may be written (an existing
one is never replaced unless asked) is the command's rule: ``physattack.cli.rundir.weights_target``."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file
from torch import nn

from physattack.atomic import save_json, save_with


def save_weights(out: str | Path, model: nn.Module, meta: dict) -> tuple[Path, Path]:
    """Write ``model``'s state dict to ``out`` (.safetensors) and ``meta`` to the .json beside it."""
    out = Path(out)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_with(out, lambda p: save_file(state, str(p)))
    return out, save_json(out.with_suffix(".json"), meta)
