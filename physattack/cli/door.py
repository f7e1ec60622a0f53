"""The door every command goes through.

One error path: an ``InputError`` (however wrapped) becomes one sentence on stderr and exit status 2,
with no traceback; anything else is a bug and keeps its trace. For the Hydra commands the door also
composes the configuration once before Hydra runs, so that a mistyped group option or key, a setting
no constructor takes, or a value of the wrong type is answered with one sentence and a "did you mean"
instead of Hydra's advice or a TypeError dump; and it claims the run folder (``physattack.cli.rundir``)
before Hydra writes anything into it.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import re
import signal
import sys
import threading
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from physattack.errors import WRITE_FAILED, InputError, Interrupted, WriteError, input_error, write_error

CONFIG_MODULE = "physattack.conf"


def fail(err: InputError | str) -> int:
    """Print ``error: <sentence>`` on stderr and return the exit status for bad input."""
    print(f"error: {err}", file=sys.stderr)
    return 2


def fail_write(err: WriteError, hint: str = "") -> int:
    """A file could not be written: one sentence on stderr, exit status ``WRITE_FAILED`` (74)."""
    print(f"error: {err}{hint or '; free space (or make the folder writable) and run the command again'}.",
          file=sys.stderr)
    return WRITE_FAILED


def interrupted(signum: int, module: str, where: Path | None = None, kept: str | None = None) -> int:
    """A command stopped by Ctrl-C or SIGTERM: one sentence, exit status 128 + the signal's number."""
    if kept is None:
        place = f" in {where}" if where is not None and where.exists() else ""
        kept = f"the files it had written{place} are whole and kept"
    print(f"interrupted by {signal.Signals(signum).name}: python -m {module} stopped before it finished; {kept}.",
          file=sys.stderr)
    return 128 + signum


@contextlib.contextmanager
def stop_signals():
    """SIGTERM raised as ``Interrupted`` where the command is (Ctrl-C already raises KeyboardInterrupt), so
    that ``finally`` blocks run and the door can say what stopped it; the old handler comes back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise Interrupted(signum)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def guarded(fn: Callable[[], int | None], module: str, where: Callable[[], Path | None] = lambda: None,
            tidy: Callable[[], None] = lambda: None) -> int:
    """``fn()`` behind the door: bad input -> one sentence and 2, a file that cannot be written -> one
    sentence and 74, Ctrl-C / SIGTERM -> one sentence and 130 / 143; anything else is a bug and keeps its
    trace. ``tidy()`` removes a run folder that the refused or interrupted command left without work in it."""
    with stop_signals():
        try:
            return fn() or 0
        except KeyboardInterrupt:
            tidy()
            return interrupted(signal.SIGINT, module, where())
        except Interrupted as stop:
            tidy()
            return interrupted(stop.signum, module, where(), stop.kept)
        except Exception as exc:
            err = input_error(exc)
            if err is not None:
                tidy()
                return fail(err)
            bad_write = write_error(exc)
            if bad_write is None:
                raise
            return fail_write(bad_write, resume_hint(where()))


def resume_hint(folder: Path | None) -> str:
    """How to continue an attack run that stopped on a write: from its last good checkpoint."""
    if folder is not None and (folder / "checkpoint.pt").is_file():
        return (f"; the last good checkpoint.pt is kept: free space (or make the folder writable) and continue "
                f"the run with resume={folder}")
    return ""


def entry(fn: Callable[..., int | None], module: str = "physattack") -> Callable[..., int]:
    """Decorate a plain ``main(argv=None) -> int`` command with the door (``guarded``)."""
    @functools.wraps(fn)
    def run(*args, **kwargs) -> int:
        return guarded(lambda: fn(*args, **kwargs), module)
    return run


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    """`` did you mean X?`` for the closest of ``choices``, or an empty string."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


