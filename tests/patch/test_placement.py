"""Placement error (physattack/patch/placement.py): stickers moved, turned and recoloured one by one."""

from __future__ import annotations

import pytest
import torch

from physattack.errors import InputError
from physattack.patch import PaintPatch, StickerPatch
from physattack.patch.placement import (PlacementDraw, PlacementError, place, place_stickers, sticker_pieces,
                                        texels_per_mm)


def squares(*corners, side=31, size=512):
    """A 1×size×size mask of ``side``-texel squares with top-left corners (x, y)."""
    m = torch.zeros(1, size, size)
    for x, y in corners:
        m[:, y:y + side, x:x + side] = 1
    return m


def draw(views, stickers, shift=None, rotation=None, scale=None, gain=None, offset=None) -> PlacementDraw:
    """A draw without error, with the given entries (V×K[×2|×3] tensors) set."""
    return PlacementDraw(shift_mm=torch.zeros(views, stickers, 2) if shift is None else shift,
                         rotation_deg=torch.zeros(views, stickers) if rotation is None else rotation,
                         scale=torch.ones(views, stickers) if scale is None else scale,
                         gain=torch.ones(views, stickers, 3) if gain is None else gain,
                         offset=torch.zeros(views, stickers, 3) if offset is None else offset)


def centroid(channel: torch.Tensor) -> torch.Tensor:
    """(x, y) of an Ht×Wt weight map's mass."""
    h, w = channel.shape
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64), torch.arange(w, dtype=torch.float64), indexing="ij")
    c = channel.double()
    return torch.stack([(c * xs).sum(), (c * ys).sum()]) / c.sum()


@pytest.fixture()
def patch(stop_scene):
    p = StickerPatch(squares((150, 150), (181, 150), (300, 260), (212, 181)) * stop_scene.face_mask)
    with torch.no_grad():
        p.logits.normal_(generator=torch.Generator().manual_seed(0))
    return p


def test_zero_error_gives_the_design_texture_exactly(stop_scene, patch):
    design = patch.apply(stop_scene.texture)
    g = torch.Generator().manual_seed(1)
    assert torch.equal(place(patch, stop_scene.texture, stop_scene, PlacementError(), g), design)
    for distribution in ("uniform", "normal", "fixed"):
        out = place(patch, stop_scene.texture, stop_scene, PlacementError(distribution=distribution), g, views=3)
        assert out.shape == (3, 3, 512, 512) and torch.equal(out, design.expand_as(out))


def test_pieces_are_the_export_cut_4_connected_and_ordered():
    # two squares side by side are one sticker; touching only at a corner they are two
    pieces = sticker_pieces(squares((100, 100), (131, 100), (162, 131), (10, 300)))
    assert len(pieces) == 3
    assert pieces.boxes.tolist() == [[100, 100, 161, 130], [162, 131, 192, 161], [10, 300, 40, 330]]
    assert pieces.centroids[0].tolist() == pytest.approx([130.5, 115.0])
    assert int((pieces.labels == 1).sum()) == 2 * 31 * 31


def test_a_10_mm_shift_moves_the_centroid_by_its_texels(stop_scene):
    mask = squares((240, 240))
    tx, ty = texels_per_mm(stop_scene)
    assert tx == pytest.approx(512 / 750)
    black = torch.zeros(3, 512, 512)
    out = place_stickers(mask.expand(3, -1, -1), mask, black, torch.ones(1, 512, 512), (tx, ty),
                         draw(2, 1, shift=torch.tensor([[[10.0, 0.0]], [[-6.0, 8.0]]])))
    before = centroid(mask[0])
    assert (centroid(out[0, 0]) - before).tolist() == pytest.approx([10 * tx, 0.0], abs=1e-3)
    assert (centroid(out[1, 0]) - before).tolist() == pytest.approx([-6 * tx, 8 * ty], abs=1e-3)
    assert float(out[0, 0].sum()) == pytest.approx(float(mask.sum()), rel=1e-4)


