"""Patches: the only place an attack lives. ``patch.apply(base_texture) -> texture``."""

from physattack.patch.frame import FramePatch, frame_for_scene
from physattack.patch.paint import PaintPatch, paint_for_scene
from physattack.patch.sticker import PatchError, StickerPatch, bars_mask, mask_from_png, sticker_for_scene

__all__ = ["FramePatch", "PaintPatch", "PatchError", "StickerPatch", "bars_mask", "frame_for_scene", "mask_from_png", "paint_for_scene",
           "sticker_for_scene"]
