"""Atomic writes: a temp file in the same folder, then a rename, so no reader ever sees half a file."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import cv2
import numpy as np
import torch


def _atomic(path: str | Path, write: Callable[[Path], None]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def save_json(path: str | Path, data: Any) -> Path:
    return _atomic(path, lambda p: p.write_text(json.dumps(data, indent=2, default=float) + "\n"))


def save_text(path: str | Path, text: str) -> Path:
    return _atomic(path, lambda p: p.write_text(text))


def save_torch(path: str | Path, obj: Any) -> Path:
    return _atomic(path, lambda p: torch.save(obj, p))


def save_rgb_png(path: str | Path, image: np.ndarray | torch.Tensor) -> Path:
    """Save an RGB image: H×W×3 uint8, or a 3×H×W float tensor in [0, 1]."""
    if isinstance(image, torch.Tensor):
        image = (image.detach().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)

    def write(p: Path) -> None:
        if not cv2.imwrite(str(p), cv2.cvtColor(image, cv2.COLOR_RGB2BGR)):
            raise OSError(f"OpenCV could not write {p}.")
    return _atomic(path, write)


def save_figure(path: str | Path, fig) -> Path:
    return _atomic(path, lambda p: fig.savefig(p, dpi=120, bbox_inches="tight", format="png"))
