"""``python -m physattack.drive run_dir=<run>``: would the car still stop? A finished run's patch on
held-out dashcam drives, judged per drive (``physattack.drive``), written beside the run's files
(``<run>/drive``, then ``drive-2``, ...).

Every attack run ends with the same report on the smaller ``conf/drive/quick.yaml`` set (or the set
``+drive=<option>`` names): ``physattack.cli.attack.drive_evaluation``.
"""

from __future__ import annotations

import re
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from physattack.cli import build
from physattack.cli.door import HydraCommand
from physattack.cli.kinds import PerceptionInputs, kind_of_run
from physattack.cli.rundir import resolved
from physattack.cli.runs import check_run_dir, open_run
from physattack.drive.store import continuing, write_command
from physattack.errors import InputError


def command_identity(cfg: DictConfig) -> dict:
    """What makes two drive commands the same report: the run, the drive settings and the footage."""
    identity = {"run_dir": str(resolved(cfg.run_dir)), "drive": OmegaConf.to_container(cfg.drive, resolve=True),
                "device": str(cfg.device)}
    if cfg.get("footage") is not None:
        identity.update(footage=str(resolved(cfg.footage)), track=str(resolved(cfg.track)) if cfg.get("track") else None,
                        footage_options=OmegaConf.to_container(cfg.footage_options, resolve=True))
    return identity


def unfinished_report(cfg: DictConfig) -> Path | None:
    """A drive report an interrupted run of this very command left unfinished, to continue in: the folder
    ``hydra.run.dir`` names when the user chose one, else the first of the run's ``drive``, ``drive-2``, ..."""
    run_dir = resolved(cfg.run_dir)
    chosen = resolved(cfg.hydra.run.dir)
    if chosen != run_dir / "drive":
        return continuing([chosen], command_identity(cfg))
    candidates = sorted((p for p in run_dir.glob("drive*") if p.is_dir() and re.fullmatch(r"drive(-\d+)?", p.name)),
                        key=lambda p: int(p.name.split("-")[1]) if "-" in p.name else 1)
    return continuing(candidates, command_identity(cfg))


def run_drive(cfg: DictConfig, out_dir: str | Path) -> dict:
    """Judge the run ``cfg.run_dir``'s patch on the drives of ``cfg.drive``; write into ``out_dir`` (continuing
    the drives an interrupted run of the same command kept there)."""
    if (cfg.get("footage") is None) != (cfg.get("track") is None):
        given, missing = ("footage", "track") if cfg.get("footage") is not None else ("track", "footage")
        raise InputError(f"{given}= needs {missing}= too: a drive over your footage takes the video (or folder of "
                         "frames) and the sign face's four corners per frame (physattack/drive/footage.py).")
    if not cfg.drive.get("enabled", True):
        raise InputError("drive=none judges no drives (it only turns the report off at the end of an attack run): "
                         "choose drive=default (the held-out set) or drive=quick.")
    device = build.device_of(cfg.device)
    folder = open_run(cfg.run_dir)
    run = folder.rebuild(device)
    kind = kind_of_run(folder.report, run.cfg.attack, run.victim)
    summary = {"scene": run.scene.name, "attack": (folder.report.summary.get("attack") if folder.report else None)
               or (f"targeted -> {run.target}" if run.target else str(run.cfg.attack.get("objective", "untargeted"))),
               "run_dir": str(run.run_dir)}
    members = kind.pool(run.cfg, dict(zip(run.victim_names, getattr(run.victim, "members", [run.victim]))), device,
                        folder.prior)
    perception = kind.perception(cfg.drive, PerceptionInputs(run.victim, run.victim_names, members,
                                                             (run.image_size[0], float(run.cfg.eot.grid.frame)),
                                                             device))
    if perception is None:
        raise InputError(f"{run.run_dir} is a {kind.name} run, which is not judged on drives.")
    footage = cfg.get("footage")
    if footage is not None:        # the user's footage: real frames, already photographed by their camera
        evaluation = build.footage_evaluation(cfg.drive, perception, scene=run.scene, footage=footage,
                                              track=cfg.track, options=cfg.footage_options)
        photograph = None
    else:
        evaluation = build.drive_evaluation(cfg.drive, perception, scene=run.scene, renderer=run.renderer,
                                            backgrounds=run.eval_bank,
                                            print_retroreflects=build.print_retroreflects(run.cfg))
        photograph = build.camera_stage(run.eval_pipeline)
    write_command(out_dir, command_identity(cfg))
    tracker = build.tracker(cfg, out_dir, OmegaConf.to_container(cfg, resolve=True))
    try:
        return evaluation.report(run.adv_texture, out_dir, summary, tracker=tracker, photograph=photograph,
                                 progress=bool(cfg.progress))
    finally:
        tracker.finish()


def task(cfg: DictConfig, out: Path) -> None:
    from physattack.drive.report import drive_headline

    print(drive_headline(run_drive(cfg, out)))


COMMAND = HydraCommand(
    module="physattack.drive", config_name="drive",
    summary="would the car still stop? A finished run's patch on held-out dashcam drives (full frames from 80 m), "
            "judged per drive through a detector or a detector -> classifier stack against the braking distance.",
    usage=("python -m physattack.drive run_dir=outputs/<date>/<time>",
           "python -m physattack.drive run_dir=<run> drive=quick",
           "python -m physattack.drive run_dir=<run> drive.drives.speeds_kmh=[50] drive.settings.k=2 "
           "drive.settings.n=3",
           "python -m physattack.drive run_dir=<run> footage=dashcam.mp4 track=corners.csv footage_options.hfov_deg=110"),
    task=task, output="beside", check=check_run_dir, continues=unfinished_report)

main = COMMAND.main