# -- Hydra commands ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class HydraCommand:
    """A command composed by Hydra from ``conf/<config_name>.yaml``.

    Args:
        module: what follows ``python -m`` (``physattack``, ``physattack.evaluate``, ...).
        config_name: the primary config in ``conf/``.
        summary: one sentence: what the command does.
        usage: canonical command lines, shown by ``--help``.
        task: the work, ``task(cfg, out)`` with the composed config and the run's output folder; returns
            what Hydra's sweeper may optimize.
        output: how the run folder is claimed (``physattack.cli.rundir.claim_output``): ``run`` (a new
            folder of its own, or inside the folder ``resume=`` names) or ``beside`` (a new folder next to
            the finished run's files that ``run_dir=`` names).
        check: a first look at the composed config before any folder is made (e.g. that ``run_dir=`` is a run).
        continues: the folder an interrupted run of this very command left unfinished, which this run takes
            over and continues in (e.g. a drive report's kept drives), or None for a new folder.
    """

    module: str
    config_name: str
    summary: str
    usage: tuple[str, ...]
    task: Callable[[Any, Path], Any]
    output: str = "run"
    check: Callable[[Any], None] | None = None
    continues: Callable[[Any], Path | None] | None = None

    def main(self, argv: list[str] | None = None) -> int:
        return run_hydra(self, argv)


def run_hydra(command: HydraCommand, argv: list[str] | None = None) -> int:
    """Run ``command`` with Hydra after the door's checks; returns the exit status."""
    import hydra
    from hydra._internal.utils import get_args_parser

    from physattack.cli.rundir import claim_output, continue_in, remove_if_untouched

    argv = list(sys.argv[1:] if argv is None else argv)
    args = get_args_parser().parse_args(argv)
    if args.help:
        print(help_text(command))
        return 0
    extra: list[str] = []
    made = None
    if not (args.hydra_help or args.info or args.shell_completion or args.experimental_rerun):
        config_name = args.config_name or command.config_name
        try:
            overrides = first_of_sweeps(args.overrides) if args.multirun else list(args.overrides)
            cfg = compose_checked(config_name, overrides)
            if args.cfg is None:
                check_constructors(cfg)
                if command.check is not None:
                    command.check(cfg)
                if not args.multirun:
                    taken = command.continues(cfg) if command.continues is not None else None
                    extra, made = (continue_in(taken) if taken is not None
                                   else claim_output(command.output, cfg, args.overrides))
        except Exception as exc:
            err = input_error(exc)
            if err is None:
                raise
            return fail(err)

    @functools.wraps(command.task)
    def task(cfg):
        from hydra.core.hydra_config import HydraConfig

        out = Path(HydraConfig.get().runtime.output_dir)
        if under_submitit():
            return command.task(cfg, out)   # submitit reports exceptions, not exit statuses (NOTES.md)
        result = []
        status = guarded(lambda: result.append(command.task(cfg, out)), command.module, lambda: out,
                         lambda: remove_if_untouched(made))
        if status:
            sys.exit(status)
        return result[0] if result else None

    saved = sys.argv
    if extra:                               # the door's resolved, claimed folder replaces the user's spelling
        argv = [a for a in argv if not re.match(r"^\+*hydra\.run\.dir=", a)]
    sys.argv = [saved[0], *argv, *extra]
    try:
        hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name=command.config_name)(task)()
    finally:
        sys.argv = saved
    return 0


def under_submitit() -> bool:
    """A submitit job must fail as an exception to be reported, so it gets no error sentence."""
    from hydra.core.hydra_config import HydraConfig
    return HydraConfig.initialized() and "submitit" in str(HydraConfig.get().launcher.get("_target_", ""))


def exit_if_interrupted(metrics: dict) -> None:
    """An interrupted run has saved everything; it still ends with 128 + the signal's number
    (130 for Ctrl-C, 143 for SIGTERM), so that scripts and schedulers see it did not finish."""
    signum = metrics.get("interrupted_by")
    if metrics.get("interrupted") and signum and not under_submitit():
        name = signal.Signals(signum).name
        print(f"interrupted by {name}: the run stopped at step {metrics.get('steps_done')} of "
              f"{metrics.get('steps')} and saved its checkpoint; continue it with resume=<its folder>.",
              file=sys.stderr)
        sys.exit(128 + signum)


