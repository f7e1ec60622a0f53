"""Files a run writes and reads back.

Writes are atomic (a temp file in the same folder, then a rename), so no reader ever sees half a
file; every file the project writes goes through here. Reads of torch files never unpickle code
(``weights_only=True``): a shared run folder is data, never a program.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import cv2
import numpy as np
import torch

from physattack.errors import WRITE_ERRNOS, InputError, WriteError


def save_with(path: str | Path, write: Callable[[Path], None]) -> Path:
    """Write ``path`` atomically: ``write(tmp)`` fills a temp file beside it, which then replaces it."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
        os.close(fd)
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())     # as open() would make it, not mkstemp's 0600
        os.replace(tmp, path)
    except OSError as e:
        if e.errno not in WRITE_ERRNOS and not isinstance(e, PermissionError):
            raise
        raise WriteError(path, e.strerror or str(e)) from None
    finally:
        if tmp is not None and os.path.exists(tmp):
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
    buffer = io.BytesIO()                   # serialised first, then written by Python: a full disk has its errno
    torch.save(obj, buffer)
    return save_with(path, lambda p: p.write_bytes(buffer.getbuffer()))


def save_rgb_png(path: str | Path, image: np.ndarray | torch.Tensor) -> Path:
    """Save an RGB image: H×W×3 uint8, or a 3×H×W float tensor in [0, 1]."""
    if isinstance(image, torch.Tensor):
        image = (image.detach().clamp(0, 1).permute(1, 2, 0).cpu().numpy() * 255).round().astype(np.uint8)
    return save_png(path, image)


def save_png(path: str | Path, image: np.ndarray) -> Path:
    """Save a uint8 image as PNG: H×W (grey), H×W×3 (RGB) or H×W×4 (RGBA)."""
    if image.ndim == 3:
        image = cv2.cvtColor(image, cv2.COLOR_RGB2BGR if image.shape[2] == 3 else cv2.COLOR_RGBA2BGRA)

    ok, encoded = cv2.imencode(".png", image)
    if not ok:
        raise ValueError(f"OpenCV could not encode a {image.shape} {image.dtype} image as PNG for {path}.")
    return save_with(path, lambda p: p.write_bytes(encoded.tobytes()))     # Python's write: a full disk has its errno


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
        with warnings.catch_warnings():          # torch's advice to load untrusted pickles is not ours
            warnings.simplefilter("ignore")
            return torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:        # "Unsupported global" for code; other unpickling errors for damage
        if "unsupported global" in str(exc).lower():
            raise InputError(f"{path} is not {_a(what)}plain {what}: it holds Python objects that would run code "
                             "when loaded, so it was refused; only load files physattack wrote.") from None
        reason = _unpickling_reason(exc)
        raise InputError(f"{path} could not be read as {_a(what)}{what} ({reason}); it is truncated, damaged or "
                         "not a file physattack wrote.") from None


def _a(what: str) -> str:
    """The article before ``what``: none for a plural ("weights")."""
    return "" if what.endswith("s") else "an " if what[:1].lower() in "aeiou" else "a "


def _unpickling_reason(exc: BaseException) -> str:
    """The part of torch's load error that says what is wrong with the bytes (not its advice on
    ``weights_only``)."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        return " ".join(text.split(marker, 1)[1].split()).split(" Check the documentation")[0][:120] or "unreadable"
    first = text.strip().splitlines()[0].split(". ")[0].rstrip(".") if text.strip() else type(exc).__name__
    return first[:160]
