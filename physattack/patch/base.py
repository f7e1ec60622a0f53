"""What the attack loop asks of a patch, in one place: ``Patch``.

A patch is an ``nn.Module`` whose parameters are what the attack optimizes; ``apply`` puts it on a
base texture and ``colors`` gives the colours the printability priors judge. The defaults here are
those of a patch with nothing to anneal and a fixed mask, so the loop calls every member on every
patch instead of probing with ``hasattr``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from physattack.errors import InputError


class PatchError(InputError):
    """A patch that cannot be built; the message says what to do."""


class Patch(nn.Module):
    """The patch interface of the EOT loop (``physattack.attack.EOTAttack``).

    Subclasses register a ``mask`` buffer (1×Ht×Wt in {0, 1}: the texels the patch may change) and
    implement ``apply`` and ``colors``; ``parameters()``, ``state_dict()`` and ``load_state_dict()``
    are ``nn.Module``'s.

    Attributes:
        mask: 1×Ht×Wt buffer, 1 where the patch is.
        mask_search: ``{"area": share of the face, "cell_px": cell side}`` when the attack should
            choose the mask first (``physattack.attack.mask_search``), else None.
        palette_constrained: whether ``colors()`` only ever takes the printer palette's colours.
        cut_as_stickers: whether the print export cuts the patch into stickers (cut sheets and a
            placement template) rather than printing the texture whole (paint).
    """

    mask: Tensor
    mask_search: dict | None = None
    palette_constrained: bool = False
    cut_as_stickers: bool = False

    def apply(self, base_texture: Tensor) -> Tensor:
        """Base texture 3×Ht×Wt (or B×3×Ht×Wt) -> the texture with the patch on, same shape."""
        raise NotImplementedError

    def printed(self, base_texture: Tensor, colour_model=None) -> Tensor:
        """``apply(base_texture)`` as printed, without gradient: ``colour_model`` (a
        ``physattack.printing.ColourModel``) prints the texels under the mask; None leaves the designed colours.
        What a drive of the patch shows once the colours are final (the restart judge reads it)."""
        with torch.no_grad():
            texture = self.apply(base_texture)
            return texture if colour_model is None else colour_model.print_patch(texture, self.mask)

    def colors(self) -> Tensor:
        """3×Ht×Wt colours in [0, 1], what the printability priors (NPS, TV) judge under ``mask``."""
        raise NotImplementedError

    def area_fraction(self, face_mask: Tensor) -> float:
        """Share of the face (texels where ``face_mask`` is 1) the patch covers."""
        return float((self.mask * face_mask).sum() / face_mask.sum().clamp(min=1))

    def anneal(self, progress: float) -> None:
        """Follow a schedule over the attack, ``progress`` from 0 to 1 (1: final); nothing by default."""

    @property
    def colors_final(self) -> bool:
        """Whether ``colors()`` are what will be printed, so this state may be kept as the best one."""
        return True

    def set_colors(self, colors: Tensor) -> None:
        """Make ``colors()`` return ``colors`` (3×Ht×Wt in [0, 1]) under the mask, as nearly as the patch can: how a
        gradient-free optimizer hands back its result. Patches without free colours refuse."""
        raise PatchError(f"A {type(self).__name__} cannot take colours from a gradient-free optimizer; use patch=sticker.")

    def set_mask(self, mask: Tensor) -> None:
        """Replace where the patch is (after a mask search); parameters are kept."""
        self.mask.copy_((mask > 0.5).float().to(self.mask))
