"""One builder: a composed configuration -> the built parts, for every command.

The attack run, ``evaluate``, ``export``, ``transfer``, ``atlas``, ``calibrate`` and the photo
evaluation all build their scene, victim, patch, renderer, pipelines, grids and printer from here, so
that a part is built the same way wherever it is used. Parts are made with ``hydra.utils.instantiate``
from their config group; what they raise (an ``InputError``) is unwrapped so the door prints it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from physattack.atomic import load_torch
from physattack.attack.objectives import OBJECTIVES
from physattack.config import RunConfig
from physattack.eot import ViewPipeline
from physattack.errors import InputError, input_error


def make(node, **kwargs):
    """``instantiate(node, **kwargs)``, with a constructor's InputError raised as itself."""
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    try:
        return instantiate(node, **kwargs)
    except InstantiationException as exc:
        err = input_error(exc)
        if err is None:
            raise
        inner = re.search(r"full_key: (\S+)", str(exc))       # a nested part (an ensemble member) that failed
        if inner and inner.group(1) not in (_node_key(node), "") and not str(err).startswith(inner.group(1)):
            raise type(err)(f"{inner.group(1)}: {err}") from None
        raise err from None


def _node_key(node) -> str:
    """The dotted key of a config node inside its composed config (``victim``), or an empty string."""
    try:
        return node._get_full_key(None) or ""
    except Exception:
        return ""


def run_config(cfg: DictConfig) -> RunConfig:
    """The run-level scalars of ``conf/config.yaml``, typed (a wrong type or range fails here)."""
    keys = [k for k in RunConfig.__dataclass_fields__ if k in cfg]
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(RunConfig), {k: cfg[k] for k in keys}))
    except OmegaConfBaseException as e:
        raise InputError(f"{e.full_key if getattr(e, 'full_key', None) else 'a run setting'}: "
                         f"{str(e).splitlines()[0]}.") from None
    except Exception as exc:
        err = input_error(exc)
        if err is None:
            raise
        raise err from None


def device_of(name: str) -> torch.device:
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise InputError(f"device={name} was asked for but PyTorch sees no CUDA device; use device=cpu.")
    return torch.device(name)


def is_detector(victim) -> bool:
    return bool(getattr(victim, "is_detector", False))


def scene(cfg: DictConfig, device) -> object:
    return make(cfg.scene).to(device)


def victim(node, device, channels_last: bool = False):
    built = make(node).to(device)
    return built.to(memory_format=torch.channels_last) if channels_last else built


def printer(cfg: DictConfig, device):
    """The printer's palette (K×3) and colour model of ``cfg.printer`` (defaults when absent)."""
    from physattack.printing import load_colour_model, load_palette

    node = cfg.get("printer") or {}
    return load_palette(node.get("palette")), load_colour_model(node.get("model")).to(device)


def export_options(cfg: DictConfig, **override):
    from physattack.printing.export import ExportOptions

    node = (cfg.get("printer") or {}).get("export") or {}
    options = {**OmegaConf.to_container(node, resolve=True), **{k: v for k, v in override.items() if v is not None}}
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ExportOptions), options))
    except OmegaConfBaseException as e:
        raise InputError(f"printer.export: {str(e).splitlines()[0]}.") from None


def export_patch(out, *, scene, patch, palette, colour_model, options, source: dict, overwrite: bool = False) -> dict:
    """The print bundle of ``patch`` on ``scene`` (``physattack.printing.export.export_patch``)."""
    from physattack.printing.export import PrintColours
    from physattack.printing.export import export_patch as export

    with torch.no_grad():
        texture = patch.apply(scene.texture)
    return export(out, scene=scene, texture=texture, sticker_mask=patch.mask if patch.cut_as_stickers else None,
                  colours=PrintColours(palette, patch.palette_constrained, colour_model), options=options,
                  source={"patch_type": type(patch).__name__, **source}, overwrite=overwrite)


