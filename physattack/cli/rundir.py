"""Run folders: a run writes only into a new folder of its own, or inside the folder ``resume=`` names;
nothing another run left is ever overwritten.

The door resolves the folder (``~``, ``..``, symlinks) and claims it before Hydra writes its ``.hydra/``
files: the claim is a file created with O_CREAT|O_EXCL, so of two runs started into one folder at the
same moment exactly one wins. An explicit ``hydra.run.dir`` that already holds files (or that another
run has just claimed) is refused; a default (time-stamped) one that is taken moves on to ``-2``,
``-3``...; ``resume=<run>`` puts the continuing run in ``<run>/resume`` (``resume-2``, ...), beside the
old files. Every command that writes a folder (exports, drives, evaluations) takes it here.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from physattack.errors import InputError


#: The file that marks a folder as taken by one run. It is created with O_CREAT|O_EXCL, so of two
#: processes that claim the same folder at the same moment exactly one wins.
CLAIM_FILE = ".physattack-claim"

#: Folders this process claimed (so that ``run_attack`` called after the door does not claim twice).
_CLAIMED: set[Path] = set()


def resolved(path: str | Path) -> Path:
    """``path`` made absolute with ``~``, ``..`` and symlinks resolved, before anything is written: a
    ``new/../finished-run`` is the finished run, whether or not ``new`` exists."""
    return Path(os.path.realpath(os.path.expanduser(str(path))))


def holds_files(path: Path) -> bool:
    return path.exists() and (not path.is_dir() or any(path.iterdir()))


def first_missing(folder: Path) -> Path | None:
    """The topmost of ``folder`` and its parents that does not exist (what making it would create)."""
    return next((f for f in reversed([folder, *folder.parents]) if not f.exists()), None)


def claim(folder: Path, key: str = "hydra.run.dir") -> bool:
    """Take ``folder`` for this process: make it if needed and create its claim file exclusively.

    Returns False when the folder holds files (another run's, or another process's claim that won the
    race); True when this call claimed it. An unwritable place is one sentence naming ``key``.
    """
    folder = resolved(folder)
    if folder in _CLAIMED:
        return True
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if any(not hydras_own(p) for p in folder.iterdir()):
            return False
        fd = os.open(folder / CLAIM_FILE, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
    except FileExistsError:
        return False
    except OSError as e:
        raise InputError(f"Cannot write the output folder {folder} ({e.strerror or e}); choose a writable "
                         f"{key}=<folder>.") from None
    with os.fdopen(fd, "w") as f:
        f.write(f"{os.getpid()}\n")
    _CLAIMED.add(folder)
    return True


def hydras_own(entry: Path) -> bool:
    """What Hydra writes into a job's folder before the job runs (and the claim itself)."""
    return entry.name in (CLAIM_FILE, ".hydra") or entry.suffix == ".log"


def claim_free(path: str | Path, key: str = "hydra.run.dir") -> Path:
    """Claim ``path``, or the first of ``path-2``, ``path-3``, ... that no run holds."""
    path = resolved(path)
    candidate, k = path, 2
    while not claim(candidate, key):
        candidate, k = path.with_name(f"{path.name}-{k}"), k + 1
    return candidate


def free_folder(path: str | Path) -> Path:
    """A new, empty folder of this process's own: ``path``, or the first of ``path-2``, ``path-3``, ...
    that does not exist yet, made here with one ``mkdir`` (atomic: two writers never get the same one)."""
    path = resolved(path)
    candidate, k = path, 2
    while True:
        try:
            candidate.parent.mkdir(parents=True, exist_ok=True)
            candidate.mkdir()
            return candidate
        except FileExistsError:
            candidate, k = path.with_name(f"{path.name}-{k}"), k + 1
        except OSError as e:
            raise InputError(f"Cannot write the output folder {candidate} ({e.strerror or e}); choose a writable "
                             "folder.") from None


def free_stem(stem: Path, suffixes: tuple[str, ...]) -> Path:
    """``stem`` if none of ``stem + suffix`` exist, else ``stem-2``, ``stem-3``, ... (files a command writes
    side by side, e.g. a chart's ``.pdf``, ``.png`` and ``.json``)."""
    candidate, k = stem, 2
    while any(candidate.with_name(candidate.name + s).exists() for s in suffixes):
        candidate, k = stem.with_name(f"{stem.name}-{k}"), k + 1
    return candidate


def refuse_existing(paths: list[Path], overwrite: bool, key: str = "out") -> None:
    """Files a command was told to write (``key=``) that exist are refused unless ``overwrite``."""
    taken = [str(p) for p in paths if p.exists()]
    if taken and not overwrite:
        raise InputError(f"{', '.join(taken)} already exist(s); choose another {key}= or add overwrite=true.")


def weights_target(out: str | Path, overwrite: bool = False) -> Path:
    """``out`` as a weights path a training may write: a ``.safetensors`` name, neither it nor its ``.json``
    existing unless ``overwrite``. Checked before training, so that no hour is lost."""
    out = Path(out)
    if out.suffix != ".safetensors":
        raise InputError(f"out={out} must name a .safetensors file (the metadata goes beside it as .json).")
    if not overwrite and (out.exists() or out.with_suffix(".json").exists()):
        raise InputError(f"{out} already exists (or its .json does); choose another out= or add overwrite=true "
                         "to replace it.")
    return out


