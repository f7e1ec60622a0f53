"""``python -m physattack.export run_dir=<run> [dpi=600] [paper=letter] [out=<folder>]``: the print bundle
of a finished (or interrupted) run, rebuilt from its ``config.yaml`` and ``patch.pt``.

Options not given keep the run's ``printer.export`` settings. Without ``out=`` the bundle goes to
``<run>/export`` or, when that is taken, the first free ``<run>/export-N``; an ``out=`` that holds files
is refused unless ``overwrite=true``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from physattack.cli import build
from physattack.cli.door import key_value_command, parse_options
from physattack.cli.rundir import ensure_writable, free_folder, holds_files, refuse_existing
from physattack.cli.runs import open_run
from physattack.errors import InputError

USAGE = ("python -m physattack.export run_dir=<run> [dpi=300] [paper=a4|letter|a3|tabloid|fit] [margin_mm=10] "
         "[overlap_mm=10] [bleed_mm=2] [out=<folder>] [overwrite=false]")


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


def export_run(cmd: ExportCommand) -> tuple[Path, dict]:
    """Write the print bundle of the run ``cmd.run_dir``; returns its folder and manifest."""
    if not cmd.run_dir:
        raise InputError(f"Give run_dir= the output folder of a finished `python -m physattack` run ({USAGE}).")
    folder = open_run(cmd.run_dir)
    cfg = folder.cfg
    scene, patch = folder.scene_and_patch()
    options = build.export_options(cfg, dpi=cmd.dpi, paper=cmd.paper, margin_mm=cmd.margin_mm,
                                   overlap_mm=cmd.overlap_mm, bleed_mm=cmd.bleed_mm)
    palette, colour_model = build.printer(cfg, "cpu")
    run = Path(cmd.run_dir)
    if cmd.out:
        refuse_existing([p for p in [Path(cmd.out).expanduser()] if holds_files(p)], cmd.overwrite)
    made = None if cmd.out else free_folder(run / "export")
    out = Path(cmd.out).expanduser() if cmd.out else made
    ensure_writable(out.parent, "out")
    try:
        manifest = build.export_patch(out, scene=scene, patch=patch, palette=palette, colour_model=colour_model,
                                      options=options, source={"run_dir": str(run)}, overwrite=cmd.overwrite)
    except BaseException:
        if made is not None and made.is_dir() and not any(made.iterdir()):
            made.rmdir()                          # a refused or interrupted export leaves no folder behind
        raise
    return out, manifest


@key_value_command(
    "physattack.export", "the print bundle of a finished run: the patch at true physical size on tiled pages "
    "(PDF and PNG at the given dpi), a cutting guide and a manifest.",
    [USAGE, "python -m physattack.export run_dir=outputs/<date>/<time> dpi=600 paper=letter"],
    ["run_dir: the run's folder (required)", "out: the bundle's folder (default <run>/export, then export-2, ...)",
     "overwrite: replace the files of an existing out= (default false)",
     "dpi, paper, margin_mm, overlap_mm, bleed_mm: default the run's printer.export"])
def main(argv: list[str]) -> int:
    if not argv:
        raise InputError(f"Give run_dir= the output folder of a finished run ({USAGE}).")
    out, manifest = export_run(parse_options(ExportCommand, argv, USAGE))
    face = manifest["physical"]["face_size_mm"]
    print(f"export of {manifest['source'].get('run_dir')}: face {face[0]:.1f} x {face[1]:.1f} mm at "
          f"{manifest['dpi']:g} dpi, {len(manifest['stickers'])} sticker(s), paper {manifest['options']['paper']}; in {out}")
    return 0
