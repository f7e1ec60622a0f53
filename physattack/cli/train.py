"""``python -m physattack.train signnet|detnet|detector|zoo [key=value ...]``: train a bundled victim on
the project's own renders and write its weights (.safetensors) and metadata (.json, with the command).

Wiring only: the options are the training dataclass's fields (``physattack.train.classifier.
SignNetTraining``, ``physattack.train.detector.DetNetTraining`` and ``DetectorTraining``,
``physattack.train.zoo.ZooTraining``) plus where to write; the work is ``train_signnet`` /
``train_detnet`` / ``train_detector`` / ``train_member``. An existing
weights file is refused unless ``overwrite=true`` (checked before anything is rendered).
"""

from __future__ import annotations

import inspect
import os
import re
import shlex
import sys
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Callable

import torch

from physattack.cli.allocator import keep_freed_memory
from physattack.cli import build
from physattack.cli.door import (compose_checked, did_you_mean, entry, parse_options, path_of, plain_help,
                                  wants_help)
from physattack.cli.rundir import ensure_writable, weights_target
from physattack.errors import InputError, check_range
from physattack.train.classifier import SignNetTraining, train_signnet
from physattack.train.detector import DetectorTraining, DetNetTraining, save_detector, train_detector, train_detnet
from physattack.train.weights import save_weights
from physattack.train.zoo import ZooTraining, save_member, save_victim_config, train_member
from physattack.victims.detnet import default_detnet_weights
from physattack.victims.signnet import default_weights

PROG = "python -m physattack.train"


@dataclass
class MemoryOption:
    """Args:
        keep_freed_memory: keep freed CPU memory for the next batch instead of handing it back (glibc, as
            the attack's run setting of that name does), so fewer page faults: about half in a short zoo training.
    """

    keep_freed_memory: bool = True


@dataclass
class SignNetCommand(MemoryOption, SignNetTraining):
    """Args:
        out: weights file (.safetensors; its .json goes beside it).
        overwrite: replace an existing weights file.
    """

    out: str | None = None
    overwrite: bool = False


@dataclass
class DetNetCommand(MemoryOption, DetNetTraining):
    """Args:
        out: weights file (.safetensors; its .json goes beside it).
        overwrite: replace an existing weights file.
        threads: torch CPU threads.
    """

    out: str | None = None
    overwrite: bool = False
    threads: int = 2


@dataclass
class DetectorCommand(MemoryOption, DetectorTraining):
    """Args:
        name: the detector's name (letters, digits, _ and -); default det_<arch>.
        out: weights file (.safetensors; its .json goes beside it); default assets/<name>.safetensors.
        overwrite: replace an existing weights file.
        threads: torch CPU threads.
    """

    name: str | None = None
    out: str | None = None
    overwrite: bool = False
    threads: int = 2

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("threads", self.threads, 1, integer=True)
        if self.name is None:
            self.name = f"det_{self.arch}"
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise InputError(f"name={self.name!r} may hold only letters, digits, _ and - (it names the files).")
        if self.out is None:
            self.out = str(default_detnet_weights().parent / f"{self.name}.safetensors")


@dataclass
class ZooCommand(MemoryOption, ZooTraining):
    """Args:
        name: the member's name (letters, digits, _ and -); default zoo_<arch>.
        out: weights file (.safetensors; its .json goes beside it); default assets/<name>.safetensors.
        config: also write a victim config here (e.g. conf/victim/<name>.yaml), so victim=<name> loads the member
            (by name when out is in physattack/assets, else with every victim=timm key filled).
        overwrite: replace an existing weights file (and config).
        threads: torch CPU threads.
    """

    name: str | None = None
    out: str | None = None
    config: str | None = None
    overwrite: bool = False
    threads: int = 1

    def __post_init__(self) -> None:
        super().__post_init__()
        check_range("threads", self.threads, 1, integer=True)
        if self.name is None:
            self.name = "zoo_" + re.sub(r"[^A-Za-z0-9_]+", "_", self.arch)
        if not re.fullmatch(r"[A-Za-z0-9_-]+", self.name):
            raise InputError(f"name={self.name!r} may hold only letters, digits, _ and - (it names the files).")
        if self.out is None:
            self.out = str(default_weights().parent / f"{self.name}.safetensors")


