"""Attack kinds in one table (physattack/cli/kinds): a new kind is one module and its config. A toy kind —
a "brightness meter" victim made to read the stop sign as bright — runs through the real command path
(``run_attack``): the table picks it, its report is the run report, its headline is the run's, and no
other part of the command had to learn about it."""

from __future__ import annotations

import json

import pytest
import torch
from omegaconf import open_dict

from physattack.cli import kinds
from physattack.cli.attack import compose, run_attack
from physattack.cli.kinds.base import AttackKind
from physattack.run_report import RunReport
from physattack.victims.base import Classifier


class BrightnessMeter(Classifier):
    """Reads a view as ``yield`` (bright) or ``stop`` (dark) from its mean brightness; differentiable."""

    labels = ("stop", "yield")
    is_brightness_meter = True

    def __init__(self, weights=None, threshold: float = 0.6):
        super().__init__()
        self.threshold = threshold

    def logits(self, images):
        m = images.mean((1, 2, 3))
        return torch.stack([20 * (self.threshold - m), 20 * (m - self.threshold)], 1)


class BrightnessKind(AttackKind):
    """The toy kind: judged by the mean brightness of the attacked face, not by views."""

    name = "brightness"

    def matches(self, attack, victim) -> bool:
        return getattr(victim, "is_brightness_meter", False)

    def report(self, done, setup) -> RunReport:
        face = done.scene.face_mask[0] > 0.5
        before, after = float(done.scene.texture[:, face].mean()), float(done.eval_texture[:, face].mean())
        (setup.run_dir / "brightness.txt").write_text(f"{before:.4f} -> {after:.4f}\n")
        return RunReport(self.name, summary={"scene": done.scene.name, "attack": "brighter", "before": before,
                                             "after": after, "steps_done": done.result.steps_done})

    def headline(self, report: RunReport) -> str:
        return f"brighter: the face's mean brightness {report.summary['before']:.3f} -> {report.summary['after']:.3f}."

    def headline_rate(self, report: RunReport) -> float:
        return report.summary["after"]


@pytest.fixture
def toy_kind():
    kind = kinds.register(BrightnessKind(), first=True)
    yield kind
    kinds.unregister(kind.name)


def test_a_toy_kind_runs_through_the_command_with_nothing_else_changed(toy_kind, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "disabled")
    cfg = compose("+scene=stop_sign", "attack=yield", "eot=default", "attack.steps=3", "attack.batch_size=4",
                  "attack.checkpoint_every=0", "attack.mask_search_steps=0", "patch.shape=bars", "progress=false",
                  "logger=none", "+drive=none", f"victim._target_={__name__}.BrightnessMeter")
    with open_dict(cfg):
        cfg.victim.threshold = 0.6
    assert kinds.kind_for(object(), BrightnessMeter()) is toy_kind
    report = run_attack(cfg, tmp_path / "run")
    written = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert written["kind"] == "brightness" and written["schema_version"] == 2
    assert written["headline"] == report.headline == toy_kind.headline(report)
    assert written["after"] > written["before"]          # the attack made the face brighter, as its victim wanted
    assert (tmp_path / "run" / "brightness.txt").is_file() and (tmp_path / "run" / "checkpoint.pt").is_file()
    assert "heldout" not in written and "drive" not in written      # no protocol, no drives: the kind has none


def test_the_table_is_asked_in_order_and_names_every_kind(toy_kind):
    from physattack.cli.kinds import named

    assert [k.name for k in kinds.KINDS][:1] == ["brightness"]
    assert {"classifier", "detector", "reprogram"} <= {k.name for k in kinds.KINDS}
    assert named("detector").matches(None, type("D", (), {"is_detector": True})())
    with pytest.raises(ValueError, match="registered already"):
        kinds.register(BrightnessKind())
    with pytest.raises(Exception, match="does not know"):
        named("segmentation")