def first_of_sweeps(overrides: list[str]) -> list[str]:
    """The first job's overrides of a sweep (``seed=0,1`` -> ``seed=0``): what the door checks."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        raise InputError(f"Cannot read the overrides: {str(e).splitlines()[0]}.") from None
    out = []
    for o in parsed:
        if o.is_sweep_override():
            first = next(iter(o.sweep_string_iterator()), None)
            out.append(f"{o.get_key_element()}={first}" if first is not None else o.input_line)
        else:
            out.append(o.input_line)
    return out


def compose_checked(config_name: str, overrides: list[str]):
    """Compose ``config_name`` with ``overrides`` (Hydra config included), turning Hydra's composition
    errors into one sentence with the valid names and a "did you mean"."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    GlobalHydra.instance().clear()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        try:
            cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=True)
        except MissingConfigException as e:
            raise InputError(missing_option_sentence(str(e), loader)) from None
        except OverrideParseException as e:
            raise InputError(f"Cannot read an override: {str(e).splitlines()[0]} (write key=value, lists as "
                             "[a,b], and quote values with spaces).") from None
        except ConfigCompositionException as e:
            raise InputError(unknown_key_sentence(str(e), config_name, overrides)) from None
        from omegaconf import OmegaConf

        scene = None if "scene" not in cfg or OmegaConf.is_missing(cfg, "scene") else cfg.scene
        if isinstance(scene, str):
            raise InputError(f"Choose the scene with a plus: +scene={scene} (scenes: "
                             f"{', '.join(sorted(loader.get_group_options('scene')))}).")
    return cfg


def missing_option_sentence(message: str, loader) -> str:
    m = re.search(r"Could not find '([^']+)'", message)
    if not m:
        return message.splitlines()[0]
    path = m.group(1)
    group, _, option = path.rpartition("/")
    options = sorted(loader.get_group_options(group)) if group else []
    if not options:
        groups = sorted(g for g in loader.list_groups("") if g != "hydra")
        return (f"There is no config group '{group or path}'{did_you_mean(group or path, groups)}; the groups are "
                f"{', '.join(groups)}.")
    return (f"{group}={option} is not an option of {group}{did_you_mean(option, options)}; the options are "
            f"{', '.join(options)}.")


def unknown_key_sentence(message: str, config_name: str, overrides: list[str]) -> str:
    """Hydra's "Could not override 'attack.stpes'. To append to your config use +attack.stpes=3" as
    one sentence naming the valid keys of that node (and the constructor arguments it may add with +)."""
    from hydra import compose
    from omegaconf import DictConfig, OmegaConf

    m = re.search(r"Could not (?:override|append to|delete from config\. No match for) '?([^'\s.]+(?:\.[^'\s.]+)*)'?",
                  message)
    if not m:
        return message.splitlines()[0]
    key = m.group(1)
    if key == "scene":
        return "Choose the scene with a plus: +scene=<name> (e.g. +scene=stop_sign)."
    parent, _, leaf = key.rpartition(".")
    rest = [o for o in overrides if not re.match(rf"^[+~]*{re.escape(key)}=", o)]
    try:
        cfg = compose(config_name=config_name, overrides=rest)
    except Exception:
        return message.splitlines()[0].rstrip(".") + "."
    node = OmegaConf.select(cfg, parent) if parent else cfg
    if not isinstance(node, DictConfig):
        return f"{key} is not a setting: {parent} holds a value, not settings."
    keys = [k for k in node.keys() if not str(k).startswith("_")]
    where = parent or "the top level"
    args = constructor_arguments(node)
    value = next((o.split("=", 1)[1] for o in overrides if re.match(rf"^[+~]*{re.escape(key)}=", o)), "...")
    if args is not None and leaf in args:
        return (f"{key} is not in the {where} config, but {args[leaf]} takes it: add it with +{key}={value}.")
    choices = list(keys) + (list(args) if args else [])
    return (f"{key} is not a setting of {where}{did_you_mean(leaf, choices)}; the settings of {where} are "
            f"{', '.join(sorted(set(map(str, choices))))}.")


