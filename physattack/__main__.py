"""``python -m physattack +scene=stop_sign attack=yield``: compose the configuration and wire the parts.

This file holds no logic: it builds each part from its config group with ``hydra.utils.instantiate``
and hands them to ``physattack.attack.job.run_attack``.
"""

from __future__ import annotations

import logging
from pathlib import Path

import hydra
import torch
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from physattack.atomic import save_text
from physattack.attack.job import run_attack
from physattack.config import RunConfig
from physattack.eot import ViewPipeline
from physattack.eot.frames import FrameGrid, FrameSampler
from physattack.errors import InputError, report_input_errors
from physattack.evaluate.protocol import HeldOutRun
from physattack.evaluate.detection import headline as detection_headline
from physattack.printing import load_colour_model, load_palette
from physattack.printing.colour import PhotographedPipeline
from physattack.printing.export import ExportOptions

RUN_KEYS = [f for f in RunConfig.__dataclass_fields__]
log = logging.getLogger("physattack")


def _available(group: str) -> str:
    options = GlobalHydra.instance().config_loader().get_group_options(group)
    return ", ".join(sorted(options))


def build_and_run(cfg: DictConfig) -> dict:
    if OmegaConf.is_missing(cfg, "scene"):
        raise InputError(f"No scene chosen: add +scene=stop_sign to the command (scenes: {_available('scene')}).")
    run = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), {k: cfg[k] for k in RUN_KEYS}))
    if run.device.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device={run.device} was asked for but PyTorch sees no CUDA device; use device=cpu.")
    device = torch.device(run.device)
    run_dir = HydraConfig.get().runtime.output_dir
    save_text(f"{run_dir}/config.yaml", OmegaConf.to_yaml(cfg, resolve=True))

    scene = instantiate(cfg.scene).to(device)
    victim = instantiate(cfg.victim).to(device)
    if run.channels_last:
        victim = victim.to(memory_format=torch.channels_last)
    attack = instantiate(cfg.attack)
    if attack.needs_true_label:
        victim.label_index(scene.class_name)
    attack.label(victim, scene)
    patch = instantiate(cfg.patch, scene=scene).to(device)
    renderer = instantiate(cfg.renderer)
    size = (run.image_size, run.image_size)
    bank = instantiate(cfg.eot.backgrounds)
    sampler = instantiate(cfg.eot.sampler, background_count=len(bank), _convert_="all")
    eval_bank = instantiate(cfg.eot.eval_backgrounds)
    grid = instantiate(cfg.eot.grid, background_count=len(eval_bank), _convert_="all")
    if getattr(victim, "is_detector", False):   # a detector sees the sign in context frames (eot/frames.py)
        sampler, grid, size = FrameSampler(sampler), FrameGrid(grid), (victim.input_size, victim.input_size)
    palette = load_palette(cfg.printer.palette)
    colour_model = load_colour_model(cfg.printer.model).to(device)
    export = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ExportOptions), cfg.printer.export))
    pipeline, eval_pipeline = ViewPipeline(renderer, bank, size), ViewPipeline(renderer, eval_bank, size)
    if colour_model.has_camera:
        pipeline, eval_pipeline = PhotographedPipeline(pipeline, colour_model), PhotographedPipeline(eval_pipeline, colour_model)
    heldout = None                            # the full held-out protocol (conf/evaluation), classifiers only
    if cfg.get("evaluation") is not None and cfg.evaluation.enabled and not getattr(victim, "is_detector", False):
        heldout = HeldOutRun(eval_pipeline, instantiate(cfg.evaluation.grid, background_count=len(eval_bank),
                                                        _convert_="all"),
                             instantiate(cfg.evaluation.settings, _convert_="all"), ViewPipeline(renderer, eval_bank, size))
    if run.resume is None and (Path(run_dir) / "checkpoint.pt").is_file():
        run.resume = run_dir                  # a requeued (preempted) job continues where it stopped
        log.info("resuming from %s/checkpoint.pt", run_dir)
    tracker = instantiate(cfg.logger, dir=run_dir, run_config=OmegaConf.to_container(cfg, resolve=True),
                          _recursive_=False, _convert_="all", **tracking_identity(cfg, run.resume))
    try:
        metrics = run_attack(scene=scene, victim=victim, patch=patch, attack=attack,
                             pipeline=pipeline, sampler=sampler, eval_pipeline=eval_pipeline, grid=grid,
                             palette=palette, tracker=tracker, run_dir=run_dir, run=run, colour_model=colour_model,
                             export=export, heldout=heldout)
    finally:
        tracker.finish()
    if metrics.get("attack") == "reprogram":
        acc, ctl = metrics["task_accuracy"], metrics["random_program_accuracy"]
        print(f"reprogram: held-out task accuracy {acc['rate']:.1%} (95% CI {acc['ci95'][0]:.1%}-{acc['ci95'][1]:.1%}, "
              f"{acc['n']} held-out digit views); random program {ctl['rate']:.1%}; chance {metrics['chance']:.1%}; "
              f"digits read as {', '.join(f'{i}={n}' for i, n in enumerate(metrics['label_map']))}.")
    elif getattr(victim, "is_detector", False):
        print(detection_headline(metrics))
    else:
        asr, clean = metrics["attack_success_rate"], metrics["clean_accuracy"]
        print(f"{metrics['attack']}: held-out success {asr['rate']:.1%} (95% CI {asr['ci95'][0]:.1%}-"
              f"{asr['ci95'][1]:.1%}, {asr['count']}/{asr['n']} clean-correct views); clean accuracy "
              f"{clean['rate']:.1%} of {clean['n']}; patch covers {metrics['patch_area_fraction']:.1%} of the face.")
    print(f"outputs in {run_dir}")
    return metrics


def tracking_identity(cfg: DictConfig, resume: str | None) -> dict:
    """W&B grouping: one group per sweep, one named job per run, tags from the overrides; and the
    W&B run to continue when resuming from a checkpoint."""
    out: dict = {}
    hc = HydraConfig.get()
    if hc.mode == RunMode.MULTIRUN:
        group = cfg.logger.get("group") or "sweep-" + Path(hc.sweep.dir).as_posix().strip("/").replace("/", "-")
        out.update(group=group, name=f"{group}-{hc.job.num}", tags=[str(o) for o in hc.overrides.task][:64])
    if resume:
        ckpt = Path(resume) / "checkpoint.pt" if Path(resume).is_dir() else Path(resume)
        if ckpt.is_file():
            out["resume_id"] = torch.load(ckpt, map_location="cpu", weights_only=False).get("wandb_run_id")
    if cfg.logger.get("_target_", "").endswith("NullTracker"):
        return {}
    return out


def under_submitit() -> bool:
    """A submitit job must fail as an exception to be reported, so it gets no error sentence."""
    return "submitit" in str(HydraConfig.get().launcher.get("_target_", ""))


@hydra.main(version_base="1.3", config_path="pkg://physattack.conf", config_name="config")
@report_input_errors(reraise_if=under_submitit)
def main(cfg: DictConfig) -> float | None:
    """Returns the held-out success rate (task accuracy for reprogramming), the value a Hydra sweeper
    (e.g. Optuna) optimizes."""
    metrics = build_and_run(cfg)
    for key in ("attack_success_rate", "task_accuracy"):
        if isinstance(metrics.get(key), dict):
            return metrics[key]["rate"]
    return None


if __name__ == "__main__":
    main()