def photographed(pipeline, colour_model):
    """The pipeline as the camera sees the print, where the colour model has a camera part."""
    from physattack.printing.colour import PhotographedPipeline

    return PhotographedPipeline(pipeline, colour_model) if colour_model.has_camera else pipeline


def protocol_grid(cfg: DictConfig, background_count: int):
    """The held-out protocol's grid: the run's ``eot.grid`` with ``evaluation.grid``'s additions
    (elevations, camera-effect presets, backgrounds per view). One grid configuration, not a copy."""
    node = OmegaConf.merge(OmegaConf.to_container(cfg.eot.grid, resolve=True),
                           OmegaConf.to_container(cfg.evaluation.grid, resolve=True))
    return make(node, background_count=background_count, _convert_="all")


def victim_names(cfg: DictConfig, built) -> list[str]:
    """The names the attacked victim(s) go by: an ensemble's member names, else the ``victim=`` option
    chosen (or, outside Hydra, the victim config's ``name`` or its constructor's name)."""
    from hydra.core.hydra_config import HydraConfig

    names = getattr(built, "names", None)
    if names:
        return list(names)
    if HydraConfig.initialized() and HydraConfig.get().runtime.choices.get("victim"):
        return [str(HydraConfig.get().runtime.choices["victim"])]
    return [str(cfg.victim.get("name") or str(cfg.victim.get("_target_", "victim")).rsplit(".", 1)[-1])]


def same_model(a, b) -> bool:
    """Whether two victims are one model: the same class with equal weights."""
    if type(a) is not type(b):
        return False
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(sa[k].shape == sb[k].shape and torch.equal(sa[k], sb[k]) for k in sa)


def protocol_victims(cfg: DictConfig, attacked: dict[str, object], device) -> dict:
    """The victims the held-out protocol scores: ``attacked`` (name -> the victim the attack used) and
    every victim of ``evaluation.victims`` the attack did not use, built here and tagged held out.

    A victim of the pool is matched to an attacked one by name or by being the same model (equal
    weights), so an attacked model is never reported as held out under another name."""
    from physattack.evaluate.members import tag_members

    pool = (cfg.get("evaluation") or {}).get("victims") or {}
    attacked, held_out = dict(attacked), {}
    for name, node in pool.items():
        name = str(name)
        if name in attacked:
            continue
        built = victim(node, device)
        twin = next((a for a, v in attacked.items() if same_model(built, v)), None)
        if twin is None:
            held_out[name] = built
        elif len(attacked) == 1 and twin not in pool:           # the attacked model under its pool name
            attacked = {name: attacked[twin]}
    families = (cfg.get("evaluation") or {}).get("families") or {}
    return tag_members(attacked=attacked, held_out=held_out, families=dict(families))


def protocol_detectors(cfg: DictConfig, attacked: dict[str, object], device) -> dict:
    """The detectors a detector attack is scored on afterwards (``physattack.evaluate.detectors``):
    ``attacked`` (name -> the detector the attack used, each member of an ensemble) and every detector
    of ``evaluation.detectors`` the attack did not use, built here (before the attack, never called by
    it) and tagged held out; matched to an attacked one by name or equal weights, as ``protocol_victims``."""
    from physattack.evaluate.members import tag_members

    pool = (cfg.get("evaluation") or {}).get("detectors") or {}
    attacked, held_out = dict(attacked), {}
    for name, node in pool.items():
        name = str(name)
        if name in attacked:
            continue
        built = victim(node, device)
        twin = next((a for a, v in attacked.items() if same_model(built, v)), None)
        if twin is None:
            held_out[name] = built
        elif len(attacked) == 1 and twin not in pool:           # the attacked model under its pool name
            attacked = {name: attacked[twin]}
    return tag_members(attacked=attacked, held_out=held_out)


