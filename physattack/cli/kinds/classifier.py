"""Classifier runs: a classifier (or an ensemble of them) made to read the sign as a target label, or as
anything but its own.

Its views are crops of the sign; its held-out protocol scores every classifier of
``evaluation.victims`` on the protocol grid (``physattack.evaluate.protocol``); its drives are read by a
two-stage stack (``drive.detector`` proposes boxes, the attacked classifier labels the crops, the
protocol's classifiers judged beside it).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from physattack.cli import build
from physattack.cli.kinds.base import AttackKind, PerceptionInputs, ProtocolInputs
from physattack.run_report import RunReport


class ClassifierKind(AttackKind):
    name = "classifier"

    def matches(self, attack, victim) -> bool:
        return not getattr(victim, "is_detector", False)

    def protocol(self, cfg: DictConfig, inputs: ProtocolInputs):
        from physattack.eot import ViewPipeline
        from physattack.evaluate.protocol import HeldOutRun

        attacked = dict(zip(inputs.names, getattr(inputs.victim, "members", [inputs.victim])))
        members = self.pool(cfg, attacked, inputs.device, inputs.prior)
        names = [n for n, m in members.items() if m.role == "attacked" and not (n in inputs.prior and n not in attacked)]
        renderer, eval_bank, size = inputs.rendering
        protocol = HeldOutRun(inputs.eval_pipeline, build.protocol_grid(cfg, len(eval_bank)),
                              build.make(cfg.evaluation.settings, _convert_="all"),
                              ViewPipeline(renderer, eval_bank, size), members=members, patch=inputs.patch)
        return protocol, names

    def pool(self, cfg: DictConfig, attacked: dict[str, object], device, prior: tuple[str, ...] = ()) -> dict:
        from physattack.cli.runs import pool_with_prior

        evaluation = cfg.get("evaluation") or {}
        pool = pool_with_prior(evaluation.get("victims"), attacked, prior, cfg.get("init"), detectors=False)
        return build.protocol_members(pool, attacked, device, evaluation.get("families"), evaluation.get("data"), prior)

    def members(self, protocol) -> dict | None:
        return protocol.members if protocol is not None else None

    def report(self, done, setup) -> RunReport:
        from physattack.evaluate.report import report_classifier_attack

        return report_classifier_attack(done, setup)

    def perception(self, node: DictConfig, inputs: PerceptionInputs):
        from physattack.drive.build import Perception

        detector, detector_name = build.drive_detector(node, inputs.device)
        name = "+".join(inputs.names)
        names = {"detector": detector_name,
                 "classifier": name if len(inputs.names) <= 1 else f"the mean probability of {name}"}
        return Perception(detector, inputs.victim, names, inputs.members, *inputs.crop)

    def frontier(self, done, setup, drive, settings, progress: bool = False) -> dict | None:
        """Stickers taken off the least useful first, each step scored on the quick grid by every victim of the
        protocol's panel and on the run's drives (``physattack.evaluate.area``)."""
        import torch

        from physattack.drive.build import frontier_judge
        from physattack.evaluate.area import FrontierInputs, area_frontier, classifier_view_rates, report_frontier

        members = self.members(setup.protocol)
        if not members:
            return None
        scene, patch, attack = done.scene, done.patch, done.attack
        attacked = [m.victim for m in members.values() if m.role == "attacked"]
        goal = [tuple(v.label_set(attack.target if attack.targeted else scene.class_name)) for v in attacked]
        params = setup.grid.params()
        rank = params[:min(settings.rank_views, len(params))]

        def score(texture):
            views = setup.pipeline(scene, texture, rank).images
            reads = [torch.softmax(v(views.to(next(v.parameters()).device)).float(), -1)[:, list(g)].sum(-1).cpu()
                     for v, g in zip(attacked, goal)]
            mean = torch.stack(reads).mean()
            return mean if attack.targeted else 1 - mean

        cell = (patch.mask_search or {}).get("cell_px") or max(4, round(patch.mask.shape[-1] * 45 / 750))
        judge = (frontier_judge(drive, scene.texture, build.camera_stage(setup.pipeline))
                 if drive is not None and settings.drives else None)
        rate_views = classifier_view_rates(scene, scene.texture, members, setup.pipeline, params,
                                           attack.target if attack.targeted else None)
        inputs = FrontierInputs(scene.texture, done.eval_texture, patch.mask, int(cell), float(scene.face_mask.sum()),
                                score, rate_views, len(params), judge)
        return report_frontier(area_frontier(inputs, settings, progress), setup.run_dir, setup.tracker)

    def headline(self, report: RunReport) -> str:
        """The drive verdict first (when the run judged drives), then the held-out protocol's per-view figures."""
        from physattack.drive.report import drive_verdict
        from physattack.evaluate.members import headline_figures, not_fitted_phrase

        fig = headline_figures(report.summary.get("victim_names") or [], report.heldout, report.summary)
        asr, clean, where = fig["success"], fig["clean_accuracy"], f"views of the {fig['source']}"
        who = self.fitted(report, fig)
        attack, true_label = report.summary["attack"], report.summary["true_label"]
        if asr["n"] == 0:
            return (f"{attack}: success is undefined: no held-out view of the clean {true_label} was classified "
                    f"correctly{' by ' + fig['quoted'] if fig['fitted_to'] else ''} (clean accuracy "
                    f"{clean['rate']:.1%} of {clean['n']} {where}), so the victim does not recognise this scene as it "
                    "is rendered; check the scene's texture and the victim.")
        drives = f"{drive_verdict(report.drive)}; per view: " if report.drive is not None else ""
        return (f"{attack}{', ' + who if who else ''}: {drives}held-out success {asr['rate']:.1%} (95% CI "
                f"{asr['ci95'][0]:.1%}-{asr['ci95'][1]:.1%}, {asr['count']}/{asr['n']} clean-correct {where}); clean "
                f"accuracy {clean['rate']:.1%} of {clean['n']}; {not_fitted_phrase(fig)}; patch covers "
                f"{report.summary['patch_area_fraction']:.1%} of the face.")

    def fitted(self, report: RunReport, fig: dict) -> str:
        """What the headline's figures were fitted to, in words (``headline_figures``' ``fig``), or nothing."""
        from physattack.evaluate.members import fitted_phrase

        return fitted_phrase(fig) if fig["fitted_to"] else ""

    def headline_rate(self, report: RunReport) -> float | None:
        from physattack.evaluate.members import headline_figures

        fig = headline_figures(report.summary.get("victim_names") or [], report.heldout, report.summary)
        return fig["success"]["rate"]

    def console(self, report: RunReport) -> list[str]:
        return [protocol_lines(report)] if report.heldout is not None else []

    def evaluate_run(self, cfg: DictConfig, run, out_dir) -> RunReport:
        """The held-out protocol of ``cfg.evaluation`` on the finished run ``run`` (``physattack.cli.runs.
        FinishedRun``), written into ``out_dir``."""
        from physattack.evaluate.protocol import HeldOutRun, JudgedPatch, RunFacts

        merged = OmegaConf.merge(run.cfg, {"evaluation": OmegaConf.to_container(cfg.evaluation, resolve=False)})
        s = run.folder.report.summary if run.folder.report is not None else {}
        summary = {k: s[k] for k in ("scene", "attack", "target_label", "true_label", "patch_type",
                                     "patch_area_fraction", "steps_done", "seed") if k in s}
        summary.setdefault("scene", run.scene.name)
        summary.setdefault("attack", f"targeted -> {run.target}" if run.target else "untargeted")
        summary["target_label"] = run.target
        summary["victim"] = run.cfg.victim.get("_target_", type(run.victim).__name__)
        summary["run_dir"] = str(run.run_dir)
        summary["victim_names"] = list(run.victim_names)
        device = build.device_of(cfg.device)
        members = self.pool(merged, dict(zip(run.victim_names, getattr(run.victim, "members", [run.victim]))),
                            device, run.folder.prior)
        protocol = HeldOutRun(run.eval_pipeline, build.protocol_grid(merged, len(run.eval_bank)),
                              build.make(merged.evaluation.settings, _convert_="all"), run.plain_pipeline(),
                              members=members, patch=run.patch)
        tracker = build.tracker(cfg, out_dir, OmegaConf.to_container(merged, resolve=True))
        try:
            sections = protocol.evaluate(JudgedPatch(run.scene, run.victim, run.adv_texture, summary),
                                         RunFacts(Path(out_dir), tracker, s.get("zero_gradient_steps"),
                                                  s.get("steps_done"), cfg.eval_batch_size))
        finally:
            tracker.finish()
        return RunReport(self.name, summary=summary).add(**sections)


def protocol_lines(report: RunReport) -> str:
    """The held-out protocol for the terminal: its rates, the victims attacked and held out, the
    placement-error headline (when there is a table), the report."""
    from physattack.evaluate.members import members_line
    from physattack.evaluate.placement import placement_line
    from physattack.evaluate.protocol import heldout_line

    lines = [heldout_line(report.heldout, report.summary.get("victim_names"))]
    if report.heldout.get("victims"):
        lines.append(members_line(report.heldout["victims"]))
    if report.placement:
        lines.append(placement_line(report.placement))
    return "\n".join(lines + [f"held-out report: {report.report}"])


__all__ = ["ClassifierKind", "protocol_lines"]
