"""Stickers constrained to the printer palette: soft assignment annealed to hard, through the attack
loop and the colour model, and an exported patch made only of palette colours."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from physattack.attack import AttackSetup, EOTAttack
from physattack.config import RunConfig
from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.patch import PatchError, StickerPatch, sticker_for_scene
from physattack.printing import load_colour_model, load_palette
from physattack.cli.build import export_patch
from physattack.printing.export import ExportOptions, read_png_rgba
from physattack.render import Renderer


def _keys(rgb: np.ndarray) -> np.ndarray:
    rgb = rgb.astype(np.int64)
    return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]


def test_annealing_goes_from_soft_to_hard_palette_colours():
    palette = load_palette()
    patch = StickerPatch(torch.ones(1, 4, 4), palette=palette, temperature=(1.0, 0.1), hard_from=0.5)
    assert patch.colors_final                      # a fresh patch is hard: what gets exported
    temps = []
    for progress in (0.0, 0.25, 0.49, 0.5, 1.0):
        patch.anneal(progress)
        temps.append(patch.temperature)
    assert temps[0] == 1.0 and temps[1] == pytest.approx(0.1 ** 0.5) and temps[2] > 0.1 * 0.99
    assert temps[3] == temps[4] == 0.0
    patch.anneal(0.1)
    soft = patch.colors().detach()
    assert not patch.colors_final
    on_palette = torch.cdist(soft.flatten(1).T, palette).amin(1)
    assert float(on_palette.max()) > 1e-3            # a blend of palette colours, not one of them
    patch.anneal(1.0)
    hard = patch.colors()
    assert float(torch.cdist(hard.detach().flatten(1).T, palette).amin(1).max()) < 1e-6
    hard.sum().backward()                            # straight-through: a hard forward, a soft gradient
    assert float(patch.logits.grad.abs().sum()) > 0


def test_palette_option_and_its_errors(stop_scene):
    patch = sticker_for_scene(stop_scene, shape="bars", colours="palette")
    assert patch.palette_constrained and patch.logits.shape[0] == 30
    with pytest.raises(PatchError, match="free or palette"):
        sticker_for_scene(stop_scene, shape="bars", colours="rainbow")
    with pytest.raises(PatchError, match="temperature"):
        StickerPatch(torch.ones(1, 2, 2), palette=load_palette(), temperature=(0.1, 1.0))


def test_attack_with_palette_stickers_exports_only_palette_colours(stop_scene, signnet, tmp_path):
    palette = load_palette()
    patch = sticker_for_scene(stop_scene, shape="bars", area=0.1, colours="palette", palette_options={"hard_from": 0.5})
    pipeline = ViewPipeline(Renderer(), BackgroundBank(4, seed=0), (48, 48))
    attack = EOTAttack(target="yield", steps=4, batch_size=2, lr=0.5, checkpoint_every=0, mask_search_steps=0)
    colour_model = load_colour_model()
    seen = []
    original = colour_model.print_patch

    def spy(texture, mask):
        seen.append(patch.temperature)
        return original(texture, mask)

    colour_model.print_patch = spy
    setup = AttackSetup(scene=stop_scene, patch=patch, victim=signnet, pipeline=pipeline, palette=palette,
                        sampler=ViewSampler(background_count=4, jpeg_share=0.0), colour_model=colour_model)
    result = attack.run(setup, RunConfig(seed=0, progress=False), tmp_path)
    assert seen[0] > seen[1] > 0 and seen[2:] == [0.0, 0.0]   # annealed, then hard, and printed every step
    assert result.best_step >= 3                               # only hard (final) colours can be the best
    patch.load_state_dict(result.best_state)
    assert patch.colors_final
    manifest = export_patch(tmp_path / "export", scene=stop_scene, patch=patch, palette=palette, colour_model=None,
                            options=ExportOptions(dpi=40, paper="fit"), source={})
    assert manifest["palette_constrained"] and manifest["sticker_texels_on_palette"] == 1.0
    pal = _keys((palette.numpy() * 255).round().astype(np.uint8))
    pixels = read_png_rgba(tmp_path / "export" / "patch.png")
    on = pixels[..., 3] > 0
    assert on.sum() > 1000 and np.isin(_keys(pixels[on][:, :3]), pal).all()
    for sticker in (tmp_path / "export" / "stickers").glob("*.png"):
        px = read_png_rgba(sticker)
        assert np.isin(_keys(px[px[..., 3] > 0][:, :3]), pal).all()
    # the free-colour patch of the same run is not on the palette: the check can fail
    free = sticker_for_scene(stop_scene, shape="bars", area=0.1)
    m = export_patch(tmp_path / "free", scene=stop_scene, patch=free, palette=palette, colour_model=None,
                     options=ExportOptions(dpi=20, paper="fit"), source={})
    assert m["sticker_texels_on_palette"] == 0.0
