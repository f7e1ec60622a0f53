"""Every patch is a ``Patch``: the members the attack loop calls, with their defaults, and the range
checks each patch's constructor makes."""

from __future__ import annotations

import pytest
import torch

from physattack.patch import (FramePatch, PaintPatch, Patch, PatchError, StickerPatch, bars_mask, frame_for_scene,
                              paint_for_scene, sticker_for_scene)
from physattack.printing import load_palette


def patches(scene):
    return {"sticker": sticker_for_scene(scene), "palette": sticker_for_scene(scene, colours="palette"),
            "paint": paint_for_scene(scene), "frame": frame_for_scene(scene)}


def test_every_patch_is_a_patch_with_the_loop_members(stop_scene):
    for name, patch in patches(stop_scene).items():
        assert isinstance(patch, Patch), name
        texture = patch.apply(stop_scene.texture)
        assert texture.shape == stop_scene.texture.shape and patch.colors().shape == stop_scene.texture.shape
        assert 0 < patch.area_fraction(stop_scene.face_mask) <= 1
        assert list(patch.parameters()) and set(patch.state_dict()) >= {"mask"}
        patch.anneal(0.5)
        patch.anneal(1.0)
        assert patch.colors_final, name                     # final once annealed to the end
        before = [p.detach().clone() for p in patch.parameters()]
        patch.set_mask(torch.zeros_like(patch.mask))
        assert patch.mask.sum() == 0 and all(torch.equal(a, b) for a, b in zip(before, patch.parameters()))


def test_defaults_are_those_of_a_fixed_patch(stop_scene):
    paint, frame = paint_for_scene(stop_scene), frame_for_scene(stop_scene)
    for patch in (paint, frame):
        assert patch.mask_search is None and patch.colors_final and not patch.palette_constrained
    assert sticker_for_scene(stop_scene, shape="search").mask_search["cell_px"] >= 2
    assert sticker_for_scene(stop_scene, shape="bars").mask_search is None
    assert sticker_for_scene(stop_scene, colours="palette").palette_constrained
    assert not hasattr(StickerPatch, "palette_index")


@pytest.mark.parametrize("build, key", [
    (lambda s: sticker_for_scene(s, area=0), "patch.area"),
    (lambda s: sticker_for_scene(s, area=1.2), "patch.area"),
    (lambda s: sticker_for_scene(s, cell_mm=0), "patch.cell_mm"),
    (lambda s: sticker_for_scene(s, init_color=[0.5, 1.5, 0.5]), "patch.init_color"),
    (lambda s: sticker_for_scene(s, init_color=[0.5, 0.5]), "patch.init_color"),
    (lambda s: sticker_for_scene(s, colours="palette", palette_options={"hard_from": 1.5}),
     "patch.palette_options.hard_from"),
    (lambda s: bars_mask(s.face_mask, area=-0.1), "patch.area"),
    (lambda s: PaintPatch(s.face_mask, eps=0), "patch.eps"),
    (lambda s: PaintPatch(s.face_mask, eps=float("nan")), "patch.eps"),
    (lambda s: FramePatch(s.face_mask, cell_px=0), "patch.cell_px"),
    (lambda s: FramePatch(s.face_mask, init_scale=-1.0), "patch.init_scale"),
])
def test_out_of_range_keys_are_one_sentence_naming_the_key(stop_scene, build, key):
    with pytest.raises(PatchError, match=key.replace(".", r"\.")) as err:
        build(stop_scene)
    assert "\n" not in str(err.value)


def test_a_palette_needs_two_colours():
    with pytest.raises(PatchError, match="K >= 2"):
        StickerPatch(torch.ones(1, 4, 4), palette=load_palette()[:1])


def test_printed_is_the_patch_through_the_colour_model_off_the_mask_untouched(stop_scene):
    from physattack.printing import load_colour_model

    patch, model = sticker_for_scene(stop_scene), load_colour_model()
    with torch.no_grad():
        patch.logits.uniform_(-3, 3)                         # colours the default print gamut cannot all show
    designed = patch.apply(stop_scene.texture)
    printed = patch.printed(stop_scene.texture, model)
    assert not printed.requires_grad
    assert torch.equal(patch.printed(stop_scene.texture), designed.detach())
    on = patch.mask[0] > 0
    assert torch.equal(printed[:, ~on], designed[:, ~on].detach())    # the sign's own paint is not printed
    assert (printed[:, on] - designed[:, on]).abs().max() > 0.01      # the stickers are
    assert torch.allclose(printed, model.print_patch(designed, patch.mask))