def constructor_arguments(node) -> dict[str, str] | None:
    """The keyword arguments ``node._target_`` takes, name -> ``Target's name``; None when it takes
    ``**kwargs`` or cannot be located."""
    target = node.get("_target_") if hasattr(node, "get") else None
    if not target:
        return None
    sig = _signature(target)
    if sig is None or any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        return None
    owner = target.rsplit(".", 1)[-1]
    return {n: f"{owner}'s {n}" for n, p in sig.parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def _locate(target: str):
    from hydra.utils import get_object
    try:
        return get_object(target)
    except Exception:
        return None


def _signature(target: str) -> inspect.Signature | None:
    obj = _locate(target)
    if obj is None:
        return None
    try:
        return inspect.signature(obj)
    except (TypeError, ValueError):
        return None


_KIND = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def check_constructors(cfg, path: str = "") -> None:
    """Every config node with a ``_target_`` (outside ``hydra``) holds only arguments its constructor
    takes, and scalars of the type it declares, so that a typo or ``steps=abc`` fails here."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if not isinstance(cfg, DictConfig):
        if isinstance(cfg, ListConfig):
            for i, item in enumerate(cfg):
                check_constructors(item, f"{path}[{i}]")
        return
    for key in cfg.keys():
        if not path and key == "hydra":
            continue
        if OmegaConf.is_missing(cfg, key):
            continue
        child = cfg._get_node(key)
        if isinstance(child, (DictConfig, ListConfig)):
            check_constructors(child, f"{path}.{key}" if path else str(key))
    target = cfg.get("_target_") if "_target_" in cfg else None
    if not target:
        return
    obj = _locate(target)
    if obj is None:
        raise InputError(f"{path or 'the config'} names _target_ {target}, which cannot be imported; check the "
                         "spelling or install what provides it.")
    args = constructor_arguments(cfg)
    if args is not None:
        for key in cfg.keys():
            if str(key).startswith("_") or key in args:
                continue
            raise InputError(f"{path}.{key} is not an argument of {target.rsplit('.', 1)[-1]}"
                             f"{did_you_mean(str(key), args)}; its arguments are {', '.join(sorted(args))}.")
    try:
        hints = typing.get_type_hints(obj.__init__ if inspect.isclass(obj) else obj)
    except Exception:
        return
    for key in cfg.keys():
        if str(key).startswith("_") or key not in hints or OmegaConf.is_missing(cfg, key):
            continue
        node = cfg._get_node(key)
        if isinstance(node, (DictConfig, ListConfig)) or OmegaConf.is_interpolation(cfg, key) and not _resolvable(cfg, key):
            continue
        value = cfg[key]
        want = _scalar_type(hints[key])
        if want is None or value is None or _fits(value, want):
            continue
        raise InputError(f"{path}.{key} must be {_KIND[want]} ({target.rsplit('.', 1)[-1]}'s {key}); got {value!r}.")


def _resolvable(cfg, key) -> bool:
    try:
        cfg[key]
        return True
    except Exception:
        return False


def _scalar_type(hint) -> type | None:
    """int, float, bool or str when ``hint`` is one of them (or Optional of one), else None."""
    if hint in _KIND:
        return hint
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if len(args) == 1 and args[0] in _KIND and type(None) in typing.get_args(hint):
        return args[0]
    return None


def _fits(value, want: type) -> bool:
    if want is bool:
        return isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if want is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, str)


def help_text(command: HydraCommand) -> str:
    """``--help``: the command's name, what it does, its canonical use, its groups and settings."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from omegaconf import DictConfig, OmegaConf

    GlobalHydra.instance().clear()
    lines = [f"python -m {command.module} — {command.summary}", "", "Use:"]
    lines += [f"  {u}" for u in command.usage]
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        cfg = compose(config_name=command.config_name, return_hydra_config=True)
        choices = OmegaConf.to_container(cfg.hydra.runtime.choices)
        groups = [g for g in sorted(loader.list_groups("")) if g != "hydra"]
        keys = list(cfg.keys())
        required = [g for g in groups if g in keys and OmegaConf.is_missing(cfg, g)]
        used = required + [g for g in groups if g in choices and g not in required]
        optional = [g for g in groups if g == "experiment" and command.config_name == "config"]
        if used:
            lines += ["", "Config groups (group=option; * marks the default):"]
            for g in used + optional:
                opts = sorted(loader.get_group_options(g))
                mark = [f"{o}*" if choices.get(g) == o else o for o in opts]
                name = f"+{g}" if g in required or g in optional else g
                lines.append(f"  {name:<12} {', '.join(mark)}"
                             + ("   (required)" if g in required else "   (optional)" if g in optional else ""))
        scalars = [(k, "<required>" if OmegaConf.is_missing(cfg, k) else cfg[k]) for k in keys
                   if k != "hydra" and k not in used and not isinstance(cfg._get_node(k), DictConfig)]
        if scalars:
            lines += ["", "Settings (key=value):", "  " + "  ".join(f"{k}={_show(v)}" for k, v in scalars)]
    GlobalHydra.instance().clear()
    lines += ["", "Any setting inside a group: group.key=value (e.g. evaluation.settings.worst_views=4); show the composed config "
              "with --cfg job; sweeps with --multirun (Slurm: hydra/launcher=slurm); Hydra's own flags with --hydra-help."]
    return "\n".join(lines)


def _show(v) -> str:
    from omegaconf import OmegaConf
    if hasattr(v, "_content"):
        v = OmegaConf.to_container(v)
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_show(x) for x in v) + "]"
    return "null" if v is None else str(v).replace(" ", "")