@dataclass
class AttackParts:
    """Everything one attack run is made of."""

    scene: object
    victim: object
    attack: object
    patch: object
    pipeline: object          # what the optimizer renders through (training backgrounds, printed patch)
    sampler: object
    eval_pipeline: object     # held-out backgrounds
    grid: object
    palette: torch.Tensor
    colour_model: object
    export: object
    heldout: object | None    # physattack.evaluate.protocol.HeldOutRun, classifiers only
    victim_names: list[str]   # what the attacked victim(s) are called in reports
    detectors: dict | None = None     # detector attacks: {name: Member}, attacked and held out (protocol_detectors)


def attack_parts(cfg: DictConfig, run: RunConfig, device) -> AttackParts:
    """Build the parts of ``python -m physattack`` from its composed config."""
    from physattack.eot.frames import FrameGrid, FrameSampler
    from physattack.evaluate.protocol import HeldOutRun

    built_scene = scene(cfg, device)
    built_victim = victim(cfg.victim, device, run.channels_last)
    attack = make(cfg.attack)
    if attack.needs_true_label:
        built_victim.label_index(built_scene.class_name)
    attack.label(built_victim, built_scene)
    if getattr(built_victim, "members", None) is not None:
        attack.members_of(built_victim, built_scene)        # refused here, before any folder or step
    patch = make(cfg.patch, scene=built_scene).to(device)
    attack.check_patch(patch)                               # e.g. placement error needs stickers
    renderer = make(cfg.renderer)
    size = (run.image_size, run.image_size)
    bank, eval_bank = make(cfg.eot.backgrounds), make(cfg.eot.eval_backgrounds)
    sampler = make(cfg.eot.sampler, background_count=len(bank), _convert_="all")
    grid = make(cfg.eot.grid, background_count=len(eval_bank), _convert_="all")
    if is_detector(built_victim):        # a detector sees the sign in context frames (eot/frames.py)
        sampler, grid = FrameSampler(sampler), FrameGrid(grid)
        size = (built_victim.input_size, built_victim.input_size)
    palette, colour_model = printer(cfg, device)
    pipeline = photographed(ViewPipeline(renderer, bank, size), colour_model)
    eval_pipeline = photographed(ViewPipeline(renderer, eval_bank, size), colour_model)
    names = victim_names(cfg, built_victim)
    heldout = None
    if cfg.get("evaluation") is not None and cfg.evaluation.enabled and not is_detector(built_victim):
        attacked = dict(zip(names, getattr(built_victim, "members", [built_victim])))
        members = protocol_victims(cfg, attacked, device)
        names = [n for n, m in members.items() if m.role == "attacked"]
        heldout = HeldOutRun(eval_pipeline, protocol_grid(cfg, len(eval_bank)),
                             make(cfg.evaluation.settings, _convert_="all"), ViewPipeline(renderer, eval_bank, size),
                             members=members, patch=patch)
    detectors = None
    if cfg.get("evaluation") is not None and cfg.evaluation.enabled and is_detector(built_victim):
        detectors = protocol_detectors(cfg, dict(zip(names, getattr(built_victim, "members", [built_victim]))),
                                       device)
        names = [n for n, m in detectors.items() if m.role == "attacked"]
    return AttackParts(built_scene, built_victim, attack, patch, pipeline, sampler, eval_pipeline, grid, palette,
                       colour_model, export_options(cfg), heldout, names, detectors)


# -- finished runs -----------------------------------------------------------------------------------

RUN_FILES = ("config.yaml", "patch.pt")


def check_finished_run(run_dir: str | Path) -> Path:
    """``run_dir`` holds a finished (or interrupted) attack run: its ``config.yaml`` and ``patch.pt``."""
    run_dir = Path(str(run_dir)).expanduser()
    for name in RUN_FILES:
        if not (run_dir / name).is_file():
            raise InputError(f"{run_dir} has no {name}; give run_dir= the output folder of a finished "
                             "`python -m physattack` run (outputs/<date>/<time>).")
    return run_dir


@dataclass
class FinishedRun:
    """A run's configuration and rebuilt parts, and its attacked texture (as printed, when the run printed it)."""

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
    palette: torch.Tensor
    colour_model: object

    def plain_pipeline(self) -> ViewPipeline:
        return ViewPipeline(self.renderer, self.eval_bank, self.image_size)


