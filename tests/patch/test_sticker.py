"""Sticker patches (physattack/patch/sticker.py): RP2's bars, user masks, and apply()."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from physattack.errors import InputError
from physattack.patch import PatchError, StickerPatch, bars_mask, mask_from_png, sticker_for_scene
from physattack.scene import load_scene


@pytest.fixture(scope="module")
def stop():
    return load_scene("stop_sign")


def _components(mask: torch.Tensor) -> int:
    n, _ = cv2.connectedComponents((mask[0].numpy() > 0.5).astype(np.uint8))
    return n - 1


@pytest.mark.parametrize("area", [0.05, 0.15, 0.3])
def test_bars_cover_the_requested_share_of_the_face(stop, area):
    mask = bars_mask(stop.face_mask, area)
    share = float((mask * stop.face_mask).sum() / stop.face_mask.sum())
    # Bar heights are whole texel rows: the smallest height reaching the area, so at most one row
    # per bar (2 × 286 texels, 0.26 % of the face) above it.
    assert area <= share <= area + 0.01
    assert share - area < 2 * 0.56 * 512 / float(stop.face_mask.sum()) + 1e-6


def test_bars_are_two_symmetric_bands_on_the_face(stop):
    mask = bars_mask(stop.face_mask, 0.15)
    assert mask.shape == stop.face_mask.shape
    assert set(mask.unique().tolist()) == {0.0, 1.0}
    assert torch.all(mask <= stop.face_mask)
    assert _components(mask) == 2
    rows = torch.nonzero(mask[0].any(1)).flatten()
    top, bottom = rows[rows < 256], rows[rows >= 256]
    # Centred at 22 % and 78 % of the height, spanning 56 % of the width.
    assert float(top.float().mean()) == pytest.approx(0.22 * 512, abs=1.0)
    assert float(bottom.float().mean()) == pytest.approx(0.78 * 512, abs=1.0)
    cols = torch.nonzero(mask[0].any(0)).flatten()
    assert len(cols) == pytest.approx(0.56 * 512, abs=1)
    assert int(cols.min()) + int(cols.max()) == 511            # centred left to right


def test_apply_changes_only_masked_texels(stop):
    patch = sticker_for_scene(stop, shape="bars")
    with torch.no_grad():
        patch.logits.normal_(0, 2, generator=torch.Generator().manual_seed(0))
    out = patch.apply(stop.texture).detach()
    on = patch.mask[0] > 0.5
    assert torch.equal(out[:, ~on], stop.texture[:, ~on])
    torch.testing.assert_close(out[:, on], torch.sigmoid(patch.logits)[:, on])
    assert float((out[:, on] - stop.texture[:, on]).abs().mean()) > 0.1
    assert float(out.min()) >= 0 and float(out.max()) <= 1


def test_initial_colour_and_area_fraction(stop):
    patch = sticker_for_scene(stop, shape="bars", area=0.1, init_color=(0.2, 0.4, 0.9))
    torch.testing.assert_close(patch.colors()[:, 100, 100], torch.tensor([0.2, 0.4, 0.9]))
    assert patch.area_fraction(stop.face_mask) == pytest.approx(0.1, abs=0.01)
    # Only the colours are learnable; the mask moves with the module as a buffer.
    assert [name for name, _ in patch.named_parameters()] == ["logits"]
    assert "mask" in dict(patch.named_buffers())


def test_sticker_colour_gradient_lives_on_the_mask(stop):
    patch = sticker_for_scene(stop, shape="bars")
    base = stop.texture.clone().requires_grad_(True)
    patch.apply(base).sum().backward()
    on = patch.mask[0] > 0.5
    g = patch.logits.grad.abs().sum(0)
    assert torch.all(g[~on] == 0) and torch.all(g[on] > 0)
    gb = base.grad.abs().sum(0)
    assert torch.all(gb[on] == 0) and torch.all(gb[~on] == 3)


def test_mask_must_be_one_by_h_by_w():
    with pytest.raises(PatchError, match="1×H×W"):
        StickerPatch(torch.ones(3, 8, 8))
    with pytest.raises(PatchError):
        StickerPatch(torch.ones(8, 8))


def test_mask_from_png_reads_and_resizes(tmp_path):
    img = np.zeros((20, 40), np.uint8)
    img[:, 20:] = 255
    path = tmp_path / "mask.png"
    cv2.imwrite(str(path), img)
    mask = mask_from_png(path, (10, 8))
    assert mask.shape == (1, 10, 8)
    assert torch.all(mask[0, :, :4] == 0) and torch.all(mask[0, :, 4:] == 1)


def test_mask_from_png_bad_path_raises(tmp_path):
    with pytest.raises(PatchError, match="missing or not an image"):
        mask_from_png(tmp_path / "absent.png", (16, 16))
    not_image = tmp_path / "notes.png"
    not_image.write_text("not a png")
    with pytest.raises(PatchError):
        mask_from_png(not_image, (16, 16))
    assert issubclass(PatchError, InputError)


def test_sticker_for_scene_with_a_png_mask_is_limited_to_the_face(stop, tmp_path):
    img = np.full((64, 64), 255, np.uint8)       # covers the whole texture, corners included
    path = tmp_path / "all.png"
    cv2.imwrite(str(path), img)
    patch = sticker_for_scene(stop, mask_png=str(path))
    assert torch.equal(patch.mask, stop.face_mask)
    assert torch.equal(sticker_for_scene(stop, shape="bars", mask_png=str(path)).mask, stop.face_mask)


def test_sticker_for_scene_refuses_unknown_shapes_and_empty_masks(stop, tmp_path):
    with pytest.raises(PatchError, match="circles"):
        sticker_for_scene(stop, shape="circles")
    corner = np.zeros((512, 512), np.uint8)
    corner[:8, :8] = 255                          # off the octagon
    path = tmp_path / "corner.png"
    cv2.imwrite(str(path), corner)
    with pytest.raises(PatchError, match="covers no texel"):
        sticker_for_scene(stop, mask_png=str(path))


@pytest.mark.parametrize("area", [0.0, -0.1, 1.5])
def test_sticker_area_must_be_a_share_of_the_face(stop, area):
    with pytest.raises(PatchError, match="area"):
        sticker_for_scene(stop, shape="bars", area=area)


def test_bars_shape_is_what_bars_mask_gives(stop):
    patch = sticker_for_scene(stop, shape="bars", area=0.12)
    assert torch.equal(patch.mask, bars_mask(stop.face_mask, 0.12))