def key_value_command(module: str, summary: str, usage: typing.Sequence[str], options: typing.Sequence[str]):
    """Decorate ``fn(argv) -> int``, a command of key=value arguments, into its ``main(argv=None)``:
    ``sys.argv`` by default, ``--help`` answered from ``summary``/``usage``/``options``, and the one
    error path (``entry``)."""
    def wrap(fn: Callable[[list[str]], int]) -> Callable[..., int]:
        @functools.wraps(fn)
        def main(argv: list[str] | None = None) -> int:
            argv = list(sys.argv[1:] if argv is None else argv)
            if wants_help(argv):
                print(plain_help(module, summary, usage, options))
                return 0
            return fn(argv)
        return entry(main, module)
    return wrap


def plain_help(module: str, summary: str, usage: typing.Sequence[str], options: typing.Sequence[str]) -> str:
    """``--help`` of a key=value command that is not composed by Hydra."""
    lines = [f"python -m {module} — {summary}", "", "Use:", *[f"  {u}" for u in usage]]
    if options:
        lines += ["", "Options (key=value):", *[f"  {o}" for o in options]]
    return "\n".join(lines)


def wants_help(argv: list[str]) -> bool:
    return any(a in ("-h", "--help") for a in argv)


def parse_options(schema, argv: list[str], usage: str):
    """``key=value`` arguments into the dataclass ``schema``, one sentence when one does not fit."""
    from dataclasses import fields

    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    bad = [a for a in argv if "=" not in a]
    if bad:
        raise InputError(f"Unexpected argument(s) {bad}: options are key=value ({usage}).")
    names = [f.name for f in fields(schema)]
    for a in argv:
        key = a.split("=", 1)[0]
        if key not in names:
            raise InputError(f"{key} is not an option{did_you_mean(key, names)}; the options are {', '.join(names)}.")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.from_dotlist(argv)))
    except OmegaConfBaseException as e:
        raise InputError(f"{str(e).splitlines()[0]} ({usage}).") from None


def path_of(value: str | Path) -> Path:
    return Path(str(value)).expanduser()
