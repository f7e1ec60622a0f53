"""Fixtures for the printing tests: a sticker patch on the stop sign, and its export bundles."""

from __future__ import annotations

import pytest
import torch

from physattack.patch import sticker_for_scene
from physattack.printing import load_colour_model, load_palette
from physattack.cli import build
from physattack.printing.export import ExportOptions


@pytest.fixture(scope="session")
def bars_patch(stop_scene):
    """RP2's two bars with smooth random colours (so PNGs compress like a real patch)."""
    patch = sticker_for_scene(stop_scene, shape="bars", area=0.15)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        coarse = torch.randn(3, 16, 16, generator=g) * 2
        patch.logits.copy_(torch.nn.functional.interpolate(coarse[None], size=patch.logits.shape[-2:],
                                                           mode="nearest")[0])
    return patch


def sticker_export(out, scene, patch, **kw) -> dict:
    """The print bundle of a sticker patch, as every command makes it (``physattack.cli.build.export_patch``)."""
    kw.setdefault("palette", None)
    kw.setdefault("colour_model", None)
    kw.setdefault("options", None)
    return build.export_patch(out, scene=scene, patch=patch, source={}, **kw)


@pytest.fixture(scope="session")
def default_export(tmp_path_factory, stop_scene, bars_patch):
    """The bundle with the default options: 300 dpi, tiled on A4."""
    out = tmp_path_factory.mktemp("export") / "bundle"
    manifest = sticker_export(out, stop_scene, bars_patch, palette=load_palette(),
                            colour_model=load_colour_model(), options=ExportOptions())
    return out, manifest


@pytest.fixture(scope="session")
def fit_export(tmp_path_factory, stop_scene, bars_patch):
    """One page the size of the sign (paper=fit), at a low dpi for speed."""
    out = tmp_path_factory.mktemp("export_fit") / "bundle"
    manifest = sticker_export(out, stop_scene, bars_patch, palette=load_palette(),
                            options=ExportOptions(dpi=50, paper="fit"))
    return out, manifest
