"""``python -m physattack +scene=stop_sign attack=yield``: optimize a patch, judge it on held-out views,
export it for the printer.

``run_attack(cfg, run_dir)`` is the whole run from a composed config; the command and the Python
path (``physattack.cli.compose`` + ``run_attack``) both call it, so both build the same attack.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf, open_dict

from physattack.atomic import load_torch, save_text
from physattack.attack import AttackSetup
from physattack.cli import build
from physattack.cli.allocator import keep_freed_memory
from physattack.cli.door import HydraCommand, check_constructors, compose_checked, exit_if_interrupted
from physattack.cli.kinds import PerceptionInputs
from physattack.cli.parts import AttackParts, attack_parts
from physattack.cli.rundir import checkpoint_folder, claim, free_folder, guard_own_folder
from physattack.cli.runs import open_run
from physattack.config import RunConfig
from physattack.errors import InputError
from physattack.evaluate.attacked import EvaluationSetup, FinishedAttack
from physattack.run_report import RunReport


def compose(*overrides: str) -> DictConfig:
    """The configuration ``python -m physattack <overrides>`` runs with, checked as the command checks it.

    Example: ``cfg = compose("+scene=stop_sign", "attack=yield")``.
    """
    cfg = compose_checked("config", list(overrides))
    check_constructors(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    require_scene(cfg)
    return cfg


def require_scene(cfg: DictConfig) -> None:
    if OmegaConf.is_missing(cfg, "scene"):
        from physattack.scene.scene import bundled_scenes_dir

        options = ", ".join(sorted(p.name for p in bundled_scenes_dir().iterdir() if (p / "scene.yaml").is_file()))
        raise InputError(f"No scene chosen: add +scene=stop_sign to the command (scenes: {options}).")


#: What a resumed run must share with the run it continues (the other settings, such as the steps or the
#: learning rate, may change): config paths whose leaves are compared, in the order they are reported.
RESUME_KEYS = ("scene", "patch", "victim", "attack.objective", "attack.target", "renderer", "seed")
RESUME_FREE = {"patch.init_color"}      # only used to initialise a patch, which the checkpoint replaces


def check_command(cfg: DictConfig) -> None:
    """The attack command's first look, before any folder is made: a scene is chosen, and ``resume=``
    continues a run of this very scene, patch, victim, attack, renderer and seed."""
    require_scene(cfg)
    if cfg.get("resume"):
        check_resume(cfg, run_config_of(cfg.resume))


def run_config_of(resume) -> DictConfig | None:
    """The ``config.yaml`` of the run ``resume=`` names (read as every finished run is, ``runs.open_run``),
    or None when that run has none (a bare checkpoint)."""
    folder = checkpoint_folder(resume)
    return open_run(folder, need_patch=False).cfg if (folder / "config.yaml").is_file() else None


def check_resume(cfg: DictConfig, earlier: DictConfig | None) -> None:
    """One sentence naming the first setting of ``RESUME_KEYS`` on which ``cfg`` and the run it resumes
    (``earlier``, its config.yaml) differ: its value in that run and the value given."""
    if earlier is None:
        return
    for key in RESUME_KEYS:
        if OmegaConf.select(earlier, key, default=_ABSENT) is _ABSENT:
            continue                                    # a run written before the key existed
        mine = _leaves(OmegaConf.select(cfg, key, default=None), key)
        theirs = _leaves(OmegaConf.select(earlier, key, default=None), key)
        for leaf in [*theirs, *(k for k in mine if k not in theirs)]:
            if leaf in RESUME_FREE or mine.get(leaf, _ABSENT) == theirs.get(leaf, _ABSENT):
                continue
            raise InputError(f"resume={cfg.resume} continues a run whose {leaf} is {_shown(theirs.get(leaf, _ABSENT))}, "
                             f"but this command gives {_shown(mine.get(leaf, _ABSENT))}; a resumed run must keep the "
                             f"run's {key} (give {leaf}={_shown(theirs.get(leaf, _ABSENT))} or start a new run).")


_ABSENT = object()


def _leaves(node, prefix: str) -> dict:
    """``{dotted key: value}`` of every leaf under ``node`` (resolved where it can be)."""
    if isinstance(node, DictConfig):
        try:
            node = OmegaConf.to_container(node, resolve=True)
        except Exception:
            node = OmegaConf.to_container(node, resolve=False)
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            out.update(_leaves(v, f"{prefix}.{k}"))
        return out
    return {prefix: list(node) if isinstance(node, (list, tuple)) or type(node).__name__ == "ListConfig" else node}


def _shown(value) -> str:
    if value is _ABSENT:
        return "not set"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "[" + ",".join(_shown(v) for v in value) + "]"
    return str(value)


def run_attack(cfg: DictConfig, run_dir: str | Path) -> RunReport:
    """Run the attack ``cfg`` describes into ``run_dir`` (a new or empty folder, or this very run's
    own unfinished one when a scheduler requeues it); write and return its run report."""
    check_command(cfg)
    run = build.run_config(cfg)
    if run.keep_freed_memory:
        keep_freed_memory()
    device = build.device_of(run.device)
    run_dir = Path(run_dir)
    config_yaml = OmegaConf.to_yaml(cfg, resolve=True)
    if guard_own_folder(run_dir, config_yaml):
        run.resume = run.resume or str(run_dir)   # a requeued (pre-empted) job continues where it stopped
    elif not claim(run_dir):
        raise InputError(f"{run_dir} was just taken by another run started at the same time, and two runs never "
                         "share a folder: choose a new folder.")
    resumed = load_torch(checkpoint_file(run.resume), "checkpoint") if run.resume else None
    parts = attack_parts(cfg, run, device)
    drive = drive_evaluation(cfg, parts, run, device)       # refused here on bad settings, before any step
    validation = restart_validation(cfg, parts, run, device)
    tracker = build.tracker(cfg, run_dir, OmegaConf.to_container(cfg, resolve=True), **tracking_identity(cfg, resumed))
    save_text(run_dir / "config.yaml", config_yaml)
    try:
        report = attack_and_report(parts, run, run_dir, tracker, drive, validation)
        report.headline = parts.kind.headline(report)
        head = {"headline": report.headline, "headline/success_rate": parts.kind.headline_rate(report)}
        if report.drive is not None and report.drive.get("attack_success_rate") is not None:
            head["headline/drive_success_rate"] = report.drive["attack_success_rate"]["rate"]
        tracker.summary(head)
        report.write(run_dir)
    finally:
        tracker.finish()
    return report


def drive_evaluation(cfg: DictConfig, parts: AttackParts, run: RunConfig, device):
    """The drive report every attack run ends with: ``cfg.drive`` when the run names one (``+drive=default``),
    else ``conf/drive/quick.yaml``; none when the kind has no drives (reprogramming), with ``+drive=none``,
    or when ``evaluation.enabled=false`` skips the held-out evaluation."""
    if not (cfg.get("evaluation") is None or cfg.evaluation.enabled):
        return None
    node = cfg.drive if cfg.get("drive") is not None else build.drive_config("quick")
    if not node.get("enabled", True):
        return None
    perception = parts.kind.perception(node, PerceptionInputs(parts.victim, parts.victim_names, parts.members,
                                                              (run.image_size, float(cfg.eot.grid.frame)), device))
    if perception is None:
        return None
    return build.drive_evaluation(node, perception, scene=parts.scene, renderer=parts.eval_pipeline.renderer,
                                  backgrounds=parts.eval_pipeline.backgrounds,
                                  print_retroreflects=build.print_retroreflects(cfg))


def restart_validation(cfg: DictConfig, parts: AttackParts, run: RunConfig, device, own: bool = False):
    """The red team's own drives that compare a fresh run's starts (``attack.restart_judge.by=drives``):
    ``conf/drive/default.yaml``'s set with ``attack.restart_judge.drives`` over it, rendered over the *training*
    backgrounds and read by the stack with the attacked members alone on its panel (nothing held out is asked);
    ``printed texture -> {member: share of drives run}``. None when not asked for, or on resume (chosen already).
    ``own``: also read the stack's own verdict (the members' mean), which the shares do not need (benchmarks)."""
    from physattack.drive.build import members_judge

    attack = parts.attack
    judge = getattr(attack, "restart_judge", None)
    if getattr(attack, "restarts", 1) == 1 or judge is None or judge.by != "drives" or run.resume:
        return None
    node = build.drive_config("default")
    unknown = sorted(set(judge.drives) - set(node.drives))
    if unknown:
        raise InputError(f"attack.restart_judge.drives.{unknown[0]} is not a key of the drive set; give keys of "
                         f"conf/drive/default.yaml's drives ({', '.join(k for k in node.drives if k != '_target_')}).")
    node = OmegaConf.merge(node, {"drives": judge.drives})
    attacked = dict(zip(parts.victim_names, getattr(parts.victim, "members", None) or [parts.victim]))
    members = build.protocol_members({}, attacked, device)
    perception = parts.kind.perception(node, PerceptionInputs(parts.victim, parts.victim_names, members,
                                                              (run.image_size, float(cfg.eot.grid.frame)), device))
    if perception is None:
        raise InputError(f"attack.restart_judge.by=drives compares starts on drives, and a {parts.kind.name} run has "
                         "none: set attack.restart_judge.by=running.")
    evaluation = build.drive_evaluation(node, perception, scene=parts.scene, renderer=parts.pipeline.renderer,
                                        backgrounds=parts.pipeline.backgrounds,
                                        print_retroreflects=build.print_retroreflects(cfg))
    return members_judge(evaluation, parts.scene.texture, photograph=build.camera_stage(parts.pipeline), own=own)


def attack_and_report(parts: AttackParts, run: RunConfig, run_dir: Path, tracker, drive=None,
                      validation=None) -> RunReport:
    """Optimize, then let the run's kind evaluate, report and export the patch; judge it on ``drive``'s
    drives (a ``physattack.drive.build.DriveEvaluation``) when given and the attack was not interrupted.
    ``validation`` (``restart_validation``) compares the starts of a restarted run."""
    t0 = time.time()
    scene, victim, patch = parts.scene, parts.victim, parts.patch
    setup = AttackSetup(scene=scene, patch=patch, victim=victim, pipeline=parts.pipeline, sampler=parts.sampler,
                        palette=parts.palette, colour_model=parts.colour_model,
                        judge=parts.kind.judge(parts, run),
                        victim_name="+".join(parts.victim_names), placed=parts.init is not None,
                        guide=parts.guide, seen=parts.seen, validation=validation)
    result = parts.attack.run(setup, run, run_dir, tracker)
    attack_seconds = time.time() - t0
    patch.load_state_dict(result.best_state)
    with torch.no_grad():
        adv_texture = patch.apply(scene.texture)
        printed = parts.colour_model.print_patch(adv_texture, patch.mask)    # the designed texture is kept too
    done = FinishedAttack(scene, victim, patch, parts.attack, result, adv_texture, printed, parts.victim_names,
                          (t0, attack_seconds))

    def export(source: dict) -> None:
        from physattack.printing.export import ExportError

        out = free_folder(run_dir / "export")
        try:
            build.export_patch(out, scene=scene, patch=patch, palette=parts.palette, colour_model=parts.colour_model,
                               options=parts.export, source={"run_dir": str(run_dir), "best_step": result.best_step,
                                                             **source})
        except ExportError as e:          # the patch is saved: say why there is no print bundle, and go on
            out.rmdir()
            print(f"no print bundle: {e} The patch is saved; export it with python -m physattack.export "
                  f"run_dir={run_dir} and other paper options.", file=sys.stderr)

    evaluation = EvaluationSetup(parts.eval_pipeline, parts.grid, run_dir, tracker, run, parts.protocol, export,
                                 parts.colour_model)
    if parts.init is not None:
        done.init = parts.init[1].record(parts.init[0])
    report = parts.kind.report(done, evaluation)
    report.summary.update(done.stopped())
    if done.init is not None:
        report.summary.setdefault("init", done.init)
    if drive is not None and not result.interrupted:
        summary = {"scene": scene.name, "attack": report.summary.get("attack"), "run_dir": str(run_dir)}
        report.drive = drive.report(printed, free_folder(run_dir / "drive"), summary, tracker=tracker,
                                    photograph=build.camera_stage(parts.eval_pipeline), progress=run.progress)
    if parts.area is not None and not result.interrupted:
        report.area = parts.kind.frontier(done, evaluation, drive, parts.area, run.progress)
    return report


def checkpoint_file(resume: str | Path) -> Path:
    path = Path(resume)
    return path / "checkpoint.pt" if path.is_dir() else path


def tracking_identity(cfg: DictConfig, resumed: dict | None) -> dict:
    """W&B grouping: one group per sweep, one named job per run, tags from the overrides; and the
    W&B run to continue when resuming from a checkpoint (``resumed``, its contents)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if str(cfg.logger.get("_target_", "")).endswith("NullTracker"):
        return {}
    out: dict = {}
    if HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        hc = HydraConfig.get()
        group = cfg.logger.get("group") or "sweep-" + Path(hc.sweep.dir).as_posix().strip("/").replace("/", "-")
        out.update(group=group, name=f"{group}-{hc.job.num}", tags=[str(o) for o in hc.overrides.task][:64])
    if isinstance(resumed, dict) and resumed.get("wandb_run_id"):
        out["resume_id"] = resumed["wandb_run_id"]
    return out


