"""Held-out victims (physattack/cli/build.py: protocol_members; the classifier kind's protocol): scored after every attack, never called
while the patch is optimized."""

from __future__ import annotations

import pytest
import torch
from commands import TINY, with_warp

from physattack.cli import build
from physattack.cli.attack import attack_and_report, compose
from physattack.cli.parts import attack_parts
from physattack.tracking import NullTracker

SMALL = [*with_warp(TINY), "attack.steps=2", "patch.shape=bars", "evaluation.settings.atlas=false",
         "evaluation.grid.camera_effects=[default]", "logger=none"]


@pytest.mark.parametrize("victim", ["signnet", "ensemble"])
def test_held_out_victims_are_scored_but_never_called_by_the_optimizer(victim, tmp_path):
    cfg = compose("+scene=stop_sign", "attack=yield", f"victim={victim}", *SMALL)
    attacked = list(cfg.victim.members) if victim == "ensemble" else ["signnet"]   # the pool's signnet is the attacked one
    held_out = [n for n in cfg.evaluation.victims if n not in attacked]
    assert {"signnet_seed1", "zoo_tinynet_e", "zoo_convnext_atto"} <= set(held_out)
    run = build.run_config(cfg)
    parts = attack_parts(cfg, run, torch.device("cpu"))
    members = parts.protocol.members
    roles = {n: m.role for n, m in members.items()}
    assert [n for n, r in roles.items() if r == "attacked"] == attacked
    assert [n for n, r in roles.items() if r == "held-out"] == held_out

    calls = {n: 0 for n in held_out}
    for name in held_out:
        net = members[name].victim
        net.register_forward_hook(lambda *_, name=name: calls.__setitem__(name, calls[name] + 1))
    during_attack = {}
    run_attack = parts.attack.run

    def spy_run(*args, **kwargs):
        result = run_attack(*args, **kwargs)
        during_attack.update(calls)
        return result
    parts.attack.run = spy_run
    metrics = attack_and_report(parts, run, tmp_path, NullTracker())
    assert during_attack == {n: 0 for n in held_out}, "a held-out victim was called during optimization"
    assert all(calls[n] > 0 for n in held_out), "a held-out victim was never scored"
    table = metrics["heldout"]["victims"]
    assert {n: table["members"][n]["role"] for n in held_out} == {n: "held-out" for n in held_out}
    other_data = [n for n in held_out if n in cfg.evaluation.data]          # trained on other images: own group
    assert other_data and table["held_out_other_data"]["victims"] == other_data
    renders = [n for n in held_out if n not in other_data]
    assert table["held_out_mean"]["victims"] == renders
    families = table["held_out_families"]            # siblings of an attacked family are not a held-out family
    attacked_families = {cfg.evaluation.families[n] for n in attacked}
    assert families["victims"] == [n for n in renders if cfg.evaluation.families[n] not in attacked_families]
    assert families["attacked_families"] == sorted(attacked_families)
    assert not set(families["families"]) & set(families["attacked_families"])
