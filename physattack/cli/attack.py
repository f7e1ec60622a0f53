"""``python -m physattack +scene=stop_sign attack=yield``: optimize a patch, judge it on held-out views,
export it for the printer.

``run_attack(cfg, run_dir)`` is the whole run from a composed config; the command and the Python
path (``physattack.cli.compose`` + ``run_attack``) both call it, so both build the same attack.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import cv2
from omegaconf import DictConfig, OmegaConf, open_dict

from physattack.atomic import load_torch, save_text
from physattack.attack import AttackSetup
from physattack.attack.reprogram import ReprogramAttack
from physattack.cli import build
from physattack.cli.allocator import keep_freed_memory
from physattack.cli.door import HydraCommand, check_constructors, compose_checked, exit_if_interrupted
from physattack.cli.rundir import claim, free_folder, guard_own_folder
from physattack.config import RunConfig
from physattack.errors import InputError


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
    """The ``config.yaml`` of the run ``resume=`` names, or None when that run has none (a bare checkpoint)."""
    from physattack.cli.rundir import checkpoint_folder

    path = checkpoint_folder(resume) / "config.yaml"
    if not path.is_file():
        return None
    try:
        return OmegaConf.load(path)
    except Exception as e:
        raise InputError(f"{path} is not a readable config ({str(e).splitlines()[0]}); resume= needs the run's "
                         "own config.yaml.") from None


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


def run_attack(cfg: DictConfig, run_dir: str | Path) -> dict:
    """Run the attack ``cfg`` describes into ``run_dir`` (a new or empty folder, or this very run's
    own unfinished one when a scheduler requeues it) and return what ``metrics.json`` holds."""
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
    parts = build.attack_parts(cfg, run, device)
    drive = drive_parts(cfg, parts, run, device)          # refused here on bad settings, before any step
    tracker = build.make(cfg.logger, dir=str(run_dir), run_config=OmegaConf.to_container(cfg, resolve=True),
                         _recursive_=False, _convert_="all", **tracking_identity(cfg, resumed))
    save_text(run_dir / "config.yaml", config_yaml)
    try:
        metrics = attack_and_report(parts, run, run_dir, tracker, drive)
        record_headline(metrics, run_dir, tracker)
    finally:
        tracker.finish()
    return metrics


def record_headline(metrics: dict, run_dir: Path, tracker) -> None:
    """The line the terminal ends with, into ``metrics.json`` (``headline``) and the tracker's summary, so
    that every copy of the run's main figure says what the patch was fitted to and what it was not."""
    from physattack.atomic import save_json

    metrics["headline"] = headline(metrics)
    path = run_dir / "metrics.json"
    written = json.loads(path.read_text()) if path.is_file() else {}
    save_json(path, {**written, "headline": metrics["headline"]})
    tracker.summary({"headline": metrics["headline"], "headline/success_rate": headline_rate(metrics)})


def headline_rate(metrics: dict) -> float | None:
    """The rate the headline quotes: the held-out task accuracy of a reprogramming run, the objective's
    success of a detector run's first detector, else ``headline_figures``' success (the held-out
    protocol's; an ensemble's lowest member's)."""
    if isinstance(metrics.get("task_accuracy"), dict):
        return metrics["task_accuracy"]["rate"]
    if "detection_rate_clean" in metrics:
        return metrics["attack_success_rate"]["rate"]
    if isinstance(metrics.get("attack_success_rate"), dict):
        return classifier_headline_figures(metrics)["success"]["rate"]
    return None


