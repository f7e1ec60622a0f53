"""Reading the user's images: one sentence for a missing, truncated or undecodable file, never a guess.

OpenCV decodes a truncated JPEG with a warning on stderr and grey where the data ran out, and drops an
alpha channel without a word; so every image the project reads from a user goes through here.
Pillow decodes (``load()`` raises on truncation) and the result is always 8-bit: grey becomes RGB,
16-bit and float images are scaled to 8 bits, the EXIF orientation is applied (as OpenCV does), and
an alpha channel is used only when it is fully opaque — otherwise the file is refused, or composited
onto white when the caller asks (``alpha="composite_white"``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Literal

import cv2
import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from physattack.errors import InputError

Alpha = Literal["refuse", "composite_white"]
_HIGH_DEPTH = ("I;16", "I;16L", "I;16B", "I;16N", "I", "F")

#: The largest image any command reads (pixels): a 50-megapixel photo; larger ones are refused from the
#: file's header, before they are decoded (a 12 000 × 12 000 image takes over 12 GB on its way to a tensor).
MAX_PIXELS = 50_000_000
#: The largest side of a texture or mask (texels): 4096 texels across a 750 mm sign are 0.18 mm each,
#: finer than a printer's dot; a larger texture only costs memory in every rendered view.
MAX_TEXTURE_SIDE = 4096


def read_rgb(path: str | Path, what: str = "image", *, alpha: Alpha = "refuse",
             error: type[InputError] = InputError, max_side: int | None = None) -> np.ndarray:
    """The image at ``path`` as H×W×3 uint8 RGB.

    Args:
        what: what the file is, for the message ("texture", "background image", "photo").
        alpha: ``refuse`` a file with any transparent pixel, or ``composite_white`` it onto white.
        error: the ``InputError`` subclass to raise (the calling part's own).
        max_side: the largest width or height accepted (textures and masks: ``MAX_TEXTURE_SIDE``); every
            image is also held to ``MAX_PIXELS``. Both are checked from the header, before decoding.

    Raises:
        error: the file is missing, truncated or not an image, too large, or has transparent pixels
            (``refuse``).
    """
    rgba = _read_rgba8(Path(path), what, error, max_side)
    if rgba.shape[2] == 3:
        return rgba
    a = rgba[..., 3:]
    if a.min() == 255:
        return np.ascontiguousarray(rgba[..., :3])
    if alpha == "composite_white":
        mixed = rgba[..., :3].astype(np.float32) * (a / 255.0) + 255.0 * (1 - a / 255.0)
        return np.clip(np.round(mixed), 0, 255).astype(np.uint8)
    if alpha != "refuse":
        raise ValueError(f"alpha must be 'refuse' or 'composite_white', not {alpha!r}")
    raise error(f"The {what} {path} has transparent pixels (its alpha channel is not fully opaque) and what "
                "lies behind them is unknown; flatten it onto a background colour and save it without alpha.")


def read_rgba(path: str | Path, what: str = "image", *, error: type[InputError] = InputError,
              max_side: int | None = None) -> np.ndarray:
    """The image at ``path`` as H×W×4 uint8 RGBA (alpha 255 where the file has none)."""
    rgba = _read_rgba8(Path(path), what, error, max_side)
    if rgba.shape[2] == 4:
        return rgba
    return np.concatenate([rgba, np.full((*rgba.shape[:2], 1), 255, np.uint8)], axis=2)


def read_grey(path: str | Path, what: str = "image", *, error: type[InputError] = InputError,
              max_side: int | None = None) -> np.ndarray:
    """The image at ``path`` as H×W uint8 luma (a mask: white = on); transparent pixels are refused."""
    rgb = read_rgb(path, what, error=error, max_side=max_side)
    if (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 1] == rgb[..., 2]).all():
        return np.ascontiguousarray(rgb[..., 0])
    return cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)


def check_size(width: int, height: int, path: Path, what: str, error: type[InputError],
               max_side: int | None = None) -> None:
    """Refuse an image larger than ``MAX_PIXELS`` (or than ``max_side`` a side) with the reason."""
    if max_side is not None and max(width, height) > max_side:
        raise error(f"The {what} {path} is {width}×{height} px; a {what} may be at most {max_side} px a side "
                    f"({max_side} texels across a 750 mm sign are 0.18 mm each, finer than print, and a larger one "
                    "only costs memory in every view): scale it down.")
    if width * height > MAX_PIXELS:
        raise error(f"The {what} {path} is {width}×{height} px ({width * height / 1e6:.0f} megapixels); images "
                    f"above {MAX_PIXELS / 1e6:.0f} megapixels are refused before decoding (they would take "
                    f"{width * height * 16 / 2 ** 30:.1f} GB and more on their way to a tensor): scale it down.")


def _read_rgba8(path: Path, what: str, error: type[InputError], max_side: int | None = None) -> np.ndarray:
    """H×W×3 or H×W×4 uint8: 4 channels only when the file has an alpha channel or transparency."""
    if not path.is_file():
        raise error(f"There is no {what} at {path}; check the path.")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)   # MAX_PIXELS is the limit here
            im = Image.open(path)                              # reads the header only
        with im:
            check_size(*im.size, path, what, error, max_side)
            im.load()                                          # raises on a truncated file
            im = ImageOps.exif_transpose(im)
            return _to_uint8(im)
    except UnidentifiedImageError:
        return _read_with_opencv(path, what, error, max_side)  # a format Pillow lacks (e.g. OpenEXR, PFM)
    except InputError:
        raise
    except Image.DecompressionBombError as exc:
        raise error(f"The {what} {path} is too large to read safely ({exc}); scale it down.") from None
    except (OSError, SyntaxError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise error(f"The {what} {path} is truncated or damaged ({reason}); replace it with a complete "
                    "PNG or JPEG.") from None


def _to_uint8(im: Image.Image) -> np.ndarray:
    if im.mode in _HIGH_DEPTH:                                 # 16-bit or 32-bit grey, float grey
        return np.repeat(_eight_bit(np.asarray(im))[..., None], 3, axis=2)
    has_alpha = im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info
    return np.array(im.convert("RGBA" if has_alpha else "RGB"))          # a writable copy


def _eight_bit(a: np.ndarray) -> np.ndarray:
    """uint8 from any depth: 16-bit and wider integers scale 0..65535 to 0..255; floats in [0, 1]
    (or already in 0..255) are rounded and clipped."""
    if a.dtype == np.uint8:
        return a
    if a.dtype.kind == "f":
        a = a * 255.0 if float(np.nanmax(a, initial=0)) <= 1.0 else a
    else:
        a = a / 257.0
    return np.clip(np.round(np.nan_to_num(a)), 0, 255).astype(np.uint8)


def _read_with_opencv(path: Path, what: str, error: type[InputError], max_side: int | None = None) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_UNCHANGED | cv2.IMREAD_ANYDEPTH)
    if img is None:
        raise error(f"The {what} {path} is not an image that can be decoded; save it as PNG or JPEG.")
    check_size(img.shape[1], img.shape[0], path, what, error, max_side)
    img = _eight_bit(img)
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    return cv2.cvtColor(img, cv2.COLOR_BGRA2RGBA if img.shape[2] == 4 else cv2.COLOR_BGR2RGB)


__all__ = ["MAX_PIXELS", "MAX_TEXTURE_SIDE", "check_size", "read_grey", "read_rgb", "read_rgba"]