@dataclass(frozen=True)
class Model:
    what: str
    options: type
    default_out: Callable[[], Path]
    example: str


MODELS = {
    "signnet": Model("the bundled SignNet traffic-sign classifier, on rendered sign crops (about 10-25 min on "
                     "2 CPU cores; the bundled one saw a tenth of its renders through fog)", SignNetCommand, default_weights,
                     "signnet per_class=1200 epochs=10 fog_share=0.1"),
    "detnet": Model("the bundled DetNet traffic-sign detector, on rendered context frames (about 30 min on "
                    "2 CPU cores)", DetNetCommand, default_detnet_weights, "detnet"),
    "detector": Model("a small torchvision detector of another architecture (FCOS or RetinaNet on a timm trunk, "
                      "or SSDlite), from random init on DetNet's context frames (about 30 min on 2 CPU cores)",
                      DetectorCommand, lambda: default_detnet_weights().parent / "<name>.safetensors",
                      "detector arch=fcos name=det_fcos"),
    "zoo": Model("a victim-zoo member: any timm architecture from random init, on rendered sign crops (with "
                 "hard=true also clutter in the sign colours and small far signs)", ZooCommand,
                 lambda: default_weights().parent / "<name>.safetensors",
                 "zoo arch=resnet10t name=zoo_resnet10t hard=true per_class=1200 epochs=10"),
}


def usage() -> str:
    return plain_help("physattack.train", "train a bundled victim on physattack's own renders, writing "
                      "<out>.safetensors and <out>.json (held-out figures and the command that made them).",
                      [f"{PROG} <model> [key=value ...]    (a model's options: {PROG} <model> --help)",
                       *[f"{PROG} {m.example}" for m in MODELS.values()]],
                      [f"{name:<8} {m.what}" for name, m in MODELS.items()]).replace("Options (key=value):",
                                                                                        "Models:")


def model_help(name: str) -> str:
    m = MODELS[name]
    docs = _arg_docs(m.options)
    options = [f"{f.name}={m.default_out() if f.name == 'out' else _show(_default(f))}".ljust(30) + " "
               + docs.get(f.name, "") for f in fields(m.options)]
    return plain_help(f"physattack.train {name}", f"train {m.what}.",
                      [f"{PROG} {name} [key=value ...]", f"{PROG} {m.example}"], options)


def _show(value) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ",".join(_show(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_show(v)}" for k, v in value.items()) + "}"
    return str(value).lower() if isinstance(value, bool) else str(value)


def _default(f):
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _arg_docs(cls: type) -> dict[str, str]:
    """``name: text`` lines of the Args sections of ``cls`` and its bases' docstrings; a line indented
    deeper than the section's names continues the text before it."""
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        doc = inspect.cleandoc(klass.__dict__.get("__doc__") or "")
        if "Args:" not in doc:
            continue
        indent, last = None, None
        for line in doc.split("Args:", 1)[1].splitlines():
            if not line.strip():
                continue
            depth = len(line) - len(line.lstrip())
            indent = depth if indent is None else indent
            if depth < indent:                  # the section has ended
                break
            name, sep, text = line.strip().partition(": ")
            if depth == indent and sep and name.isidentifier():
                docs[name], last = text, name
            elif depth > indent and last is not None:
                docs[last] += " " + line.strip()
    return docs


