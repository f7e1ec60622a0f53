"""``python -m physattack.evaluate run_dir=<run>``: the full held-out evaluation of a finished run,
written beside the run's own files (``<run>/evaluation``, then ``evaluation-2``, ...), with its own run
report (``metrics.json``)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from physattack.cli import build
from physattack.cli.door import HydraCommand
from physattack.cli.kinds import kind_of_run, named
from physattack.cli.runs import check_run_dir, open_run
from physattack.run_report import RunReport


def evaluate_run(cfg: DictConfig, out_dir: str | Path) -> RunReport:
    """Evaluate the run ``cfg.run_dir`` on the held-out protocol of ``cfg.evaluation``; write into ``out_dir``."""
    folder = open_run(cfg.run_dir)
    run = folder.rebuild(build.device_of(cfg.device))
    kind = kind_of_run(folder.report, run.cfg.attack, run.victim)
    report = kind.evaluate_run(cfg, run, out_dir)
    report.write(out_dir)
    return report


def task(cfg: DictConfig, out: Path) -> None:
    report = evaluate_run(cfg, out)
    for line in named(report.kind).console(report):
        print(line)


COMMAND = HydraCommand(
    module="physattack.evaluate", config_name="evaluate",
    summary="the full held-out evaluation of a finished attack run (protocol grid x camera effects x "
            "backgrounds, natural-failure atlas, sanity flags, report.md), written beside the run's files.",
    usage=("python -m physattack.evaluate run_dir=outputs/<date>/<time>",
           "python -m physattack.evaluate run_dir=<run> evaluation.grid.elevation_deg=[-10,0,15]"),
    task=task, output="beside", check=check_run_dir)

main = COMMAND.main
