"""``python -m physattack.atlas +scene=stop_sign``: the natural-failure atlas of a clean object.

Build the scene, victim, renderer and held-out backgrounds from ``conf/atlas.yaml`` and hand them to
``physattack.evaluate.atlas.build_atlas``; write ``atlas.json``, ``atlas.md``, ``atlas.png`` and
``atlas_bins.png`` into a new run folder.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
from omegaconf import DictConfig

from physattack.atomic import save_figure, save_json, save_rgb_png, save_text
from physattack.cli import build
from physattack.cli.attack import require_scene
from physattack.cli.door import HydraCommand
from physattack.eot import ViewPipeline
from physattack.errors import InputError
from physattack.evaluate.atlas import AtlasDesign, build_atlas, default_axes, with_axes
from physattack.evaluate.heldout_report import atlas_bins_figure, atlas_image, atlas_markdown


def run_atlas(cfg: DictConfig, out: str | Path) -> tuple[dict, str]:
    require_scene(cfg)
    out = Path(out)
    device = build.device_of(cfg.device)
    scene = build.scene(cfg, device)
    victim = build.victim(cfg.victim, device)
    pipeline = ViewPipeline(build.make(cfg.renderer), build.make(cfg.eot.eval_backgrounds),
                            (cfg.image_size, cfg.image_size))
    axes = default_axes()
    if cfg.axes is not None:
        unknown = [a for a in cfg.axes if a not in axes]
        if unknown:
            raise InputError(f"Unknown atlas axes {unknown}; choose from {sorted(axes)}.")
        axes = with_axes(axes, list(cfg.axes))
    pairs = [tuple(p) for p in cfg.pairs if all(a in axes for a in p)]
    design = AtlasDesign(per_axis=cfg.per_axis, pairs=tuple(pairs), per_pair=cfg.per_pair, bins=cfg.bins,
                         pair_bins=cfg.pair_bins, max_accuracy=cfg.max_accuracy, confidence=cfg.confidence,
                         seed=cfg.seed, batch_size=cfg.batch_size)
    atlas, samples, probs = build_atlas(scene, victim, pipeline, design, axes=axes)
    data = atlas.to_dict()
    save_json(out / "atlas.json", {**data, "victim": cfg.victim.get("_target_"), "scene": scene.name})
    text = "\n".join(atlas_markdown(data, f"# Natural-failure atlas: {scene.name} ({scene.class_name}), "
                                          f"victim {cfg.victim.get('_target_')}"))
    save_text(out / "atlas.md", text)
    img = atlas_image(scene, pipeline, atlas, samples, probs, victim.labels, max_regions=10)
    if img is not None:
        save_rgb_png(out / "atlas.png", img)
    fig = atlas_bins_figure(atlas)
    save_figure(out / "atlas_bins.png", fig)
    plt.close(fig)
    return data, text


def task(cfg: DictConfig, out: Path) -> None:
    _, text = run_atlas(cfg, out)
    print(text)
    print(f"atlas in {out} (reuse it in evaluations with evaluation.settings.atlas_path={out / 'atlas.json'})")


COMMAND = HydraCommand(
    module="physattack.atlas", config_name="atlas",
    summary="the natural-failure atlas of a clean object: the regions of view, light and camera where the "
            "victim already fails without any patch.",
    usage=("python -m physattack.atlas +scene=stop_sign",
           "python -m physattack.atlas +scene=stop_sign victim=detnet axes=[azimuth_deg,distance_m]"),
    task=task, output="run", check=require_scene)

main = COMMAND.main