def checkpoint_folder(resume: str | Path) -> Path:
    """The run folder ``resume=`` names (a run folder, or its ``checkpoint.pt``)."""
    path = resolved(resume)
    folder = path.parent if path.suffix == ".pt" else path
    if not (folder / "checkpoint.pt").is_file() and not path.is_file():
        raise InputError(f"resume={resume} has no checkpoint.pt; give resume= the folder of an earlier run "
                         "(outputs/<date>/<time>) or its checkpoint.pt.")
    return folder


def quote(path: Path) -> str:
    """A path as a Hydra override value."""
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"


def named(overrides: list[str], key: str) -> bool:
    return any(re.match(rf"^\+*{re.escape(key)}=", o) for o in overrides)


def claim_output(output: str, cfg, overrides: list[str]) -> tuple[list[str], tuple[Path, Path] | None]:
    """Choose, resolve and claim this run's folder before Hydra writes anything; returns the overrides
    that point Hydra at it (the resolved path, replacing the user's ``hydra.run.dir``), and the folder with
    the topmost folder this call made (so that a run refused on its input can leave nothing behind)."""
    explicit = named(overrides, "hydra.run.dir")
    wanted = resolved(cfg.hydra.run.dir)
    resume = cfg.get("resume") if output == "run" else None
    if resume and not explicit:
        wanted = checkpoint_folder(resume) / "resume"
    made = first_missing(wanted)
    if explicit:
        if holds_files(wanted):
            hint = " or continue that run with resume=" + str(wanted) if (wanted / "checkpoint.pt").is_file() else ""
            raise InputError(f"hydra.run.dir={wanted} already holds files of another run, and a run never writes "
                             f"into one: choose a new folder{hint}.")
        if not claim(wanted):
            raise InputError(f"hydra.run.dir={wanted} was just taken by another run started at the same time, and "
                             "two runs never share a folder: choose a new folder.")
        out = wanted
    else:
        out = claim_free(wanted)
        made = made if made is not None and (out == made or made in out.parents) else out
    return [f"hydra.run.dir={quote(out)}"], (out, made)


def continue_in(folder: Path) -> tuple[list[str], None]:
    """Take over ``folder``, which an interrupted run of the same command left unfinished (its own work,
    never another's: the command checks that), and point Hydra at it; nothing is made, so nothing is
    removed if this run is refused too."""
    folder = resolved(folder)
    _CLAIMED.add(folder)
    return [f"hydra.run.dir={quote(folder)}"], None


def remove_if_untouched(made: tuple[Path, Path | None] | None) -> None:
    """Undo ``claim_output`` when the run was refused or interrupted before it saved any work (nothing
    but Hydra's files, the W&B folder and the config): the folder it made (and the parents made with it)
    goes; a folder that existed empty before is emptied again. A refused run leaves nothing behind."""
    if made is None:
        return
    folder, top = made
    if not folder.is_dir() or any(not (hydras_own(p) or p.name in ("wandb", "config.yaml")) for p in folder.iterdir()):
        return                                       # it holds work (a checkpoint, a patch, a report): keep it
    _CLAIMED.discard(resolved(folder))
    if top is None:                                  # the user's own empty folder: empty it again
        for entry in folder.iterdir():
            shutil.rmtree(entry, ignore_errors=True) if entry.is_dir() else entry.unlink(missing_ok=True)
        return
    shutil.rmtree(folder, ignore_errors=True)
    for parent in folder.parents:
        if parent == top.parent or not parent.is_dir() or any(parent.iterdir()):
            break
        parent.rmdir()


def ensure_writable(folder: Path, key: str) -> None:
    """Make ``folder`` (and its parents) and prove a file can be written there, before any compute."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise InputError(f"Cannot write the output folder {folder} ({e.strerror or e}); choose a writable "
                         f"{key}=<folder>.") from None


def guard_own_folder(run_dir: Path, config_yaml: str) -> bool:
    """Inside a run (every path, the launchers' too): may this run write into ``run_dir``?

    Returns True when ``run_dir`` holds an unfinished checkpoint of this very configuration (a
    requeued, pre-empted job), so the run continues from it; False for a fresh folder. A folder with
    another run's outputs is refused.
    """
    entries = [p for p in run_dir.iterdir() if not hydras_own(p) and p.name != "wandb"] if run_dir.is_dir() else []
    if not entries:
        return False
    same = (run_dir / "config.yaml").is_file() and (run_dir / "config.yaml").read_text() == config_yaml
    if same and (run_dir / "checkpoint.pt").is_file() and not (run_dir / "metrics.json").is_file():
        return True
    raise InputError(f"{run_dir} already holds files of another run, and a run never writes into one: choose a new "
                     f"hydra.run.dir, or continue that run with resume={run_dir}.")
