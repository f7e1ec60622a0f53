"""Printability priors: the printer's palette, the non-printability score and total variation.

These priors keep an optimized patch within what a printer can reproduce (colours near the
palette) and what survives printing and viewing at a distance (no texel-level noise).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import kornia
import torch
from torch import Tensor

from physattack.errors import InputError


def default_palette_path() -> Path:
    return Path(str(resources.files("physattack.assets"))) / "printer_palette.txt"


def load_palette(path: str | Path | None = None) -> Tensor:
    """K×3 printable colours in [0, 1] from a text file of ``R G B`` lines (0-255; ``#`` comments)."""
    path = Path(path) if path else default_palette_path()
    if not path.is_file():
        raise InputError(f"The printer palette {path} does not exist; give printer.palette a file "
                                "of 'R G B' lines (0-255) or null for the bundled palette.")
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.split("#")[0].strip()
        if not line:
            continue
        parts = line.replace(",", " ").split()
        if len(parts) != 3:
            raise InputError(f"{path}:{lineno}: expected three numbers 'R G B' (0-255), got '{line}'.")
        rows.append([float(p) for p in parts])
    if not rows:
        raise InputError(f"The printer palette {path} lists no colours; add 'R G B' lines.")
    return torch.tensor(rows) / 255.0


def non_printability_score(colors: Tensor, palette: Tensor, mask: Tensor | None = None) -> Tensor:
    """Mean distance from each patch texel to its nearest printable colour (Sharif et al. 2016's NPS,
    with the product over palette colours replaced by the minimum, which keeps the scale readable).

    Args:
        colors: 3×H×W in [0, 1]. palette: K×3. mask: 1×H×W weights (the patch's texels).
    """
    flat = colors.flatten(1).T                                   # N×3
    if mask is None:
        return torch.cdist(flat, palette.to(flat)).amin(dim=1).mean()
    w = mask.flatten().to(flat)
    on = w > 0                                                   # texels of weight 0 cost nothing to skip
    dist = torch.cdist(flat[on], palette.to(flat)).amin(dim=1)
    return (dist * w[on]).sum() / w.sum().clamp(min=1)


def total_variation(colors: Tensor, mask: Tensor | None = None) -> Tensor:
    """Mean absolute difference between neighbouring texels, per texel and channel.

    With a ``mask`` only pairs of texels that are both on the patch count, so a sticker's own edge
    costs nothing (kornia's total_variation, used without a mask, has no such option).
    """
    if mask is None:
        return kornia.losses.total_variation(colors, reduction="sum").sum() / colors.numel()
    dx = (colors[:, :, 1:] - colors[:, :, :-1]).abs() * (mask[:, :, 1:] * mask[:, :, :-1])
    dy = (colors[:, 1:] - colors[:, :-1]).abs() * (mask[:, 1:] * mask[:, :-1])
    return (dx.sum() + dy.sum()) / (3 * mask.sum().clamp(min=1))
