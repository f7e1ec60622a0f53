"""One builder: a composed configuration -> the built parts, for every command.

The attack run (``physattack.cli.parts``), the attack kinds, the finished-run reader
(``physattack.cli.runs``), ``evaluate``, ``export``, ``transfer``, ``atlas``, ``calibrate``, ``train`` and
the photo evaluation all build their scene, victim, patch, renderer, pipelines, grids, trackers and
printer from here, so that a part is built the same way wherever it is used. Parts are made with
``hydra.utils.instantiate`` from their config group; what they raise (an ``InputError``) is unwrapped so
the door prints it.
"""

from __future__ import annotations

import re

import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from physattack.config import RunConfig
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


#: what ``printer.material`` may name: the print is matte (vinyl or paint), or on retroreflective film
PRINT_MATERIALS = ("matte", "retroreflective")


def print_retroreflects(cfg: DictConfig) -> bool:
    """Whether ``cfg.printer.material`` prints the patch on retroreflective film (matte when absent)."""
    material = (cfg.get("printer") or {}).get("material", "matte")
    if material not in PRINT_MATERIALS:
        raise InputError(f"printer.material={material!r} is not a print material: use matte (vinyl, paint) or "
                         "retroreflective (printed retroreflective film).")
    return material == "retroreflective"


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
    """The names the attacked victim(s) go by: an ensemble's member names, a stack's name (by its parts), else the
    ``victim=`` option chosen (or, outside Hydra, the victim config's ``name`` or its constructor's name)."""
    from hydra.core.hydra_config import HydraConfig

    names = getattr(built, "names", None)
    if names:
        return list(names)
    if getattr(built, "is_stack", False):              # named by its parts, whatever the config file is called
        return [built.display_name]
    if HydraConfig.initialized() and HydraConfig.get().runtime.choices.get("victim"):
        return [str(HydraConfig.get().runtime.choices["victim"])]
    return [str(cfg.victim.get("name") or str(cfg.victim.get("_target_", "victim")).rsplit(".", 1)[-1])]


def same_model(a, b) -> bool:
    """Whether two victims are one model: the same class with equal weights."""
    if type(a) is not type(b):
        return False
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(sa[k].shape == sb[k].shape and torch.equal(sa[k], sb[k]) for k in sa)


def protocol_members(pool, attacked: dict[str, object], device, families=None, data=None, prior=()) -> dict:
    """The victims a held-out protocol scores: ``attacked`` (name -> the victim the attack used; each member
    of an ensemble) and every victim of ``pool`` (``evaluation.victims`` or ``evaluation.detectors``: name ->
    victim config) the attack did not use, built here (before the attack, never called by it) and
    tagged held out, with their architecture ``families`` (``evaluation.families``) and the ``data`` each
    learned from (``evaluation.data``; a victim not named there learned from the renders).

    A victim of the pool is matched to an attacked one by name or by being the same model (equal
    weights), so an attacked model is never reported as held out under another name. A victim of the pool
    named in ``prior`` (those the ``init=`` run attacked) is reported as attacked too."""
    from physattack.evaluate.members import tag_members

    pool = pool or {}
    attacked, held_out = dict(attacked), {}
    for name, node in pool.items():
        name = str(name)
        if name in attacked:
            continue
        built = victim(node, device)
        twin = next((a for a, v in attacked.items() if same_model(built, v)), None)
        if name in prior and twin is None:
            attacked[name] = built
        elif twin is None:
            held_out[name] = built
        elif len(attacked) == 1 and twin not in pool:           # the attacked model under its pool name
            attacked = {name: attacked[twin]}
    return tag_members(attacked=attacked, held_out=held_out, families=dict(families or {}), data=dict(data or {}))


def tracker(cfg: DictConfig, out_dir, run_config: dict, **identity):
    """The run's tracker (``cfg.logger``: W&B, offline by default, or none) writing beside ``out_dir``'s files."""
    return make(cfg.logger, dir=str(out_dir), run_config=run_config, _recursive_=False, _convert_="all", **identity)


# -- drives ------------------------------------------------------------------------------------------

