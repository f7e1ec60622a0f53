"""``python -m physattack.evaluate run_dir=<run>``: the full held-out evaluation of a finished run,
written beside the run's own files (``<run>/evaluation``, then ``evaluation-2``, ...)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from physattack.cli import build
from physattack.cli.door import HydraCommand
from physattack.errors import InputError


def check_run_dir(cfg: DictConfig) -> None:
    """``run_dir=`` is given and holds a finished run, before any folder is made inside it."""
    if OmegaConf.is_missing(cfg, "run_dir"):
        raise InputError("Give run_dir= the output folder of a finished `python -m physattack` run "
                         "(outputs/<date>/<time>).")
    build.check_finished_run(cfg.run_dir)


def evaluate_run(cfg: DictConfig, out_dir: str | Path) -> dict:
    """Evaluate the run ``cfg.run_dir`` on the held-out protocol of ``cfg.evaluation``; write into ``out_dir``."""
    from physattack.evaluate.protocol import evaluate_attack, sticker_mask_of

    run = build.finished_run(cfg.run_dir, build.device_of(cfg.device))
    merged = OmegaConf.merge(run.cfg, {"evaluation": OmegaConf.to_container(cfg.evaluation, resolve=False)})
    grid = build.protocol_grid(merged, len(run.eval_bank))
    settings = build.make(merged.evaluation.settings, _convert_="all")
    m = run.metrics
    summary = {k: m[k] for k in ("scene", "attack", "target_label", "true_label", "patch_type", "patch_area_fraction",
                                 "steps_done", "seed") if k in m}
    summary.setdefault("scene", run.scene.name)
    summary.setdefault("attack", f"targeted -> {run.target}" if run.target else "untargeted")
    summary["target_label"] = run.target
    summary["victim"] = run.cfg.victim.get("_target_", type(run.victim).__name__)
    summary["run_dir"] = str(run.run_dir)
    attacked = m.get("victim_names") or build.victim_names(run.cfg, run.victim)
    summary["victim_names"] = list(attacked)
    members = build.protocol_victims(merged, dict(zip(attacked, getattr(run.victim, "members", [run.victim]))),
                                     build.device_of(cfg.device))
    tracker = build.make(cfg.logger, dir=str(out_dir), run_config=OmegaConf.to_container(merged, resolve=True),
                         _recursive_=False, _convert_="all")
    try:
        result = evaluate_attack(scene=run.scene, victim=run.victim, clean_texture=run.scene.texture,
                                 adv_texture=run.adv_texture, pipeline=run.eval_pipeline, grid=grid, target=run.target,
                                 summary=summary, run_dir=out_dir, settings=settings,
                                 atlas_pipeline=run.plain_pipeline(), tracker=tracker,
                                 zero_grad_steps=m.get("zero_gradient_steps"), steps_done=m.get("steps_done"),
                                 batch_size=cfg.eval_batch_size, members=members,
                                 sticker_mask=sticker_mask_of(run.patch))
        return {"victim_names": list(attacked), **result}
    finally:
        tracker.finish()


def task(cfg: DictConfig, out: Path) -> None:
    from physattack.cli.attack import protocol_lines

    print(protocol_lines(evaluate_run(cfg, out)))


COMMAND = HydraCommand(
    module="physattack.evaluate", config_name="evaluate",
    summary="the full held-out evaluation of a finished attack run (protocol grid x camera effects x "
            "backgrounds, natural-failure atlas, sanity flags, report.md), written beside the run's files.",
    usage=("python -m physattack.evaluate run_dir=outputs/<date>/<time>",
           "python -m physattack.evaluate run_dir=<run> evaluation.grid.elevation_deg=[-10,0,15]"),
    task=task, output="beside", check=check_run_dir)

main = COMMAND.main
