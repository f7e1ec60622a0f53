"""The interface of an attack kind (see ``physattack.cli.kinds``) and what kinds are handed."""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from physattack.errors import InputError
from physattack.run_report import RunReport


@dataclass
class ProtocolInputs:
    """What a kind builds its held-out protocol from: the attacked victim and its names, the held-out
    pipeline (printed, when the run prints), the plain one (``(renderer, held-out bank, size)``), the
    patch and the device; ``prior``: the victims the run that ``init=`` names attacked (they shaped this
    patch too, so they are never held out)."""

    victim: object
    names: list[str]
    eval_pipeline: object
    rendering: tuple
    patch: object
    device: object
    prior: tuple[str, ...] = ()


@dataclass
class PerceptionInputs:
    """What a kind chooses its drive stack from: the attacked victim and its names, the run's protocol
    pool (``{name: Member}``: the drive panel), the run's crop (side in pixels, the sign's share of it),
    and the device."""

    victim: object
    names: list[str]
    members: dict | None
    crop: tuple[int, float]
    device: object


class AttackKind:
    """One kind of attack run. Subclasses override what differs; see the module."""

    name = "kind"

    def matches(self, attack, victim) -> bool:
        """Whether a run of ``attack`` on ``victim`` is of this kind."""
        raise NotImplementedError

    def views(self, sampler, grid, victim, size: tuple[int, int]) -> tuple:
        """The sampler, the quick grid and the image size the attack renders with (as configured)."""
        return sampler, grid, size

    def protocol(self, cfg: DictConfig, inputs: ProtocolInputs) -> tuple[object | None, list[str]]:
        """The held-out protocol the run ends with (built before the attack, never called by it), and the
        attacked victims' names as the protocol calls them; None when the kind has none."""
        return None, inputs.names

    def pool(self, cfg: DictConfig, attacked: dict[str, object], device, prior: tuple[str, ...] = ()) -> dict | None:
        """``{name: Member}``: the attacked victims and the held-out ones of ``evaluation``'s pool; those of ``prior``
        (the ``init=`` run's victims) count as attacked, and those of them the pool lacks are built as the ``init=``
        run's chain built them (``physattack.cli.runs.prior_victims``) and scored too."""
        return None

    def judge(self, parts, run):
        """``texture -> success`` on the run's quick grid, asked of the victim itself: what a query attack's
        success-vs-queries curve plots (never its guide); None when the kind has none."""
        return None

    def members(self, protocol) -> dict | None:
        """The protocol's ``{name: Member}`` (the drive panel), or None."""
        return None

    def report(self, done, setup) -> RunReport:
        """Evaluate the finished attack ``done`` (``physattack.evaluate.attacked.FinishedAttack``) as
        ``setup`` says, write its files (never ``metrics.json``: the command writes the report) and return
        the run report."""
        raise NotImplementedError

    def perception(self, node: DictConfig, inputs: PerceptionInputs):
        """The stack a car runs for this kind's drives (``physattack.drive.build.Perception``), or None when
        its runs are not judged on drives."""
        return None

    def frontier(self, done, setup, drive, settings, progress: bool = False) -> dict | None:
        """The area frontier of a finished sticker attack (``physattack.evaluate.area``), written and logged
        into ``setup``'s run folder and tracker; None when the kind has none."""
        return None

    def headline(self, report: RunReport) -> str:
        """The line the command ends with."""
        raise NotImplementedError

    def headline_rate(self, report: RunReport) -> float | None:
        """The rate the headline quotes (what a sweeper optimizes)."""
        return None

    def console(self, report: RunReport) -> list[str]:
        """The lines printed before the drive line and the headline."""
        return []

    def evaluate_run(self, cfg: DictConfig, run, out_dir) -> RunReport:
        """``python -m physattack.evaluate``: the held-out protocol of a finished run, written into ``out_dir``."""
        raise InputError(f"python -m physattack.evaluate re-runs the held-out protocol of classifier runs; a "
                         f"{self.name} run is judged at the end of its own attack run (its report.md).")


__all__ = ["AttackKind", "PerceptionInputs", "ProtocolInputs"]
