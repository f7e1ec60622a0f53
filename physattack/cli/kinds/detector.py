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
        parts = {}
        if getattr(inputs.victim, "is_stack", False):        # a stack's detector ran on every image asked: never held
            parts = {inputs.victim.detector_name: inputs.victim.detector}   # out (reported inside the stack)
        members = self.pool(cfg, {**attacked, **parts}, inputs.device, inputs.prior)   # the init= run's detectors:
        return members, [n for n, m in members.items()                     # attacked, but not this run's victim
                         if m.role == "attacked" and n not in parts and not (n in inputs.prior and n not in attacked)]

    def pool(self, cfg: DictConfig, attacked: dict[str, object], device, prior: tuple[str, ...] = ()) -> dict:
        from physattack.cli.runs import pool_with_prior

        pool = pool_with_prior((cfg.get("evaluation") or {}).get("detectors"), attacked, prior, cfg.get("init"),
                               detectors=True)
        return build.protocol_members(pool, attacked, device, prior=prior)

    def members(self, protocol) -> dict | None:
        return protocol

    def report(self, done, setup) -> RunReport:
        from physattack.evaluate.detection import report_detection_attack

        report = report_detection_attack(done, setup)
        setup.export({"attack": report.summary["attack"]})
        return report

    def perception(self, node: DictConfig, inputs: PerceptionInputs):
        """The attacked detector alone, its pool's detectors judged beside it; or, when ``node.classifier``
        names a second stage, the detector's crops read by that classifier; a stack victim
        (``physattack.victims.stack``) reads them through its own two parts."""
        from physattack.drive.build import Perception

        stack = inputs.victim
        if getattr(stack, "is_stack", False):           # a stack asked as one model: its drives read through its parts
            return Perception(stack.detector, stack.classifier, {"detector": stack.detector_name,
                                                                 "classifier": stack.classifier_name},
                              None, stack.crop_px, stack.crop_frame)
        names, classifier, members = {"detector": "+".join(inputs.names)}, None, inputs.members
        second = node.get("classifier")
        if second is not None:
            classifier = build.victim(second.victim, inputs.device)
            names["classifier"] = str(second.get("name") or second.victim.get("_target_", "classifier"))
            members = None
        return Perception(inputs.victim, classifier, names, members, *inputs.crop)

    def frontier(self, done, setup, drive, settings, progress: bool = False) -> dict | None:
        """Stickers taken off the least useful first, each step scored on the held-out frames by every detector
        of the protocol's pool (the sign gone, over the frames it was found in clean) and on the run's drives
        (``physattack.evaluate.area``). A ``mislabel`` attack gets none: its success is two detections, not one."""
        import torch

        from physattack.drive.build import frontier_judge
        from physattack.evaluate.area import FrontierInputs, area_frontier, detector_view_rates, report_frontier
        from physattack.victims.detection import best_scores_on_boxes

        members = self.members(setup.protocol)
        scene, patch, attack = done.scene, done.patch, done.attack
        if not members or attack.targeted:
            return None
        attacked = [m.victim for m in members.values() if m.role == "attacked"]
        labels = [v.label_index(scene.class_name) for v in attacked]
        params = setup.grid.params()
        rank = params[:min(settings.rank_views, len(params))]

        def score(texture):
            views = setup.pipeline(scene, texture, rank)
            found = [best_scores_on_boxes(v(views.images).detections, views.boxes, k).float().cpu()
                     for v, k in zip(attacked, labels)]
            return 1 - torch.stack(found).mean()           # the detectors' mean score on the sign: lower is better

        cell = (patch.mask_search or {}).get("cell_px") or max(4, round(patch.mask.shape[-1] * 45 / 750))
        judge = (frontier_judge(drive, scene.texture, build.camera_stage(setup.pipeline))
                 if drive is not None and settings.drives else None)
        rate_views = detector_view_rates(scene, scene.texture, members, setup.pipeline, params,
                                         setup.run.eval_batch_size)
        inputs = FrontierInputs(scene.texture, done.eval_texture, patch.mask, int(cell), float(scene.face_mask.sum()),
                                score, rate_views, len(params), judge,
                                success="the sign gone, over each detector's frames it was found in clean")
        return report_frontier(area_frontier(inputs, settings, progress), setup.run_dir, setup.tracker)

    def headline(self, report: RunReport) -> str:
        """The drive verdict first (when the run judged drives), then the held-out frames' figures."""
        from physattack.drive.report import drive_verdict
        from physattack.evaluate.detection import headline

        line = headline(report.to_json(), self.fitted(report))
        if report.drive is None:
            return line
        attack, rest = line.split(": ", 1)
        return f"{attack}: {drive_verdict(report.drive)}; per frame: {rest}"

    def fitted(self, report: RunReport) -> str | None:
        """What the headline says the patch was fitted to, in place of the attacked detectors' names (None: those)."""
        return None

    def headline_rate(self, report: RunReport) -> float | None:
        return report.summary["attack_success_rate"]["rate"]

    def console(self, report: RunReport) -> list[str]:
        from physattack.evaluate.detectors import detectors_line

        if report.heldout is None or "detectors" not in report.heldout:
            return []
        return [detectors_line(report.heldout["detectors"]) + f"\nheld-out report: {report.report}"]


__all__ = ["DetectorKind"]