def drive_parts(cfg: DictConfig, parts: build.AttackParts, run: RunConfig, device) -> build.DriveParts | None:
    """The drive report every attack run ends with: ``cfg.drive`` when the run names one (``+drive=default``),
    else ``conf/drive/quick.yaml``; none for reprogramming, with ``+drive=none``, or when
    ``evaluation.enabled=false`` skips the held-out evaluation."""
    if isinstance(parts.attack, ReprogramAttack) or not (cfg.get("evaluation") is None or cfg.evaluation.enabled):
        return None
    node = cfg.drive if cfg.get("drive") is not None else build.drive_config("quick")
    if not node.get("enabled", True):
        return None
    grid = getattr(parts.grid, "grid", parts.grid)           # a detector's FrameGrid wraps the EvalGrid
    return build.drive_parts(node, scene=parts.scene, attacked=parts.victim, victim_names=parts.victim_names,
                             renderer=parts.eval_pipeline.renderer, backgrounds=parts.eval_pipeline.backgrounds,
                             crop_px=run.image_size, crop_frame=float(grid.frame), device=device,
                             members=parts.heldout.members if parts.heldout is not None else parts.detectors)


def report_drive(drive: build.DriveParts, parts: build.AttackParts, run: RunConfig, run_dir: Path, tracker,
                 texture, metrics: dict) -> dict:
    """Judge the patch on ``drive``'s drives into ``<run>/drive`` and add the summary to ``metrics.json``."""
    from physattack.atomic import save_json
    from physattack.cli.drive import drive_report

    summary = {"scene": parts.scene.name, "attack": metrics.get("attack"), "run_dir": str(run_dir)}
    result = drive_report(drive, scene=parts.scene, adv_texture=texture, eval_pipeline=parts.eval_pipeline,
                          out_dir=free_folder(run_dir / "drive"), summary=summary, tracker=tracker,
                          progress=run.progress)
    path = run_dir / "metrics.json"
    written = json.loads(path.read_text()) if path.is_file() else {}
    save_json(path, {**written, "drive": result})
    return result


