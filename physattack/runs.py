"""Rebuild a finished run's parts from its ``config.yaml`` and ``patch.pt``: the wiring the
``python -m physattack.evaluate`` and ``python -m physattack.transfer`` entry points share.

Entry-point level: it uses Hydra's ``instantiate`` on the run's resolved configuration, so that the
evaluated scene, victim, patch, renderer and held-out backgrounds are exactly the run's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from physattack.eot import ViewPipeline
from physattack.errors import InputError


@dataclass
class FinishedRun:
    """A run's configuration and rebuilt parts, the attacked texture (as printed, when the run printed it)."""

    run_dir: Path
    cfg: DictConfig
    metrics: dict
    scene: object
    victim: object
    patch: object
    renderer: object
    eval_bank: object
    image_size: tuple[int, int]
    adv_texture: torch.Tensor
    eval_pipeline: object
    target: str | None

    def plain_pipeline(self) -> ViewPipeline:
        return ViewPipeline(self.renderer, self.eval_bank, self.image_size)


def load_run(run_dir: str | Path, device: str = "cpu", victim_cfg: DictConfig | dict | None = None) -> FinishedRun:
    """Rebuild the run in ``run_dir`` (a folder with ``config.yaml`` and ``patch.pt``)."""
    run_dir = Path(run_dir)
    for name in ("config.yaml", "patch.pt"):
        if not (run_dir / name).is_file():
            raise InputError(f"{run_dir} has no {name}; give run_dir= the output folder of a finished "
                             "`python -m physattack` run.")
    cfg = OmegaConf.load(run_dir / "config.yaml")
    metrics = {}
    if (run_dir / "metrics.json").is_file():
        import json
        metrics = json.loads((run_dir / "metrics.json").read_text())
    scene = instantiate(cfg.scene).to(device)
    victim = instantiate(victim_cfg if victim_cfg is not None else cfg.victim).to(device)
    patch = instantiate(cfg.patch, scene=scene).to(device)
    state = torch.load(run_dir / "patch.pt", map_location=device, weights_only=False)
    patch.load_state_dict(state["patch"] if "patch" in state else state)
    renderer = instantiate(cfg.renderer)
    eval_bank = instantiate(cfg.eot.eval_backgrounds)
    size = (int(cfg.image_size), int(cfg.image_size))
    pipeline = ViewPipeline(renderer, eval_bank, size)
    with torch.no_grad():
        adv = patch.apply(scene.texture)
    if "model" in cfg.get("printer", {}):            # the run printed its patch: evaluate the print
        from physattack.printing import load_colour_model
        from physattack.printing.colour import PhotographedPipeline
        colour_model = load_colour_model(cfg.printer.model).to(device)
        with torch.no_grad():
            adv = colour_model.print_patch(adv, patch.mask)
        if colour_model.has_camera:
            pipeline = PhotographedPipeline(pipeline, colour_model)
    targeted = cfg.attack.get("objective", "targeted") in ("targeted", "mislabel")
    return FinishedRun(run_dir, cfg, metrics, scene, victim, patch, renderer, eval_bank, size, adv.detach(), pipeline,
                       cfg.attack.get("target") if targeted else None)
