"""Files a run writes and reads back.

Writes are atomic (a temp file in the same folder, then a rename), so no reader ever sees half a
file; every file the project writes goes through here. Reads of torch files never unpickle code
(``weights_only=True``): a shared run folder is data, never a program.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import cv2
import numpy as np
import torch

from physattack.errors import InputError


def save_with(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` atomically: ``write(tmp)`` fills a temp file beside it, which then replaces it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())     # as open() would make it, not mkstemp's 0600
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_json(path: str | Path, data: Any) -> Path:
    return save_with(path, lambda p: p.write_text(json.dumps(data, indent=2, default=float) + "\n"))


def save_text(path: str | Path, text: str) -> Path:
    return save_with(path, lambda p: p.write_text(text))


def save_torch(path: str | Path, obj: Any) -> Path:
    return save_with(path, lambda p: torch.save(obj, p))


def save_rgb_png(path: str | Path, image: np.ndarray | torch.Tensor) -> Path:
    """Save an RGB image: H×W×3 uint8, or a 3×H×W float tensor in [0, 1]."""
    if isinstance(image, torch.Tensor):
        image = (image.detach().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
    return save_png(path, image)


def save_png(path: str | Path, image: np.ndarray) -> Path:
    """Save a uint8 image as PNG: H×W (grey), H×W×3 (RGB) or H×W×4 (RGBA)."""
    if image.ndim == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR if image.shape[2] == 3 else cv2.COLOR_RGBA2BGRA)

    def write(p: Path) -> None:
        if not cv2.imwrite(str(p), image):
            raise OSError(f"OpenCV could not write {p}.")
    return save_with(path, write)


def save_figure(path: str | Path, fig) -> Path:
    return save_with(path, lambda p: fig.savefig(p, dpi=120, bbox_inches="tight", format="png"))


def load_torch(path: str | Path, what: str = "file", map_location: str | torch.device = "cpu") -> Any:
    """Load a torch file the project wrote (a checkpoint, a patch) as data only.

    ``torch.load(weights_only=True)`` refuses anything but tensors and plain containers, so a file
    that would run code on load (a pickle payload) is refused with one sentence, as is a truncated
    or corrupt file.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"There is no {what} at {path}.")
    try:
        return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:        # UnpicklingError for code, RuntimeError/EOFError for damage
        reason = str(exc).strip().splitlines()[0].split(". ")[0].rstrip(".") if str(exc).strip() else type(exc).__name__
        if "weights_only" in str(exc) or "Unsupported global" in str(exc) or "UnpicklingError" in type(exc).__name__:
            raise InputError(f"{path} is not a plain {what}: it holds Python objects that would run code when "
                             f"loaded, so it was refused; only load {what}s physattack wrote.") from None
        raise InputError(f"{path} could not be read as a {what} ({reason}); it is truncated or not a "
                         f"physattack {what}.") from None