def attack_and_report(parts: build.AttackParts, run: RunConfig, run_dir: Path, tracker,
                      drive: build.DriveParts | None = None) -> dict:
    """Optimize, evaluate on the held-out grid, write and log the outputs, export the patch; judge the
    patch on ``drive``'s drives when given."""
    from physattack.evaluate.detection import report_detection_attack
    from physattack.evaluate.grid import evaluate_on_grid
    from physattack.evaluate.report import write_run_outputs
    from physattack.evaluate.reprogram import report_reprogram

    t0 = time.time()
    scene, victim, patch, attack = parts.scene, parts.victim, parts.patch, parts.attack
    setup = AttackSetup(scene=scene, patch=patch, victim=victim, pipeline=parts.pipeline, sampler=parts.sampler,
                        palette=parts.palette, colour_model=parts.colour_model)
    result = attack.run(setup, run, run_dir, tracker)
    attack_seconds = time.time() - t0
    patch.load_state_dict(result.best_state)
    stopped = {"interrupted": result.interrupted, "interrupted_by": result.signal}

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

    if isinstance(attack, ReprogramAttack):
        metrics = report_reprogram(scene=scene, patch=patch, victim=victim, attack=attack, result=result,
                                   eval_pipeline=parts.eval_pipeline, grid=parts.grid, run_dir=run_dir,
                                   tracker=tracker, batch_size=run.eval_batch_size, colour_model=parts.colour_model,
                                   seconds=time.time() - t0)
        export({"attack": "reprogram", "label_map": metrics["label_map"]})     # which sign label means which digit
        return {**metrics, **stopped}
    true_index = victim.label_index(scene.class_name)
    target_index = attack.label(victim, scene) if attack.targeted else None
    import torch
    with torch.no_grad():
        adv_texture = patch.apply(scene.texture)
        printed = parts.colour_model.print_patch(adv_texture, patch.mask)
    if build.is_detector(victim):       # detections, not labels: physattack/evaluate/detection.py
        metrics = report_detection_attack(
            scene=scene, victim=victim, patch=patch, attack=attack, result=result, adv_texture=adv_texture,
            eval_texture=printed, eval_pipeline=parts.eval_pipeline, grid=parts.grid, tracker=tracker,
            run_dir=run_dir, run=run, true_index=true_index, target_index=target_index, started=t0,
            attack_seconds=attack_seconds, detectors=parts.detectors, victim_names=parts.victim_names)
        export({"attack": metrics["attack"]})
        if drive is not None and not result.interrupted:
            metrics["drive"] = report_drive(drive, parts, run, run_dir, tracker, printed, metrics)
        return {**metrics, **stopped}
    grid_result, clean_imgs, adv_imgs = evaluate_on_grid(
        scene, scene.texture, printed, parts.eval_pipeline, victim, parts.grid, true_index, target_index,
        batch_size=run.eval_batch_size, keep_images=run.gallery_views)
    summary = {
        "scene": scene.name, "true_label": scene.class_name, "true_index": true_index,
        "attack": f"{attack.objective} -> {attack.target}" if target_index is not None else "untargeted",
        "target_label": attack.target if target_index is not None else None, "target_index": target_index,
        "victim_names": parts.victim_names,
        "patch_type": type(patch).__name__, "patch_area_fraction": patch.area_fraction(scene.face_mask),
        "steps": attack.steps, "steps_done": result.steps_done, "best_step": result.best_step,
        **stopped, "zero_gradient_steps": result.zero_grad_steps,
        "batch_size": attack.batch_size, "seed": run.seed, "device": run.device,
        "attack_seconds": round(attack_seconds, 1), "total_seconds": round(time.time() - t0, 1),
        "protocol": "attack_success_rate counts held-out grid views whose clean render was classified "
                    "correctly (RP2); the unconditional rate counts all views",
    }
    paths = write_run_outputs(run_dir, patch=patch, adv_texture=adv_texture.cpu(), result=grid_result,
                              labels=victim.labels, clean_imgs=clean_imgs, adv_imgs=adv_imgs,
                              history=result.history, summary=summary)
    export({"attack": summary["attack"]})
    metrics = {**summary, **grid_result.metrics}
    log_classifier_run(tracker, metrics, paths, grid_result, victim.labels, scene.name)
    if parts.heldout is not None and not result.interrupted:     # the full held-out protocol (evaluate/protocol.py)
        metrics.update(parts.heldout.evaluate(scene=scene, victim=victim, adv_texture=printed, summary=summary,
                                              run_dir=run_dir, tracker=tracker, zero_grad_steps=result.zero_grad_steps,
                                              steps_done=result.steps_done, batch_size=run.eval_batch_size))
    if drive is not None and not result.interrupted:
        metrics["drive"] = report_drive(drive, parts, run, run_dir, tracker, printed, metrics)
    return metrics