def drive_config(option: str = "quick") -> DictConfig:
    """``conf/drive/<option>.yaml`` composed as ``python -m physattack.drive drive=<option>`` has it (inside a
    running Hydra app, or on its own)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return compose(config_name="drive", overrides=[f"drive={option}"]).drive
    with initialize_config_module(config_module="physattack.conf", version_base="1.3"):
        return compose(config_name="drive", overrides=[f"drive={option}"]).drive


def drive_evaluation(node: DictConfig, perception, *, scene, renderer, backgrounds,
                     print_retroreflects: bool = False):
    """The drive evaluation a ``conf/drive/*.yaml`` node describes, of ``perception`` (the stack the attack
    kind chose: ``physattack.drive.build.Perception``), over held-out ``backgrounds``; ``print_retroreflects``:
    the run's ``printer.material`` (``print_retroreflects``). Bad settings (a braking point beyond the first
    frame, k > n) are refused here, before any frame is rendered."""
    from physattack.drive.build import DriveWorld, drive_evaluation as evaluation

    dashcam = make(node.dashcam)
    drive_set = make(node.drives, background_count=len(backgrounds), _convert_="all")
    world = DriveWorld(scene, drive_set.drives(), renderer, backgrounds, dashcam, print_retroreflects)
    return evaluation(world, perception, make(node.settings), make(node.stack, _convert_="all"))


def footage_evaluation(node: DictConfig, perception, *, scene, footage, track, options: DictConfig):
    """The drive evaluation of ``perception`` over the user's ``footage`` with the sign's corners in ``track``
    (``physattack.drive.footage``), judged by ``node``'s settings and stack; ``options``: ``footage_options``
    (``conf/drive.yaml``: the camera's field of view, the speed, the frame rate, the blur)."""
    from physattack.drive.build import footage_evaluation as evaluation
    from physattack.drive.footage import FootageOptions

    given = {k: (None if v is None else float(v)) for k, v in options.items()}      # Hydra refuses unknown keys
    return evaluation(scene, _user_path(footage), _user_path(track), perception, make(node.settings),
                      make(node.stack, _convert_="all"),
                      FootageOptions(**given, height_m=float(node.dashcam.get("height_m", 1.4))))


def _user_path(path) -> str:
    import os

    return os.path.abspath(os.path.expanduser(str(path)))


def approach_framing(sampler, cfg: DictConfig, *, scene, renderer, backgrounds, device):
    """``sampler`` with the drive stack's view attached when it samples approach windows (``eot=approach``): for a
    classifier, the detector framing (the detector of ``cfg.drive``, or ``conf/drive/quick.yaml``, over its tiles,
    run on drive frames rendered over the *training* ``backgrounds``); for a detector (windows of tiles), that
    stack's search tiles, which the detector reads itself. Any other sampler is returned as it is."""
    from physattack.drive import DriveRenderer, TiledDetector
    from physattack.drive.approach import ApproachSampler
    from physattack.drive.framing import DetectorFraming, FramingDraw

    if not isinstance(sampler, ApproachSampler):
        return sampler
    node = cfg.drive if cfg.get("drive") is not None and cfg.drive.get("detector") is not None else drive_config()
    if sampler.tiles is not None:           # a detector's windows: read on the drive stack's own tiles, no framing
        return sampler.for_detector(sampler.tiles.tile, make(node.stack, _convert_="all"))
    sampler.with_crop_frame(float(cfg.eot.grid.frame))
    if sampler.framing is not None:
        return sampler
    drawing = list(FramingDraw.__dataclass_fields__)          # how views draw; the rest is the fit's own
    keys = ["drives", "frames_per_drive", "streets", *drawing]
    unknown = set(sampler.fit) - set(keys)
    if unknown:                                               # before the detector loads: one sentence, at once
        raise InputError(f"eot.sampler.fit has no key {sorted(unknown)[0]}: it takes {', '.join(keys[:-1])} and "
                         f"{keys[-1]}.")
    detector, _ = drive_detector(node, device)
    tiled = TiledDetector(detector, sampler.dashcam, tuple(scene.texture_size_m), make(node.stack, _convert_="all"))
    draw = FramingDraw(**{k: v for k, v in sampler.fit.items() if k in drawing})
    fit = {k: v for k, v in sampler.fit.items() if k not in drawing}
    sampler.framing = DetectorFraming(tiled, DriveRenderer(renderer, backgrounds, sampler.dashcam),
                                      iou=float(node.settings.iou), draw=draw, **fit)
    return sampler


def seen_term(sampler, attack, *, renderer, backgrounds, colour_model, print_retroreflects: bool = False):
    """The stack detector's term of a classifier's approach windows (``eot.sampler.seen``,
    ``physattack.attack.seen.SeenTerm``): the detector of the sampler's framing, its tiles rendered at its input size
    over the training ``backgrounds`` and printed as the run prints; None when the term is off."""
    from physattack.drive.approach import ApproachSampler
    from physattack.attack.seen import SeenTerm
    from physattack.eot import ViewPipeline

    if not isinstance(sampler, ApproachSampler) or not sampler.seen.on:
        return None
    if sampler.framing is None:
        raise InputError("eot.sampler.seen keeps the stack's detector reading the sign for a classifier's windows; a "
                         "detector (attack=hide) reads its own tiles: set eot.sampler.seen.weight=0.")
    if getattr(attack, "method", "gradient") == "query":
        raise InputError("eot.sampler.seen works through the stack detector's gradient, and a query attack "
                         "(attack.method=query) takes none: set eot.sampler.seen.weight=0.")
    if getattr(attack, "placement", None) is not None:
        raise InputError("eot.sampler.seen renders the patch as designed, and attack.placement moves each view's "
                         "stickers: set attack.placement=null or eot.sampler.seen.weight=0.")
    detector = sampler.framing.tiled.detector
    label = None
    if sampler.seen.label == "target":
        if not (getattr(attack, "targeted", False) and getattr(attack, "target", None)):
            raise InputError("eot.sampler.seen.label=target asks the stack's detector for the attack's target class, "
                             "and this attack has none: set eot.sampler.seen.label=any.")
        label = detector.label_index(attack.target)
    size = (int(detector.input_size),) * 2
    pipeline = photographed(ViewPipeline(renderer, backgrounds, size, print_retroreflects=print_retroreflects),
                            colour_model)
    return SeenTerm(sampler.seen, detector, pipeline, label)


def camera_stage(pipeline):
    """The colour model's camera stage of a (photographed) view pipeline, or None."""
    from physattack.printing.colour import PhotographedPipeline

    return pipeline.model.photograph if isinstance(pipeline, PhotographedPipeline) else None


def drive_detector(node: DictConfig, device):
    """The detector a two-stage drive stack proposes boxes with (``node.detector``) and its name."""
    detector = victim(node.detector.victim, device)
    return detector, str(node.detector.get("name") or node.detector.victim.get("_target_", "detector"))