def load_patch(patch, path: Path, device="cpu") -> None:
    """Load ``patch.pt`` (data only) into ``patch``; one sentence when it does not fit."""
    state = load_torch(path, "patch file", map_location=device)
    try:
        patch.load_state_dict(state["patch"] if isinstance(state, dict) and "patch" in state else state)
    except (RuntimeError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{path} does not fit the patch its config.yaml builds; was the run folder edited? "
                         f"({str(e).strip().splitlines()[0]})") from None


def run_config_file(run_dir: Path) -> DictConfig:
    try:
        return OmegaConf.load(run_dir / "config.yaml")
    except Exception as e:
        raise InputError(f"{run_dir / 'config.yaml'} is not a readable config ({str(e).splitlines()[0]}).") from None


def run_patch(run_dir: str | Path, device="cpu"):
    """A finished run's config, scene and patch (its ``patch.pt`` loaded as data only)."""
    run_dir = check_finished_run(run_dir)
    cfg = run_config_file(run_dir)
    built_scene = scene(cfg, device)
    patch = make(cfg.patch, scene=built_scene).to(device)
    load_patch(patch, run_dir / "patch.pt", device)
    return cfg, built_scene, patch


def finished_run(run_dir: str | Path, device="cpu", victim_node=None) -> FinishedRun:
    """Rebuild the run in ``run_dir`` from its own ``config.yaml`` and ``patch.pt``."""
    run_dir = check_finished_run(run_dir)
    cfg, built_scene, patch = run_patch(run_dir, device)
    metrics = {}
    if (run_dir / "metrics.json").is_file():
        try:
            metrics = json.loads((run_dir / "metrics.json").read_text())
        except json.JSONDecodeError:
            raise InputError(f"{run_dir / 'metrics.json'} is not valid JSON; was the run folder edited?") from None
    built_victim = victim(victim_node if victim_node is not None else cfg.victim, device)
    renderer = make(cfg.renderer)
    eval_bank = make(cfg.eot.eval_backgrounds)
    size = (int(cfg.image_size), int(cfg.image_size))
    palette, colour_model = printer(cfg, device)
    pipeline = ViewPipeline(renderer, eval_bank, size)
    with torch.no_grad():
        adv = patch.apply(built_scene.texture)
    if "model" in (cfg.get("printer") or {}):          # the run printed its patch: evaluate the print
        with torch.no_grad():
            adv = colour_model.print_patch(adv, patch.mask)
        pipeline = photographed(pipeline, colour_model)
    targeted = OBJECTIVES.get(cfg.attack.get("objective", "targeted"), OBJECTIVES["targeted"]).targeted
    return FinishedRun(run_dir, cfg, metrics, built_scene, built_victim, patch, renderer, eval_bank, size,
                       adv.detach(), pipeline, cfg.attack.get("target") if targeted else None, palette, colour_model)


# -- drives -----------------------------------------------------------------------------------------

def drive_config(option: str = "quick") -> DictConfig:
    """``conf/drive/<option>.yaml`` composed as ``python -m physattack.drive drive=<option>`` has it (inside a
    running Hydra app, or on its own)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose(config_name="drive", overrides=[f"drive={option}"]).drive
    with initialize_config_module(config_module="physattack.conf", version_base="1.3"):
        return compose(config_name="drive", overrides=[f"drive={option}"]).drive


@dataclass
class DriveParts:
    """A drive evaluation: the held-out drives, how they are rendered, the stack that reads them, the judge."""

    drives: list
    renderer: object          # physattack.eot.drive.DriveRenderer
    stack: object             # physattack.evaluate.drive.DetectorStack or TwoStageStack
    settings: object          # physattack.evaluate.drive.DriveSettings


def drive_panel(members: dict | None, scene_class: str, detectors: bool = False) -> tuple[dict, dict]:
    """The drive panel of ``members`` (name -> ``PanelVictim``) and the members left off it with the reason:
    classifiers for a two-stage stack, detectors (``detectors=True``) for a detector stack; a member of the
    other kind, or without the sign's class, is skipped."""
    from physattack.evaluate.drive import PanelVictim
    from physattack.evaluate.members import label_sets
    from physattack.victims.base import VictimError

    panel, skipped = {}, {}
    for name, member in (members or {}).items():
        if is_detector(member.victim) != detectors:
            skipped[name] = "a classifier, on a detector stack" if detectors else "a detector, on a two-stage stack"
            continue
        if detectors:
            try:
                panel[name] = PanelVictim(member.victim, (member.victim.label_index(scene_class),), member.role,
                                          member.family)
            except VictimError:
                skipped[name] = f"its labels lack the scene's class '{scene_class}'"
            continue
        sets = label_sets(member.victim, scene_class, None)
        if isinstance(sets, str):
            skipped[name] = sets
        else:
            panel[name] = PanelVictim(member.victim, sets.true_set, member.role, member.family)
    return panel, skipped


