"""``python -m physattack.atlas +scene=stop_sign``: the natural-failure atlas of a clean object.

Wiring only: build the scene, victim, renderer and held-out backgrounds from ``conf/atlas.yaml`` and
hand them to ``physattack.evaluate.atlas.build_atlas``; write ``atlas.json``, ``atlas.md``,
``atlas.png`` and ``atlas_bins.png`` into the run directory.
"""

from __future__ import annotations

from pathlib import Path

import hydra
import matplotlib.pyplot as plt
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from physattack.atomic import save_figure, save_json, save_rgb_png, save_text
from physattack.eot import ViewPipeline
from physattack.errors import InputError, report_input_errors
from physattack.evaluate.atlas import build_atlas, default_axes, with_axes
from physattack.evaluate.heldout_report import atlas_bins_figure, atlas_image, atlas_markdown


def run_atlas(cfg: DictConfig) -> dict:
    if OmegaConf.is_missing(cfg, "scene"):
        options = ", ".join(sorted(GlobalHydra.instance().config_loader().get_group_options("scene")))
        raise InputError(f"No scene chosen: add +scene=stop_sign to the command (scenes: {options}).")
    out = Path(HydraConfig.get().runtime.output_dir)
    scene = instantiate(cfg.scene).to(cfg.device)
    victim = instantiate(cfg.victim).to(cfg.device)
    pipeline = ViewPipeline(instantiate(cfg.renderer), instantiate(cfg.eot.eval_backgrounds),
                            (cfg.image_size, cfg.image_size))
    axes = default_axes()
    if cfg.axes is not None:
        unknown = [a for a in cfg.axes if a not in axes]
        if unknown:
            raise InputError(f"Unknown atlas axes {unknown}; choose from {sorted(axes)}.")
        axes = with_axes(axes, list(cfg.axes))
    pairs = [tuple(p) for p in cfg.pairs if all(a in axes for a in p)]
    atlas, samples, probs = build_atlas(scene, victim, pipeline, axes=axes, per_axis=cfg.per_axis, pairs=pairs,
                                        per_pair=cfg.per_pair, bins=cfg.bins, pair_bins=cfg.pair_bins,
                                        max_accuracy=cfg.max_accuracy, confidence=cfg.confidence, seed=cfg.seed,
                                        batch_size=cfg.batch_size)
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
    print(text)
    print(f"atlas in {out} (reuse it in evaluations with evaluation.settings.atlas_path={out / 'atlas.json'})")
    return data


@hydra.main(version_base="1.3", config_path="pkg://physattack.conf", config_name="atlas")
@report_input_errors()
def main(cfg: DictConfig) -> None:
    run_atlas(cfg)


if __name__ == "__main__":
    main()
