"""``python -m physattack.calibrate chart`` and ``python -m physattack.calibrate fit photo.jpg``.

``chart [out=calibration_chart] [palette=<file>] [paper=a4|letter] [dpi=300]`` writes the printable
chart (``.pdf`` at true scale, ``.png``, and the layout ``.json``). ``fit <photo> [layout=<chart .json>]
[palette=<file>] [degree=2] [white_balance=true] [out=<model .json>]`` finds the chart in the photo and
writes the fitted colour model (use it with ``printer.model=<file>``) and ``<out>.rectified.png`` showing
where each patch was read. Outputs never replace a file: default names move on to a free name, and a
named ``out=`` that exists is refused unless ``overwrite=true``. The work is in
``physattack.printing.calibrate``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from physattack.atomic import save_json, save_rgb_png
from physattack.cli.rundir import free_stem, refuse_existing
from physattack.cli.door import key_value_command, parse_options
from physattack.errors import InputError
from physattack.printing import load_palette
from physattack.printing.calibrate import ChartLayout, annotate_reading, chart_layout, fit_photo, write_chart

USAGE = ("python -m physattack.calibrate chart [out=calibration_chart] [palette=<file>] [paper=a4|letter] "
         "[dpi=300] [overwrite=false]",
         "python -m physattack.calibrate fit <photo> [layout=<chart .json>] [palette=<file>] [degree=1|2|3] "
         "[white_balance=true] [out=<model .json>] [overwrite=false]")
SEE_HELP = "see python -m physattack.calibrate --help"


@dataclass
class ChartCommand:
    out: str | None = None
    palette: str | None = None
    paper: str = "a4"
    dpi: float = 300.0
    overwrite: bool = False


@dataclass
class FitCommand:
    layout: str | None = None
    palette: str | None = None
    degree: int = 2
    white_balance: bool = True
    out: str | None = None
    overwrite: bool = False


def chart(cmd: ChartCommand) -> dict[str, Path]:
    suffixes = (".pdf", ".png", ".json")
    if cmd.out:
        stem = Path(cmd.out)
        stem = stem.with_name(stem.name[:-len(stem.suffix)]) if stem.suffix in suffixes else stem
        refuse_existing([stem.with_name(stem.name + s) for s in suffixes], cmd.overwrite)
    else:
        stem = free_stem(Path("calibration_chart"), suffixes)
    return write_chart(stem, chart_layout(load_palette(cmd.palette), cmd.paper), cmd.dpi)


def fit(photo: str, cmd: FitCommand) -> tuple[Path, dict]:
    layout = ChartLayout.load(cmd.layout) if cmd.layout else chart_layout(load_palette(cmd.palette))
    model, reading, stats = fit_photo(photo, layout, cmd.degree, cmd.white_balance)
    photo_path = Path(photo)
    if cmd.out:
        out = Path(cmd.out)
        refuse_existing([out, out.with_suffix(".rectified.png")], cmd.overwrite)
    else:
        stem = free_stem(photo_path.with_name(photo_path.stem + ".colour_model"), (".json", ".rectified.png"))
        out = stem.with_name(stem.name + ".json")
    save_json(out, model.to_dict())
    save_rgb_png(out.with_suffix(".rectified.png"), annotate_reading(reading, layout))
    return out, stats


@key_value_command(
    "physattack.calibrate", "measure your printer and camera: print a colour chart, photograph it, and fit the "
    "colour model the attack prints its patch through (printer.model=<file>).", USAGE,
    ["chart: out, palette, paper (a4|letter), dpi, overwrite",
     "fit <photo>: layout (the chart's .json), palette, degree (1-3), white_balance, out, overwrite"])
def main(argv: list[str]) -> int:
    if argv[:1] == ["chart"]:
        paths = chart(parse_options(ChartCommand, argv[1:], SEE_HELP))
        print(f"calibration chart: {paths['pdf']} (print at 100 %), {paths['png']}, layout {paths['json']}")
    elif argv[:1] == ["fit"] and len(argv) >= 2 and "=" not in argv[1]:
        out, stats = fit(argv[1], parse_options(FitCommand, argv[2:], SEE_HELP))
        err = ", ".join(f"{v:.2f}" for v in stats["residual_mean_abs_255"])
        print(f"colour model ({stats['patches']} patches, degree {stats['degree']}, mean residual R G B = {err} "
              f"/255) in {out}; use it with printer.model={out}")
    else:
        raise InputError("Say what to do: `chart` (print a colour chart) or `fit <photo>` (fit the colour model "
                         "to a photo of the printed chart); --help lists the options.")
    return 0