def headline(report: RunReport) -> str:
    """The run's result in one line for the terminal (what its kind quotes), honest when it is undefined."""
    from physattack.cli.kinds import named

    return report.headline or named(report.kind).headline(report)


def task(cfg: DictConfig, run_dir: Path) -> float | None:
    """The Hydra task: run, print what the run's kind prints and the headline, and return the rate the
    headline quotes, the value a Hydra sweeper (e.g. Optuna) optimizes."""
    from physattack.cli.kinds import named
    from physattack.drive.report import drive_headline

    report = run_attack(cfg, run_dir)
    kind = named(report.kind)
    for line in kind.console(report):
        print(line)
    if report.drive is not None:
        print(drive_headline(report.drive))
    print(report.headline)
    print(f"outputs in {run_dir}")
    exit_if_interrupted(report.to_json())
    return kind.headline_rate(report)


COMMAND = HydraCommand(
    module="physattack", config_name="config",
    summary="optimize a printable sticker or paint patch on a 3D object so that a vision model misreads it "
            "over sampled views and light; judge it on held-out views and export it for the printer.",
    usage=("python -m physattack +scene=stop_sign attack=yield",
           "python -m physattack +scene=stop_sign attack=hide victim=detnet",
           "python -m physattack +scene=stop_sign resume=outputs/<date>/<time>",
           "python -m physattack --multirun +scene=stop_sign patch.area=0.05,0.10 seed=0,1"),
    task=task, output="run", check=check_command)

main = COMMAND.main