def drive_parts(node: DictConfig, *, scene, attacked, victim_names: list[str], renderer, backgrounds, crop_px: int,
                crop_frame: float, device, members: dict | None = None) -> DriveParts:
    """Build a drive evaluation of the ``attacked`` victim from a ``conf/drive/*.yaml`` node: a classifier is
    read through the two-stage stack (``node.detector`` -> the classifier), a detector alone (or two-stage
    when ``node.classifier`` names a second stage). Bad settings (a braking point beyond the first frame, k > n)
    are refused here, before any frame is rendered.

    ``members`` (``{name: Member}``, attacked and held out: the held-out protocol's, ``protocol_victims``
    or ``protocol_detectors``) become the stack's panel (``physattack.evaluate.drive.PanelVictim``): for a
    classifier run each classifier reads the two-stage stack's crops, for a detector run alone each
    detector scans the same frames, so the drive report also says what a car whose model the patch was
    not fitted to would do, and judges an ensemble's members one by one."""
    from physattack.eot.drive import DriveRenderer
    from physattack.evaluate.drive import DetectorStack, TiledDetector, TwoStageStack, check_braking

    dashcam = make(node.dashcam)
    drive_set = make(node.drives, background_count=len(backgrounds), _convert_="all")
    settings = make(node.settings)
    stack_settings = make(node.stack, _convert_="all")
    drives = drive_set.drives()
    check_braking(drives, settings)
    name = "+".join(victim_names)
    if is_detector(attacked):
        detector, names, classifier = attacked, {"detector": name}, None
        second = node.get("classifier")
        if second is not None:
            classifier = victim(second.victim, device)
            names["classifier"] = str(second.get("name") or second.victim.get("_target_", "classifier"))
    else:
        detector = victim(node.detector.victim, device)
        names = {"detector": str(node.detector.get("name") or node.detector.victim.get("_target_", "detector")),
                 "classifier": name if len(victim_names) <= 1 else f"the mean probability of {name}"}
        classifier = attacked
    tiled = TiledDetector(detector, dashcam, tuple(scene.texture_size_m), stack_settings)
    frame = stack_settings.crop_frame if stack_settings.crop_frame is not None else crop_frame
    side = stack_settings.crop_px if stack_settings.crop_px is not None else crop_px
    if classifier is None:
        panel, skipped = drive_panel(members, scene.class_name, detectors=True)
        panel = {n: replace(m, model=TiledDetector(m.model, dashcam, tuple(scene.texture_size_m), stack_settings))
                 for n, m in panel.items()}
        stack = DetectorStack(tiled, detector.label_index(scene.class_name), settings.iou, names, panel, skipped)
    else:
        panel, skipped = drive_panel(members if classifier is attacked else None, scene.class_name)
        stack = TwoStageStack(tiled, classifier, classifier.label_set(scene.class_name), settings.iou, frame, side,
                              names, panel, skipped)
    return DriveParts(drives, DriveRenderer(renderer, backgrounds, dashcam), stack, settings)
