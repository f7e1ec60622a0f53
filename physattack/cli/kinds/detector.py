"""Detector runs: a detector (or an ensemble of them) made to miss the sign (``attack=hide``) or to call it
something else (``attack=mislabel``).

Its views are context frames at the detector's input size (``physattack.eot.frames``); after the attack
every detector of ``evaluation.detectors`` is scored on the same frames (``physattack.evaluate.
detectors``); its drives are read by the attacked detector alone (or a two-stage stack when
``drive.classifier`` names a second stage), the pool's detectors judged beside it.
"""

from __future__ import annotations

from omegaconf import DictConfig

from physattack.cli import build
from physattack.cli.kinds.base import AttackKind, PerceptionInputs, ProtocolInputs
from physattack.run_report import RunReport


class DetectorKind(AttackKind):
    name = "detector"

    def matches(self, attack, victim) -> bool:
        return bool(getattr(victim, "is_detector", False))

    def views(self, sampler, grid, victim, size: tuple[int, int]) -> tuple:
        """Context frames (``FrameSampler``, ``FrameGrid``) at the detector's own input size."""
        from physattack.drive.approach import ApproachSampler
        from physattack.eot.frames import FrameGrid, FrameSampler

        if isinstance(sampler, ApproachSampler):     # windows read as the stack's detector reads them: its tiles
            return sampler.for_detector(victim.input_size), FrameGrid(grid), (victim.input_size, victim.input_size)
        return FrameSampler(sampler), FrameGrid(grid), (victim.input_size, victim.input_size)

    def protocol(self, cfg: DictConfig, inputs: ProtocolInputs):
        attacked = dict(zip(inputs.names, getattr(inputs.victim, "members", [inputs.victim])))
        members = self.pool(cfg, attacked, inputs.device)
        return members, [n for n, m in members.items() if m.role == "attacked"]

    def pool(self, cfg: DictConfig, attacked: dict[str, object], device) -> dict:
        return build.protocol_members((cfg.get("evaluation") or {}).get("detectors"), attacked, device)

    def members(self, protocol) -> dict | None:
        return protocol

    def report(self, done, setup) -> RunReport:
        from physattack.evaluate.detection import report_detection_attack

        report = report_detection_attack(done, setup)
        setup.export({"attack": report.summary["attack"]})
        return report

    def perception(self, node: DictConfig, inputs: PerceptionInputs):
        """The attacked detector alone, its pool's detectors judged beside it; or, when ``node.classifier``
        names a second stage, the detector's crops read by that classifier."""
        from physattack.drive.build import Perception

        names, classifier, members = {"detector": "+".join(inputs.names)}, None, inputs.members
        second = node.get("classifier")
        if second is not None:
            classifier = build.victim(second.victim, inputs.device)
            names["classifier"] = str(second.get("name") or second.victim.get("_target_", "classifier"))
            members = None
        return Perception(inputs.victim, classifier, names, members, *inputs.crop)

    def headline(self, report: RunReport) -> str:
        """The drive verdict first (when the run judged drives), then the held-out frames' figures."""
        from physattack.drive.report import drive_verdict
        from physattack.evaluate.detection import headline

        line = headline(report.to_json())
        if report.drive is None:
            return line
        attack, rest = line.split(": ", 1)
        return f"{attack}: {drive_verdict(report.drive)}; per frame: {rest}"

    def headline_rate(self, report: RunReport) -> float | None:
        return report.summary["attack_success_rate"]["rate"]

    def console(self, report: RunReport) -> list[str]:
        from physattack.evaluate.detectors import detectors_line

        if report.heldout is None or "detectors" not in report.heldout:
            return []
        return [detectors_line(report.heldout["detectors"]) + f"\nheld-out report: {report.report}"]


__all__ = ["DetectorKind"]
