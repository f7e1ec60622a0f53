"""The drive report, the headline and W&B agree (issue 26): the canonical command's headline leads with the
drive verdict, and every drive figure it quotes is the one drive.json holds and the one the tracker was sent."""

from __future__ import annotations

import json

import pytest
from commands import TINY

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
    cfg = compose("+scene=stop_sign", "attack=yield", *TINY, "evaluation.settings.atlas=false")
    report = run_attack(cfg, tmp_path / "run")
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    drive = json.loads((tmp_path / "run" / "drive" / "drive.json").read_text())
    s = drive["attack_success_rate"]
    mean = drive["panel"]["held_out_mean"]["attack_success_rate"]
    families = drive["panel"]["held_out_families"]["attack_success_rate"]

    head = metrics["headline"]
    assert head == report.headline == recorder.summaries["headline"]
    assert head.startswith("targeted -> yield, fitted to signnet: over 2 held-out drives (two-stage (detnet -> "
                           f"signnet)) the car runs the sign in {s['rate']:.1%} ({s['count']}/{s['n']}, 95% CI "
                           f"{s['ci95'][0]:.1%}-{s['ci95'][1]:.1%}) of those it stops in clean, the 9 held-out "
                           f"classifiers in {mean:.1%} on average ({families:.1%} for the 7 of families it never saw); "
                           "per view: held-out success "), head

    assert metrics["drive"]["attack_success_rate"] == s
    assert recorder.summaries["headline/drive_success_rate"] == s["rate"] == recorder.summaries["drive/attack_success_rate"]
    assert recorder.summaries["drive/held_out_mean_attack_success_rate"] == mean
    assert recorder.summaries["drive/held_out_families_attack_success_rate"] == families
    for key in ("stop_rate_clean", "stop_rate_attacked"):
        assert recorder.summaries[f"drive/{key}"] == drive[key]["rate"] == metrics["drive"][key]["rate"]
    heldout = metrics["attack_success_rate"] if "attack_success_rate" in metrics else None
    assert heldout is not None and f"held-out success {heldout['rate']:.1%}" in head
