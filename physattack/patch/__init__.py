"""Patches: the only place an attack lives. ``patch.apply(base_texture) -> texture``; every patch
is a ``Patch`` (physattack/patch/base.py), the interface the attack loop uses."""

from physattack.patch.base import Patch, PatchError
from physattack.patch.frame import FramePatch, frame_for_scene
from physattack.patch.paint import PaintPatch, paint_for_scene
from physattack.patch.sticker import StickerPatch, bars_mask, mask_from_png, sticker_for_scene

__all__ = ["FramePatch", "PaintPatch", "Patch", "PatchError", "StickerPatch", "bars_mask", "frame_for_scene",
           "mask_from_png", "paint_for_scene", "sticker_for_scene"]