def test_fixed_error_has_exactly_its_magnitude_and_samples_replay():
    err = PlacementError(shift_mm=5, rotation_deg=6, scale=0.02, distribution="fixed")
    d = err.sample(50, 7, torch.Generator().manual_seed(3))
    assert d.shift_mm.norm(dim=-1) == pytest.approx(torch.full((50, 7), 5.0), abs=1e-5)
    assert set(d.rotation_deg.abs().flatten().tolist()) == {6.0} and (d.rotation_deg > 0).any() and (d.rotation_deg < 0).any()
    assert set(torch.round(d.scale.flatten() * 100).tolist()) == {98.0, 102.0}
    again = err.sample(50, 7, torch.Generator().manual_seed(3))
    assert torch.equal(d.shift_mm, again.shift_mm) and torch.equal(d.rotation_deg, again.rotation_deg)
    # the same seed turns a smaller error the same way: cells of a table differ only in size
    small = PlacementError(shift_mm=2, rotation_deg=3, distribution="fixed").sample(50, 7, torch.Generator().manual_seed(3))
    assert torch.allclose(small.shift_mm * 2.5, d.shift_mm, atol=1e-5)
    for dist in ("uniform", "normal"):
        s = PlacementError(shift_mm=5, rotation_deg=6, scale=0.02, distribution=dist).sample(400, 3, torch.Generator().manual_seed(4))
        assert float(s.shift_mm.norm(dim=-1).max()) <= 5 + 1e-5 and float(s.rotation_deg.abs().max()) <= 6
        assert float((s.scale - 1).abs().max()) <= 0.02 + 1e-6 and float(s.shift_mm.norm(dim=-1).min()) < 2.5


def test_rotation_keeps_a_stickers_area_and_turns_it(stop_scene):
    mask = torch.zeros(1, 512, 512)
    mask[:, 230:260, 200:300] = 1                                           # a 100×30 bar
    black, face = torch.zeros(3, 512, 512), torch.ones(1, 512, 512)
    out = place_stickers(mask.expand(3, -1, -1), mask, black, face, texels_per_mm(stop_scene),
                         draw(3, 1, rotation=torch.tensor([[6.0], [45.0], [90.0]])))
    for v in range(3):
        assert float(out[v, 0].sum()) == pytest.approx(float(mask.sum()), rel=0.01)
        assert centroid(out[v, 0]).tolist() == pytest.approx(centroid(mask[0]).tolist(), abs=0.05)
    upright = out[2, 0] > 0.5                                                # 90°: the bar stands upright
    rows, cols = upright.any(1).nonzero().flatten(), upright.any(0).nonzero().flatten()
    assert int(rows[-1] - rows[0]) + 1 == pytest.approx(100, abs=2) and int(cols[-1] - cols[0]) + 1 == pytest.approx(30, abs=2)
    # anticlockwise as one faces the sign: the bar's right end rises (y is down the texture)
    tilted = out[0, 0]
    assert centroid(tilted[:, 250:]).tolist()[1] < centroid(tilted[:, :250]).tolist()[1]


def test_each_sticker_moves_on_its_own_and_later_ones_lie_on_top(stop_scene, patch):
    design = patch.apply(stop_scene.texture)
    pieces = sticker_pieces(patch.mask)
    assert len(pieces) == 3
    shift = torch.zeros(1, 3, 2)
    shift[0, 1] = torch.tensor([0.0, 20.0])                                  # only the second sticker moves
    out = place_stickers(design, patch.mask, stop_scene.texture, stop_scene.face_mask, texels_per_mm(stop_scene),
                         draw(1, 3, shift=shift), pieces)[0]
    for k in (1, 3):
        on = pieces.labels == k
        assert torch.equal(out[:, on], design[:, on])
    second = pieces.labels == 2
    assert not torch.allclose(out[:, second], design[:, second])
    # a sampled draw gives every sticker its own shift
    d = PlacementError(shift_mm=5).sample(1, 3, torch.Generator().manual_seed(0))
    assert len({tuple(v) for v in d.shift_mm[0].tolist()}) == 3
    # two stickers pushed onto one spot: the later one (numbered lower on the face) covers the earlier
    mask = squares((100, 100), (100, 300))
    colours = torch.zeros(3, 512, 512)
    colours[0, 100:131] = 1                                                   # sticker 1 red
    colours[2, 300:331] = 1                                                   # sticker 2 blue
    tx, ty = texels_per_mm(stop_scene)
    meet = torch.tensor([[[0.0, 100 / ty], [0.0, -100 / ty]]])
    out = place_stickers(colours, mask, torch.ones(3, 512, 512), torch.ones(1, 512, 512), (tx, ty), draw(1, 2, shift=meet))
    assert out[0, :, 215, 115].tolist() == pytest.approx([0.0, 0.0, 1.0], abs=1e-5)


