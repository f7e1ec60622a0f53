"""The drive report, the headline and W&B agree (issue 26): the canonical command's headline leads with the
drive verdict, and every drive figure it quotes is the one drive.json holds and the one the tracker was sent."""

from __future__ import annotations

import json

import pytest
from commands import TINY, with_warp

from physattack.cli import build
from physattack.cli.attack import compose, run_attack
from physattack.tracking import NullTracker


class Recorder(NullTracker):
    """What a run sends to W&B: its summary and its logged numbers."""

    def __init__(self):
        self.summaries: dict = {}
        self.logged: dict = {}

    def summary(self, metrics):
        self.summaries.update(metrics)

    def log(self, metrics, step=None):
        self.logged.update({k: v for k, v in metrics.items() if isinstance(v, (int, float))})


@pytest.mark.slow
def test_the_drive_report_the_headline_and_wandb_agree(tmp_path, monkeypatch):
    recorder = Recorder()
    monkeypatch.setattr(build, "tracker", lambda *args, **kwargs: recorder)
    cfg = compose("+scene=stop_sign", "attack=yield", *with_warp(TINY), "evaluation.settings.atlas=false")
    report = run_attack(cfg, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    drive = json.loads((tmp_path / "run" / "drive" / "drive.json").read_text())
    s = drive["attack_success_rate"]
    mean = drive["panel"]["held_out_mean"]["attack_success_rate"]
    families = drive["panel"]["held_out_families"]["attack_success_rate"]
    other = drive["panel"]["held_out_other_data"]["attack_success_rate"]

    head = metrics["headline"]
    assert head == report.headline == recorder.summaries["headline"]
    assert head.startswith("targeted -> yield, fitted to signnet: over 2 held-out drives (two-stage (detnet -> "
                           f"signnet)) the car runs the sign in {s['rate']:.1%} ({s['count']}/{s['n']}, 95% CI "
                           f"{s['ci95'][0]:.1%}-{s['ci95'][1]:.1%}) of those it stops in clean, the 10 held-out "
                           f"classifiers in {mean:.1%} on average ({families:.1%} for the 7 of families it never saw), "
                           f"the 2 trained on other images (warp) in {other:.1%}; per view: held-out success "), head

    assert metrics["drive"]["attack_success_rate"] == s
    sent = recorder.summaries
    assert sent["headline/drive_success_rate"] == s["rate"] == sent["drive/attack_success_rate"]
    assert recorder.summaries["drive/held_out_mean_attack_success_rate"] == mean
    assert recorder.summaries["drive/held_out_families_attack_success_rate"] == families
    assert recorder.summaries["drive/held_out_other_data_attack_success_rate"] == other
    for key in ("stop_rate_clean", "stop_rate_attacked"):
        assert recorder.summaries[f"drive/{key}"] == drive[key]["rate"] == metrics["drive"][key]["rate"]
    heldout = metrics["heldout"]["attack_success_rate"]             # the protocol's figure, not the quick grid's
    assert f"held-out success {heldout['rate']:.1%} (95% CI" in head and f"{heldout['count']}/{heldout['n']} " in head


def test_the_drive_verdict_quotes_each_attacked_member_and_the_held_out_means():
    from physattack.drive.report import drive_verdict

    def r(count, n):
        return {"rate": count / n if n else 0.0, "count": count, "n": n, "ci95": [0.1, 0.9]}

    result = {"drives": 18, "stack": "two-stage", "victims": {"detector": "detnet", "classifier": "the mean of a+b"},
              "attack_success_rate": r(12, 18),
              "panel": {"kind": "classifier",
                        "members": {"a": {"role": "attacked", "attack_success_rate": r(17, 18)},
                                    "b": {"role": "attacked", "attack_success_rate": r(9, 18)},
                                    "c": {"role": "held-out", "attack_success_rate": r(2, 18)}},
                        "held_out_mean": {"victims": ["c"], "attack_success_rate": 2 / 18},
                        "held_out_families": {"victims": [], "attack_success_rate": None}}}
    line = drive_verdict(result)
    assert line.startswith("over 18 held-out drives (two-stage (detnet -> the mean of a+b)) the car runs the sign in "
                           "66.7% (12/18, 95% CI 10.0%-90.0%) of those it stops in clean"), line
    assert "(each attacked member alone: a 94.4%, b 50.0%)" in line
    assert line.endswith("the 1 held-out classifier in 11.1% on average"), line
    assert "never saw" not in line
    assert "undefined" in drive_verdict({**result, "attack_success_rate": r(0, 0), "panel": {}})
