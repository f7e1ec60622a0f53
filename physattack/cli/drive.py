"""``python -m physattack.drive run_dir=<run>``: would the car still stop? A finished run's patch on
held-out dashcam drives, judged per drive (``physattack.evaluate.drive``), written beside the run's
files (``<run>/drive``, then ``drive-2``, ...).

``drive_report`` is also what every attack run ends with (``physattack.cli.attack``), on the smaller
``conf/drive/quick.yaml`` set (or the set ``+drive=<option>`` names).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from physattack.cli import build
from physattack.cli.door import HydraCommand
from physattack.cli.evaluate import check_run_dir
from physattack.errors import InputError


def camera_stage(pipeline):
    """The colour model's camera stage of a (photographed) view pipeline, or None."""
    from physattack.printing.colour import PhotographedPipeline

    return pipeline.model.photograph if isinstance(pipeline, PhotographedPipeline) else None


def drive_report(parts: build.DriveParts, *, scene, adv_texture, eval_pipeline, out_dir: str | Path, summary: dict,
                 tracker=None, progress: bool = False) -> dict:
    """Judge the clean and the attacked sign on ``parts``' drives (``physattack.evaluate.drive.report_drives``),
    through the camera stage of ``eval_pipeline`` where it has one; returns the report's summary."""
    from physattack.evaluate.drive import report_drives

    return report_drives(out_dir=out_dir, scene=scene, clean_texture=scene.texture, adv_texture=adv_texture,
                         drives=parts.drives, renderer=parts.renderer, stack=parts.stack, settings=parts.settings,
                         summary=summary, tracker=tracker, photograph=camera_stage(eval_pipeline), progress=progress)


def run_drive(cfg: DictConfig, out_dir: str | Path) -> dict:
    """Judge the run ``cfg.run_dir``'s patch on the drives of ``cfg.drive``; write into ``out_dir``."""
    if not cfg.drive.get("enabled", True):
        raise InputError("drive=none judges no drives (it only turns the report off at the end of an attack run): "
                         "choose drive=default (the held-out set) or drive=quick.")
    device = build.device_of(cfg.device)
    run = build.finished_run(cfg.run_dir, device)
    names = run.metrics.get("victim_names") or build.victim_names(run.cfg, run.victim)
    summary = {"scene": run.scene.name, "attack": run.metrics.get("attack") or (
        f"targeted -> {run.target}" if run.target else str(run.cfg.attack.get("objective", "untargeted"))),
        "run_dir": str(run.run_dir)}
    pool = build.protocol_detectors if build.is_detector(run.victim) else build.protocol_victims
    members = pool(run.cfg, dict(zip(names, getattr(run.victim, "members", [run.victim]))), device)
    parts = build.drive_parts(cfg.drive, scene=run.scene, attacked=run.victim, victim_names=names,
                              renderer=run.renderer, backgrounds=run.eval_bank, crop_px=run.image_size[0],
                              crop_frame=float(run.cfg.eot.grid.frame), device=device, members=members)
    tracker = build.make(cfg.logger, dir=str(out_dir), run_config=OmegaConf.to_container(cfg, resolve=True),
                         _recursive_=False, _convert_="all")
    try:
        return drive_report(parts, scene=run.scene, adv_texture=run.adv_texture, eval_pipeline=run.eval_pipeline,
                            out_dir=out_dir, summary=summary, tracker=tracker, progress=bool(cfg.progress))
    finally:
        tracker.finish()


def task(cfg: DictConfig, out: Path) -> None:
    from physattack.evaluate.drive import drive_headline

    print(drive_headline(run_drive(cfg, out)))


COMMAND = HydraCommand(
    module="physattack.drive", config_name="drive",
    summary="would the car still stop? A finished run's patch on held-out dashcam drives (full frames from 80 m), "
            "judged per drive through a detector or a detector -> classifier stack against the braking distance.",
    usage=("python -m physattack.drive run_dir=outputs/<date>/<time>",
           "python -m physattack.drive run_dir=<run> drive=quick",
           "python -m physattack.drive run_dir=<run> drive.drives.speeds_kmh=[50] drive.settings.k=2 "
           "drive.settings.n=3"),
    task=task, output="beside", check=check_run_dir)

main = COMMAND.main
