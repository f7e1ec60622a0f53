"""Run folders: a run writes only into a new folder of its own, or inside the folder ``resume=`` names;
nothing another run left is ever overwritten.

The door claims the folder before Hydra writes its ``.hydra/`` files: an explicit ``hydra.run.dir`` that
already holds files is refused; a default (time-stamped) one that is taken moves on to ``-2``, ``-3``...;
``resume=<run>`` puts the continuing run in ``<run>/resume`` (``resume-2``, ...), beside the old files.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from physattack.errors import InputError


def free_folder(path: str | Path) -> Path:
    """``path`` if it does not exist or is empty, else the first free ``path-2``, ``path-3``, ..."""
    path = Path(path)
    candidate, k = path, 2
    while candidate.exists() and (not candidate.is_dir() or any(candidate.iterdir())):
        candidate, k = path.with_name(f"{path.name}-{k}"), k + 1
    return candidate


def holds_files(path: Path) -> bool:
    return path.exists() and (not path.is_dir() or any(path.iterdir()))


def checkpoint_folder(resume: str | Path) -> Path:
    """The run folder ``resume=`` names (a run folder, or its ``checkpoint.pt``)."""
    path = Path(str(resume)).expanduser()
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


def claim_output(kind: str, cfg, overrides: list[str]) -> tuple[list[str], tuple[Path, Path] | None]:
    """Choose and check this run's folder; returns the overrides that point Hydra at it, and the
    folder when this call made it (so that a run refused on its input can leave nothing behind)."""
    explicit = named(overrides, "hydra.run.dir")
    wanted = Path(str(cfg.hydra.run.dir)).expanduser()
    resume = cfg.get("resume") if kind == "run" else None
    if resume and not explicit:
        out = free_folder(checkpoint_folder(resume) / "resume")
    elif explicit:
        if holds_files(wanted):
            hint = " or continue that run with resume=" + str(wanted) if (wanted / "checkpoint.pt").is_file() else ""
            raise InputError(f"hydra.run.dir={wanted} already holds files of another run, and a run never writes "
                             f"into one: choose a new folder{hint}.")
        out = wanted
    else:
        out = free_folder(wanted)
    made = next((f for f in reversed([out, *out.parents]) if not f.exists()), None)
    ensure_writable(out, "hydra.run.dir")
    return ([] if (explicit and out == wanted) else [f"hydra.run.dir={quote(out)}"]), \
        ((out, made) if made is not None else None)


def remove_if_untouched(made: tuple[Path, Path] | None) -> None:
    """Remove the run folder ``claim_output`` made in this process (and the parents it made with it)
    when the run was refused before it saved any work (no checkpoint, patch or metrics): a run refused
    on its input leaves nothing behind."""
    if made is None:
        return
    folder, top = made
    if not folder.is_dir() or any((folder / name).exists() for name in ("checkpoint.pt", "patch.pt", "metrics.json")):
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
    ours = {".hydra", "wandb"}
    entries = [p for p in run_dir.iterdir() if p.name not in ours and not p.name.endswith(".log")] \
        if run_dir.is_dir() else []
    if not entries:
        return False
    same = (run_dir / "config.yaml").is_file() and (run_dir / "config.yaml").read_text() == config_yaml
    if same and (run_dir / "checkpoint.pt").is_file() and not (run_dir / "metrics.json").is_file():
        return True
    raise InputError(f"{run_dir} already holds files of another run, and a run never writes into one: choose a new "
                     f"hydra.run.dir, or continue that run with resume={run_dir}.")
