"""The red team's own drives that compare a run's starts (``attack.restart_judge.by=drives``;
``physattack.cli.attack.restart_validation``): the attacked members alone, over the training backgrounds."""

from __future__ import annotations

import pytest
import torch
from commands import TINY

from physattack.cli import build
from physattack.cli.attack import attack_and_report, compose, restart_validation
from physattack.cli.parts import attack_parts
from physattack.errors import InputError
from physattack.tracking import NullTracker

ONE_DRIVE = ["+attack.restart_judge.drives.speeds_kmh=[70]", "+attack.restart_judge.drives.lighting=[noon]",
             "+attack.restart_judge.drives.lane_offsets_m=[4.0]", "+attack.restart_judge.drives.fps=10.0"]
JUDGED = [*TINY, "victim=ensemble", "attack.steps=3", "attack.restarts=2", "attack.restart_steps=1",
          "attack.mask_search_steps=2", "attack.restart_judge.by=drives", "logger=none", *ONE_DRIVE]
CPU = torch.device("cpu")


def test_starts_are_judged_on_training_backgrounds_by_the_members_alone(tmp_path, monkeypatch):
    cfg = compose("+scene=stop_sign", "attack=yield", *JUDGED)
    run = build.run_config(cfg)
    parts = attack_parts(cfg, run, CPU)
    built = {}
    drive_evaluation = build.drive_evaluation

    def spy(node, perception, **kwargs):
        built.update(kwargs, drives=node.drives, panel=set(perception.members))
        return drive_evaluation(node, perception, **kwargs)
    monkeypatch.setattr(build, "drive_evaluation", spy)
    validation = restart_validation(cfg, parts, run, CPU)
    members = list(cfg.victim.members)
    assert built["backgrounds"] is parts.pipeline.backgrounds is not parts.eval_pipeline.backgrounds
    assert built["panel"] == set(members) and built["drives"].seed == 4000 and built["drives"].speeds_kmh == [70]
    held_out = {n: m.victim for n, m in parts.protocol.members.items() if m.role == "held-out"}
    calls = dict.fromkeys(held_out, 0)
    for name, net in held_out.items():
        net.register_forward_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    during_attack, run_attack = {}, parts.attack.run

    def spy_run(*args, **kwargs):
        result = run_attack(*args, **kwargs)
        during_attack.update(calls)
        return result
    parts.attack.run = spy_run
    report = attack_and_report(parts, run, tmp_path, NullTracker(), None, validation)
    assert during_attack == dict.fromkeys(held_out, 0), "a held-out victim was asked while the starts were judged"
    starts = report.summary["restarts"]
    assert len(starts) == 2 and sum(s["chosen"] for s in starts) == 1
    for start in starts:                 # the clean sign stops this car: each member's share is a real verdict
        assert list(start["drives"]) == members and all(0 <= v <= 1 for v in start["drives"].values())
        assert start["drives_weakest"] == min(start["drives"].values())
    assert all(calls[n] > 0 for n in held_out)              # (scored by the protocol after the attack)
    assert validation(parts.scene.texture) == dict.fromkeys(members, 0.0)       # the clean sign: every car stops


def test_the_judges_drives_refuse_a_key_the_drive_set_lacks_and_are_not_built_when_unused():
    cfg = compose("+scene=stop_sign", "attack=yield", *JUDGED, "+attack.restart_judge.drives.lanes=[6.0]")
    run = build.run_config(cfg)
    parts = attack_parts(cfg, run, CPU)
    with pytest.raises(InputError, match=r"attack\.restart_judge\.drives\.lanes is not a key"):
        restart_validation(cfg, parts, run, CPU)
    run.resume = "elsewhere"                     # a resumed run has chosen its start
    assert restart_validation(cfg, parts, run, CPU) is None
    running = compose("+scene=stop_sign", "attack=yield", *JUDGED, "attack.restart_judge.by=running")
    assert restart_validation(running, attack_parts(running, run, CPU), run, CPU) is None