def training_world():
    """The attack's renderer, view sampler, background banks and grid, built from the same configs an attack
    composes (``conf/renderer``, ``conf/eot``), for the training commands (``physattack.train.world``)."""
    from physattack.train.world import TrainingWorld

    cfg = compose_checked("config", ["+scene=stop_sign", "eot=default"])     # the per-view EOT's sampler
    backgrounds, eval_backgrounds = build.make(cfg.eot.backgrounds), build.make(cfg.eot.eval_backgrounds)
    return TrainingWorld(renderer=build.make(cfg.renderer),
                         sampler=build.make(cfg.eot.sampler, background_count=len(backgrounds), _convert_="all"),
                         backgrounds=backgrounds, eval_backgrounds=eval_backgrounds,
                         grid=build.make(cfg.eot.grid, background_count=len(eval_backgrounds), _convert_="all"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print(usage(), file=sys.stderr)
        return 2
    if argv[0] in {"-h", "--help"}:
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in MODELS:
        raise InputError(f"Unknown model '{name}'{did_you_mean(name, MODELS)}; train one of {', '.join(MODELS)} "
                         f"({PROG} --help).")
    if wants_help(rest):
        print(model_help(name))
        return 0
    cmd = parse_options(MODELS[name].options, rest, f"{PROG} {name} --help lists them")
    out = weights_target(path_of(cmd.out) if cmd.out else MODELS[name].default_out(), cmd.overwrite)
    ensure_writable(out.parent, "out")
    config = _check_config(cmd) if name == "zoo" else None
    if cmd.keep_freed_memory:
        keep_freed_memory()
    if name == "detnet":
        torch.set_num_threads(cmd.threads)
        model, meta = train_detnet(cmd)
        print(f"held-out AP@0.5 over {meta['heldout_frames']} frames ({meta['heldout_signs']} signs): "
              + ", ".join(f"{lab} {a:.3f}" for lab, a in meta["heldout_ap50"].items())
              + f"; mAP {meta['heldout_map50']:.3f}")
        print(f"stop-sign detection rate on the attack's held-out frame grid: {meta['grid_detection_rate_stop']:.3f}")
    elif name == "detector":
        torch.set_num_threads(cmd.threads)
        model, meta = train_detector(cmd)
        print(f"{meta['model']} ({meta['parameters'] / 1e6:.2f} M parameters, {meta['weights_bytes'] / 2 ** 20:.1f} MB "
              f"in {meta['storage']}): held-out AP@0.5 over {meta['heldout_frames']} frames ({meta['heldout_signs']} "
              "signs): " + ", ".join(f"{lab} {a:.3f}" for lab, a in meta["heldout_ap50"].items())
              + f"; mAP {meta['heldout_map50']:.3f}")
        print(f"stop-sign detection rate on the attack's held-out frame grid: {meta['grid_detection_rate_stop']:.3f}")
    elif name == "zoo":
        torch.set_num_threads(cmd.threads)
        model, meta = train_member(cmd, training_world())
        for key, what, views in (("heldout", "held-out", "renders"), ("heldout_hard", "hard held-out", "renders"),
                                 ("heldout_warp", "warped held-out", "warps over unseen photographs")):
            if key + "_top1" not in meta:
                continue
            print(f"{what} top-1: {meta[key + '_top1']:.4f} over {meta[key + '_views']} {views}; per class: "
                  + ", ".join(f"{lab} {a:.3f}" for lab, a in meta[key + "_per_class"].items()))
    else:
        model, meta = train_signnet(cmd, training_world())
        print(f"held-out top-1: {meta['heldout_top1']:.4f} over {meta['heldout_views']} renders; per class: "
              + ", ".join(f"{lab} {a:.3f}" for lab, a in meta["heldout_per_class"].items()))
    meta = {"command": " ".join([PROG, *map(shlex.quote, argv)]), **meta}
    weights, meta_path = {"zoo": save_member, "detector": save_detector}.get(name, save_weights)(out, model, meta)
    print(f"wrote {weights} and {meta_path} ({meta['train']['minutes']} min)")
    if config is not None:
        bundled = weights.resolve().parent == default_weights().resolve().parent    # ships in physattack/assets
        save_victim_config(config, meta, weights if bundled else _shown_path(weights), bundled)
        print(f"wrote {config}: use it with victim={config.stem}")
    return 0


main = entry(main, "physattack.train")


def _check_config(cmd: ZooCommand) -> Path | None:
    """The victim config a zoo member's training writes: a .yaml that may be written (before training)."""
    if cmd.config is None:
        return None
    config = path_of(cmd.config)
    if config.suffix != ".yaml":
        raise InputError(f"config={config} must name a .yaml file (a victim config, e.g. conf/victim/{cmd.name}.yaml).")
    if config.exists() and not cmd.overwrite:
        raise InputError(f"{config} already exists; choose another config= or add overwrite=true to replace it.")
    ensure_writable(config.parent, "config")
    return config


def _shown_path(path: Path) -> str:
    """``path`` relative to the working folder when it lies inside it (a config in a checkout), else absolute."""
    path = path.resolve()
    cwd = Path.cwd().resolve()
    return os.path.relpath(path, cwd) if path.is_relative_to(cwd) else str(path)