def log_classifier_run(tracker, metrics: dict, paths: dict, grid_result, labels, scene_name: str) -> None:
    flat = {"eval/clean_accuracy": metrics["clean_accuracy"]["rate"],
            "eval/attack_success_rate": metrics["attack_success_rate"]["rate"],
            "eval/attack_success_rate_unconditional": metrics["attack_success_rate_unconditional"]["rate"],
            "eval/patch_area_fraction": metrics["patch_area_fraction"]}
    tracker.summary(flat)
    tracker.log(flat)
    images = {k: cv2.cvtColor(cv2.imread(str(paths[k]), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
              for k in ("views", "heatmap", "texture") if k in paths}
    tracker.log_images({f"eval/{k}": v for k, v in images.items()})
    tracker.log_table("eval/per_view", ["azimuth_deg", "distance_m", "lighting", "clean", "attacked"],
                      [[c["azimuth_deg"], c["distance_m"], c["lighting"], labels[int(a)], labels[int(b)]]
                       for c, a, b in zip(grid_result.conditions, grid_result.clean_pred, grid_result.adv_pred)])
    tracker.log_artifact(f"patch-{scene_name}", "patch", [paths["patch"], paths["texture"], paths["patch_state"]])


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


def headline(metrics: dict) -> str:
    """The run's result in one line for the terminal, honest when it is undefined."""
    from physattack.evaluate.detection import headline as detection_headline
    from physattack.evaluate.members import fitted_phrase, not_fitted_phrase

    if metrics.get("attack") == "reprogram":
        acc, ctl = metrics["task_accuracy"], metrics["random_program_accuracy"]
        return (f"reprogram: held-out task accuracy {acc['rate']:.1%} (95% CI {acc['ci95'][0]:.1%}-{acc['ci95'][1]:.1%}, "
                f"{acc['n']} held-out digit views); random program {ctl['rate']:.1%}; chance {metrics['chance']:.1%}; "
                f"digits read as {', '.join(f'{i}={n}' for i, n in enumerate(metrics['label_map']))}.")
    if "detection_rate_clean" in metrics:
        return detection_headline(metrics)
    fig = classifier_headline_figures(metrics)
    asr, clean, where = fig["success"], fig["clean_accuracy"], f"views of the {fig['source']}"
    who = fitted_phrase(fig) if fig["fitted_to"] else ""
    if asr["n"] == 0:
        return (f"{metrics['attack']}: success is undefined: no held-out view of the clean {metrics['true_label']} "
                f"was classified correctly{' by ' + fig['quoted'] if fig['fitted_to'] else ''} (clean accuracy "
                f"{clean['rate']:.1%} of {clean['n']} {where}), so the victim does not recognise this scene as it "
                f"is rendered; check the scene's texture and the victim.")
    return (f"{metrics['attack']}{', ' + who if who else ''}: held-out success {asr['rate']:.1%} (95% CI "
            f"{asr['ci95'][0]:.1%}-{asr['ci95'][1]:.1%}, {asr['count']}/{asr['n']} clean-correct {where}); clean "
            f"accuracy {clean['rate']:.1%} of {clean['n']}; {not_fitted_phrase(fig)}; patch covers "
            f"{metrics['patch_area_fraction']:.1%} of the face.")


def classifier_headline_figures(metrics: dict) -> dict:
    """``members.headline_figures`` of a classifier run's ``metrics.json``."""
    from physattack.evaluate.members import headline_figures

    return headline_figures(metrics.get("victim_names") or [], metrics.get("heldout"), metrics)


def protocol_lines(metrics: dict) -> str:
    """The held-out protocol for the terminal: its rates, the victims attacked and held out, the
    placement-error headline (when there is a table), the report."""
    from physattack.evaluate.members import members_line
    from physattack.evaluate.placement import placement_line
    from physattack.evaluate.protocol import heldout_line

    lines = [heldout_line(metrics["heldout"], metrics.get("victim_names"))]
    if metrics["heldout"].get("victims"):
        lines.append(members_line(metrics["heldout"]["victims"]))
    if metrics.get("placement"):
        lines.append(placement_line(metrics["placement"]))
    return "\n".join(lines + [f"held-out report: {metrics['report']}"])


def task(cfg: DictConfig, run_dir: Path) -> float | None:
    """The Hydra task: run, print the headline, and return the rate it quotes (``headline_rate``), the
    value a Hydra sweeper (e.g. Optuna) optimizes."""
    from physattack.evaluate.drive import drive_headline

    metrics = run_attack(cfg, run_dir)
    if "detectors" in metrics.get("heldout", {}):       # a detector attack's table (evaluate/detectors.py)
        from physattack.evaluate.detectors import detectors_line
        print(detectors_line(metrics["heldout"]["detectors"]) + f"\nheld-out report: {metrics['report']}")
    elif "heldout" in metrics:
        print(protocol_lines(metrics))
    if "drive" in metrics:
        print(drive_headline(metrics["drive"]))
    print(metrics.get("headline") or headline(metrics))     # run_attack recorded it (record_headline)
    print(f"outputs in {run_dir}")
    exit_if_interrupted(metrics)
    return headline_rate(metrics)


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
