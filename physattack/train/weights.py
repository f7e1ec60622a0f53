"""Where trained weights go: ``<name>.safetensors`` (the state dict) beside ``<name>.json`` (the
metadata a loader reads back), both written atomically; an existing weights file is never replaced
unless asked."""

from __future__ import annotations

from pathlib import Path

from safetensors.torch import save_file
from torch import nn

from physattack.atomic import save_json, save_with
from physattack.errors import InputError


def check_target(out: str | Path, overwrite: bool = False) -> Path:
    """``out`` as a weights path that may be written: a ``.safetensors`` name, not an existing file
    unless ``overwrite``. Call it before training, so that no hour is lost."""
    out = Path(out)
    if out.suffix != ".safetensors":
        raise InputError(f"out={out} must name a .safetensors file (the metadata goes beside it as .json).")
    if not overwrite and (out.exists() or out.with_suffix(".json").exists()):
        raise InputError(f"{out} already exists (or its .json does); choose another out= or add overwrite=true "
                         "to replace it.")
    return out


def save_weights(out: str | Path, model: nn.Module, meta: dict) -> tuple[Path, Path]:
    """Write ``model``'s state dict to ``out`` (.safetensors) and ``meta`` to the .json beside it."""
    out = Path(out)
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    save_with(out, lambda p: save_file(state, str(p)))
    return out, save_json(out.with_suffix(".json"), meta)
