"""``python -m physattack.export run_dir=<run>``: the bundle rebuilt from a run's config.yaml and patch.pt."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from omegaconf import OmegaConf

from physattack.cli.export import main as export_main
from physattack.printing.export import read_png_dpi, read_png_rgba, texels_from_pixels, to_uint8


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, stop_scene):
    """A run directory as an attack leaves it: config.yaml (resolved) and patch.pt of palette stickers."""
    run = tmp_path_factory.mktemp("run")
    with initialize_config_module(config_module="physattack.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=["+scene=stop_sign", "patch.shape=bars",
                                                       "patch.colours=palette", "printer.export.dpi=40"])
    (run / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    patch = instantiate(cfg.patch, scene=stop_scene)
    with torch.no_grad():
        patch.logits.normal_(0, 3, generator=torch.Generator().manual_seed(0))
    torch.save({"patch": patch.state_dict()}, run / "patch.pt")
    with torch.no_grad():
        texels = to_uint8(patch.apply(stop_scene.texture))
    return run, texels


def test_export_rebuilds_the_runs_patch_and_never_clobbers(run_dir, capsys):
    run, texels = run_dir
    assert export_main([f"run_dir={run}", "paper=fit"]) == 0
    assert "750.0 x 750.0 mm at 40 dpi" in capsys.readouterr().out            # the run's own dpi
    assert export_main([f"run_dir={run}", "dpi=30", "paper=letter"]) == 0
    first, second = json.loads((run / "export" / "manifest.json").read_text()), \
        json.loads((run / "export-2" / "manifest.json").read_text())
    assert first["dpi"] == 40 and second["dpi"] == 30 and second["options"]["paper"] == "letter"
    assert read_png_dpi(run / "export-2" / "sign.png") == pytest.approx((30, 30), abs=0.01)
    back = texels_from_pixels(read_png_rgba(run / "export" / "sign.png"), 512, 512)
    assert np.array_equal(back[..., :3], texels)                               # the run's patch, exactly
    assert first["palette_constrained"] and first["sticker_texels_on_palette"] == 1.0
    assert first["source"]["run_dir"] == str(run) and len(first["stickers"]) == 2
    assert export_main([f"run_dir={run}", f"out={run / 'export'}"]) == 2
    assert "already" in capsys.readouterr().err


def test_export_errors_are_one_sentence(run_dir, tmp_path, capsys):
    run, _ = run_dir
    assert export_main([f"run_dir={tmp_path}"]) == 2
    assert "has no config.yaml" in capsys.readouterr().err
    assert export_main([f"run_dir={run}", "dpy=300"]) == 2
    assert "dpy" in capsys.readouterr().err
    assert export_main([f"run_dir={run}", "paper=napkin"]) == 2
    assert "napkin" in capsys.readouterr().err
    assert export_main([]) == 2

