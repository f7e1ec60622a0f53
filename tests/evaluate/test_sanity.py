"""Sanity flags (physattack/evaluate/sanity.py): each raised on a victim or run made to trip it."""

from __future__ import annotations

import torch
from torch import nn

from physattack.evaluate.sanity import SanityThresholds, sanity_flags


class Linear(nn.Module):
    def __init__(self, softmax=False, dropout=False):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.drop = nn.Dropout(0.5) if dropout else nn.Identity()
        self.softmax = softmax

    def forward(self, x):
        out = self.fc(self.drop(x.mean((2, 3))) * 10)
        return out.softmax(1) if self.softmax else out


def flags(victim, visible=None, correct=None, zero=0, steps=10):
    images = torch.rand(6, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = sanity_flags(victim=victim, probe_images=images,
                       patch_visible=visible if visible is not None else torch.full((40,), 0.05),
                       clean_correct=correct if correct is not None else torch.ones(40, dtype=torch.bool),
                       zero_grad_steps=zero, steps_done=steps, thresholds=SanityThresholds(), warn=False)
    return {f["name"]: f for f in out}


def test_a_healthy_run_raises_nothing():
    assert not any(f["raised"] for f in flags(Linear().eval()).values())


def test_each_flag_trips():
    assert flags(Linear(softmax=True).eval())["probabilities_not_logits"]["raised"]
    assert flags(Linear(dropout=True).train())["stochastic_victim"]["raised"]
    visible = torch.cat([torch.zeros(20), torch.full((20,), 0.05)])
    f = flags(Linear().eval(), visible=visible)["patch_invisible"]
    assert f["raised"] and f["value"] == 0.5
    assert flags(Linear().eval(), zero=5, steps=10)["zero_gradient"]["raised"]
    assert not flags(Linear().eval(), zero=1, steps=10)["zero_gradient"]["raised"]
    correct = torch.tensor([True] * 10 + [False] * 30)
    assert flags(Linear().eval(), correct=correct)["low_clean_accuracy"]["raised"]
    few = torch.tensor([True] * 12)                      # 100 % but only 12 views
    assert flags(Linear().eval(), correct=few)["low_clean_accuracy"]["raised"]