def test_colour_error_and_the_face_edge(stop_scene):
    mask = squares((240, 240))
    grey = torch.full((3, 512, 512), 0.5)
    base = torch.zeros(3, 512, 512)
    tpm = texels_per_mm(stop_scene)
    out = place_stickers(grey, mask, base, torch.ones(1, 512, 512), tpm,
                         draw(1, 1, gain=torch.tensor([[[1.2, 1.0, 3.0]]]), offset=torch.tensor([[[0.0, -0.1, 0.0]]])))
    assert out[0, :, 255, 255].tolist() == pytest.approx([0.6, 0.4, 1.0])    # 0.5·1.2, 0.5−0.1, clipped at 1
    face = torch.zeros(1, 512, 512)
    face[:, :, :260] = 1                                                      # the face ends at x = 260
    out = place_stickers(grey, mask, base, face, tpm, draw(1, 1, shift=torch.tensor([[[10.0, 0.0]]])))
    assert float(out[0, 0, :, 260:].abs().sum()) == 0 and float(out[0, 0, 250, 255]) == pytest.approx(0.5)


def test_gradient_reaches_the_patch_through_the_warp(stop_scene, patch):
    err = PlacementError(shift_mm=5, rotation_deg=5, scale=0.03, colour_gain=0.05, colour_offset=0.02)
    out = place(patch, stop_scene.texture, stop_scene, err, torch.Generator().manual_seed(0), views=4)
    (out * torch.linspace(0, 1, 512)).sum().backward()
    grad = patch.logits.grad.abs().sum(0)
    assert float((grad[patch.mask[0] > 0] > 0).float().mean()) > 0.95 and float(grad[patch.mask[0] == 0].sum()) == 0
    # and it is the warp's true derivative (finite differences, double precision, a small texture)
    mask = torch.zeros(1, 24, 24)
    mask[:, 6:12, 5:14] = 1
    d = draw(2, 1, shift=torch.tensor([[[1.3, -0.7]], [[0.4, 2.2]]]), rotation=torch.tensor([[7.0], [-20.0]]),
             scale=torch.tensor([[1.05], [0.9]]), gain=torch.full((2, 1, 3), 0.8))
    texture = torch.rand(3, 24, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(0)).requires_grad_()
    base = torch.zeros(3, 24, 24, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: place_stickers(t, mask, base, torch.ones(1, 24, 24), (1.0, 1.0), d),
                                    (texture,), fast_mode=True)


@pytest.mark.parametrize("kwargs, key", [({"shift_mm": -1}, "attack.placement.shift_mm"),
                                         ({"rotation_deg": 200}, "attack.placement.rotation_deg"),
                                         ({"scale": 0.9}, "attack.placement.scale"),
                                         ({"colour_gain": float("nan")}, "attack.placement.colour_gain"),
                                         ({"colour_offset": "a"}, "attack.placement.colour_offset"),
                                         ({"distribution": "unifrom"}, "attack.placement.distribution")])
def test_bad_values_name_their_key_in_one_sentence(kwargs, key):
    with pytest.raises(InputError) as e:
        PlacementError(**kwargs)
    message = str(e.value)
    assert message.startswith(key) and message.count(". ") == 0 and message.endswith(".")
    if "distribution" in kwargs:
        assert "did you mean uniform" in message


def test_only_stickers_can_be_placed(stop_scene):
    paint = PaintPatch(stop_scene.face_mask)
    with pytest.raises(InputError, match="patch=sticker"):
        place(paint, stop_scene.texture, stop_scene, PlacementError(shift_mm=5), torch.Generator())
