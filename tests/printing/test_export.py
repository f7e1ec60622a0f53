"""The export bundle (physattack/printing/export.py): true scale on paper and in pixels, exact texels."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch
from PIL import Image

from pdfread import PT_PER_MM, read_pdf
from physattack.printing.export import (ExportError, ExportOptions, PrintArtwork, export_bundle, find_stickers,
                                        mask_bbox, read_png_dpi, read_png_rgba, texel_of_pixel, texels_from_pixels,
                                        texels_to_pixels, to_uint8)
from physattack.printing.pages import PAPERS_MM, tile_layout

SIGN_MM = 750.0           # US R1-1: 750 mm across flats


def test_the_sign_measures_750_mm_across_flats_on_a_single_page_pdf(fit_export, stop_scene):
    out, manifest = fit_export
    (page,) = read_pdf(out / "sign.pdf")
    w_mm, h_mm = page.size_mm
    assert w_mm == pytest.approx(SIGN_MM + 2 * 10, abs=0.01)          # the sign plus two 10 mm margins
    assert h_mm > SIGN_MM
    (image,) = page.images
    assert (image.width_px, image.height_px) == (512, 512)             # one image pixel per texel
    width_pt, height_pt = image.size_pt
    assert width_pt / PT_PER_MM == pytest.approx(SIGN_MM, abs=0.01)
    assert height_pt / PT_PER_MM == pytest.approx(SIGN_MM, abs=0.01)
    # Across flats = the face's extent in the image, measured in the PDF's own units.
    x0, y0, x1, y1 = mask_bbox(stop_scene.face_mask[0].numpy() > 0.5)
    assert (x1 - x0) * width_pt / image.width_px / PT_PER_MM == pytest.approx(SIGN_MM, abs=0.01)
    assert (y1 - y0) * height_pt / image.height_px / PT_PER_MM == pytest.approx(SIGN_MM, abs=0.01)
    ox, oy = image.origin_pt
    assert ox / PT_PER_MM == pytest.approx(10.0, abs=0.01)             # placed at the margin
    assert manifest["physical"]["face_size_mm"] == [SIGN_MM, SIGN_MM]


def test_tiled_a4_pages_keep_true_scale_and_cover_the_sign(default_export):
    out, manifest = default_export
    pages = read_pdf(out / "sign.pdf")
    tiles = tile_layout(SIGN_MM, SIGN_MM, "a4", 10.0, 10.0)
    assert len(pages) == len(tiles) == manifest["files"]["sign.pdf"]["pages"] > 1
    a4 = sorted(PAPERS_MM["a4"])
    for page, tile in zip(pages, tiles):
        assert sorted(page.size_mm) == pytest.approx(a4, abs=0.01)
        (image,) = page.images
        pitch_mm = image.size_pt[0] / image.width_px / PT_PER_MM    # the texel pitch: 750/512 mm
        assert pitch_mm * 512 == pytest.approx(SIGN_MM, abs=0.01)
        assert image.size_pt[1] / image.height_px / PT_PER_MM * 512 == pytest.approx(SIGN_MM, abs=0.01)
        # The window this page shows lies at the page margin, and holds what the tile says.
        assert image.width_px * pitch_mm == pytest.approx(tile.w, abs=2 * pitch_mm)
    # Tiles overlap by 10 mm and together cover the sign.
    covered = np.zeros((750, 750), bool)
    for t in tiles:
        covered[int(t.y0):int(np.ceil(t.y0 + t.h)), int(t.x0):int(np.ceil(t.x0 + t.w))] = True
    assert covered.all()
    cols = sorted({t.x0 for t in tiles})
    assert all(b - a == pytest.approx(tiles[0].w - 10.0) for a, b in zip(cols, cols[1:]))
    assert any("scale" in t or "ruler" in t for t in pages[0].texts)


def test_png_dpi_metadata_and_pixel_size_agree_with_750_mm(default_export):
    out, manifest = default_export
    assert manifest["dpi"] == 300
    for name in ("sign.png", "patch.png"):
        dpi = read_png_dpi(out / name)
        with Image.open(out / name) as im:                 # an independent reader of the pHYs chunk
            pil_dpi, (w, h) = im.info["dpi"], im.size
        assert dpi == pytest.approx((300, 300), abs=0.01) and pil_dpi == pytest.approx((300, 300), abs=0.01)
        assert w / dpi[0] * 25.4 == pytest.approx(SIGN_MM, abs=25.4 / 300)    # within a pixel
        assert h / dpi[1] * 25.4 == pytest.approx(SIGN_MM, abs=25.4 / 300)
        assert manifest["files"][name]["size_px"] == [w, h]


def test_exported_pixels_map_back_to_the_texels_exactly(fit_export, stop_scene, bars_patch):
    out, _ = fit_export                     # 50 dpi: 1476 px for 512 texels, a non-integer 2.88 px per texel
    with torch.no_grad():
        texels = to_uint8(bars_patch.apply(stop_scene.texture))
    sign = read_png_rgba(out / "sign.png")
    back = texels_from_pixels(sign, 512, 512)
    assert np.array_equal(back[..., :3], texels)
    assert np.array_equal(back[..., 3] > 0, stop_scene.face_mask[0].numpy() > 0.5)
    patch = texels_from_pixels(read_png_rgba(out / "patch.png"), 512, 512)
    on = bars_patch.mask[0].numpy() > 0.5
    assert np.array_equal(patch[..., 3] == 255, on) and np.array_equal(patch[on][:, :3], texels[on])
    # every pixel shows the texel the manifest's mapping names
    idx = texel_of_pixel(sign.shape[1], 512)
    assert np.array_equal(sign[100, :, :3], texels[texel_of_pixel(sign.shape[0], 512)[100]][idx])


@pytest.mark.parametrize("texels,pixels", [(7, 7), (7, 23), (13, 40), (50, 97), (50, 265), (31, 31 * 4)])
def test_texel_pixel_round_trip_for_any_enlargement(texels, pixels):
    rng = np.random.default_rng(texels * pixels)
    img = rng.integers(0, 256, (texels, texels + 3, 4), dtype=np.uint8)
    big = texels_to_pixels(img, pixels, pixels + 5)
    assert big.shape == (pixels, pixels + 5, 4)
    assert np.array_equal(big, img[np.ix_(texel_of_pixel(pixels, texels), texel_of_pixel(pixels + 5, texels + 3))])
    assert np.array_equal(texels_from_pixels(big, texels, texels + 3), img)
    rgb = np.ascontiguousarray(img[..., :3])                       # the 3-channel path
    assert np.array_equal(texels_from_pixels(texels_to_pixels(rgb, pixels, pixels + 5), texels, texels + 3), rgb)


def test_manifest_lists_every_file_with_its_checksum(default_export):
    out, manifest = default_export
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    for name, entry in manifest["files"].items():
        data = (out / name).read_bytes()
        assert entry["sha256"] == hashlib.sha256(data).hexdigest() and entry["bytes"] == len(data)
    assert json.loads((out / "manifest.json").read_text()) == json.loads(json.dumps(manifest))
    assert manifest["colour_model"]["format"] == "physattack-colour-model"
    assert len(manifest["palette"]) == 30 and manifest["texture_px"] == [512, 512]
    assert not list(out.parent.glob(".*")), "a temporary file or folder was left behind"


def test_one_cut_sheet_per_sticker_and_a_placement_template(default_export):
    out, manifest = default_export
    stickers = manifest["stickers"]
    assert len(stickers) == 2                       # RP2's two bars
    sheets = read_pdf(out / "stickers.pdf")
    per_sticker = [sum(f"sticker {s['number']} of 2" in t for p in sheets for t in p.texts[:1]) for s in stickers]
    assert all(n >= 1 for n in per_sticker) and sum(per_sticker) == len(sheets)
    for page in sheets:                             # cut sheets are at true scale too
        (image,) = page.images
        assert image.size_pt[0] / image.width_px / PT_PER_MM == pytest.approx(SIGN_MM / 512, abs=1e-4)
    top, bottom = sorted(stickers, key=lambda s: s["offset_mm"]["top"])
    # bars are centred left to right and symmetric top to bottom
    assert top["offset_mm"]["left"] == pytest.approx(top["offset_mm"]["right"], abs=1.5)
    assert top["offset_mm"]["top"] == pytest.approx(bottom["offset_mm"]["bottom"], abs=1.5)
    placement = read_pdf(out / "placement.pdf")
    table = " ".join(placement[-1].texts)
    assert "offsets" in table and f"{top['offset_mm']['left']:.1f}" in table
    assert len(placement) == len(tile_layout(SIGN_MM, SIGN_MM, "a4", 10, 10)) + 1


def test_stickers_are_the_mask_pieces_with_offsets_in_mm():
    mask = np.zeros((40, 50), bool)
    mask[2:6, 3:13] = True            # a bar
    mask[20:30, 40:45] = True         # a block
    mask[30:33, 45:48] = True         # touches the block only at a corner: its own sticker
    stickers = find_stickers(mask, (0, 0, 50, 40), (2.0, 3.0))
    assert [s.bbox for s in stickers] == [(3, 2, 13, 6), (40, 20, 45, 30), (45, 30, 48, 33)]
    first = stickers[0]
    assert first.size_mm == (20.0, 12.0) and first.area_mm2 == 40 * 6.0
    assert first.offset_mm == {"left": 6.0, "top": 6.0, "right": 74.0, "bottom": 102.0}


def test_an_existing_bundle_is_never_overwritten_unless_asked(tmp_path, stop_scene):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    artwork = PrintArtwork(texture=stop_scene.texture, face_mask=stop_scene.face_mask,
                           texture_size_m=stop_scene.texture_size_m)
    options = ExportOptions(dpi=20, paper="fit")
    with pytest.raises(ExportError, match="already exists"):
        export_bundle(out, artwork, options=options)
    assert (out / "mine.txt").read_text() == "keep me"
    export_bundle(out, artwork, options=options, overwrite=True)
    assert (out / "sign.png").is_file() and not (out / "mine.txt").exists()
    assert not list(tmp_path.glob(".*"))


def test_bad_export_options_say_what_to_do():
    with pytest.raises(ExportError, match="dpi"):
        ExportOptions(dpi=0)
    with pytest.raises(ExportError, match="paper"):
        ExportOptions(paper="napkin")
