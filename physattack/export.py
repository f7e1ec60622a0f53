"""``python -m physattack.export run_dir=<run> [dpi=600] [paper=letter] [out=<folder>]``: the export bundle
of a finished (or interrupted) run, rebuilt from its ``config.yaml`` and ``patch.pt``.

Wiring only: the run's own configuration builds its scene, patch, palette and colour model; the
bundle is ``physattack.printing.export.export_patch``. Options not given keep the run's
``printer.export`` settings. Without ``out=`` the bundle goes to ``<run>/export`` or, when that
exists, the first free ``<run>/export-N``; an existing ``out=`` is refused unless ``overwrite=true``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from physattack.errors import InputError
from physattack.printing import load_colour_model, load_palette
from physattack.printing.export import ExportOptions, export_patch, free_folder

USAGE = ("usage: python -m physattack.export run_dir=<run directory> [dpi=300] [paper=a4|letter|a3|tabloid|fit] "
         "[margin_mm=10] [overlap_mm=10] [bleed_mm=2] [out=<folder>] [overwrite=false]")


@dataclass
class ExportCommand:
    run_dir: str = ""
    out: str | None = None
    overwrite: bool = False
    dpi: float | None = None
    paper: str | None = None
    margin_mm: float | None = None
    overlap_mm: float | None = None
    bleed_mm: float | None = None


def parse(argv: list[str]) -> ExportCommand:
    bad = [a for a in argv if "=" not in a]
    if bad or not argv:
        raise InputError(f"Arguments are key=value pairs ({USAGE[7:]}); got {bad or 'none'}.")
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ExportCommand), OmegaConf.from_dotlist(argv)))
    except OmegaConfBaseException as e:
        raise InputError(f"{str(e).splitlines()[0]}; {USAGE}") from None


def export_run(cmd: ExportCommand) -> tuple[Path, dict]:
    run = Path(cmd.run_dir)
    if not (run / "config.yaml").is_file() or not (run / "patch.pt").is_file():
        raise InputError(f"{run} is not a finished run directory (it needs config.yaml and patch.pt); give run_dir= "
                         "the outputs/<date>/<time> folder of an attack.")
    cfg = OmegaConf.load(run / "config.yaml")
    scene = instantiate(cfg.scene)
    patch = instantiate(cfg.patch, scene=scene)
    state = torch.load(run / "patch.pt", map_location="cpu", weights_only=False)
    try:
        patch.load_state_dict(state["patch"])
    except (RuntimeError, KeyError) as e:
        raise InputError(f"{run / 'patch.pt'} does not fit the patch its config.yaml builds; was the run directory "
                         f"edited? ({str(e).splitlines()[0]})") from None
    printer = cfg.get("printer") or {}
    options = {**OmegaConf.to_container(printer.get("export") or {}),
               **{k: v for k in ("dpi", "paper", "margin_mm", "overlap_mm", "bleed_mm")
                  if (v := getattr(cmd, k)) is not None}}
    options = ExportOptions(**options)
    out = Path(cmd.out) if cmd.out else free_folder(run / "export")
    manifest = export_patch(out, scene=scene, patch=patch, palette=load_palette(printer.get("palette")),
                            colour_model=load_colour_model(printer.get("model")), options=options,
                            source={"run_dir": str(run)}, overwrite=cmd.overwrite)
    return out, manifest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in {"-h", "--help"}:
        print(USAGE, file=sys.stderr)
        return 2
    try:
        out, manifest = export_run(parse(argv))
    except Exception as exc:
        err = exc if isinstance(exc, InputError) else (exc.__cause__ if isinstance(exc.__cause__, InputError) else None)
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    face = manifest["physical"]["face_size_mm"]
    print(f"export of {manifest['source'].get('run_dir')}: face {face[0]:.1f} x {face[1]:.1f} mm at "
          f"{manifest['dpi']:g} dpi, "
          f"{len(manifest['stickers'])} sticker(s), paper {manifest['options']['paper']}; in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
