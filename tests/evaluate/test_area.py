"""The area frontier (physattack/evaluate/area.py): the stickers are cut into cells that cover them exactly,
taken off the least useful first, each step scored per view by every panel victim; a frontier asked of a patch
without stickers is refused in one sentence naming the key."""

from __future__ import annotations

import pytest
import torch

from physattack.errors import InputError
from physattack.evaluate.area import (AreaSettings, FrontierInputs, area_figure, area_frontier, area_markdown,
                                      classifier_view_rates, sticker_cells, with_cells)
from physattack.evaluate.members import Member


def test_cells_cover_the_stickers_exactly():
    mask = torch.zeros(1, 40, 40)
    mask[0, 3:17, 5:30] = 1
    mask[0, 25:38, 20:22] = 1
    cells = sticker_cells(mask, 8)
    assert cells.dtype == torch.bool and len(cells) == 12 + 2          # 3 rows x 4 columns of cells, and 2
    assert torch.equal(cells.sum(0), mask[0].long()) and int(cells.sum(0).max()) == 1      # disjoint, all of it
    clean, adv = torch.zeros(3, 40, 40), torch.ones(3, 40, 40)
    keep = torch.zeros(len(cells), dtype=torch.bool)
    keep[0] = True
    out = with_cells(clean, adv, cells, keep)
    assert torch.equal(out[0] > 0, cells[0]) and float(with_cells(clean, adv, cells, ~keep & keep).sum()) == 0


def test_settings_refuse_what_cannot_be_pruned():
    class Paint:
        cut_as_stickers = False

    class Stickers:
        cut_as_stickers = True

    with pytest.raises(InputError, match=r"evaluation\.area\.enabled=true .* no stickers to take off"):
        AreaSettings(enabled=True).wanted(Paint())
    assert AreaSettings().wanted(Paint()) is False and AreaSettings().wanted(Stickers()) is True
    assert AreaSettings(enabled=False).wanted(Stickers()) is False
    with pytest.raises(InputError, match="evaluation.area.keep"):
        AreaSettings(keep=[0.5, 1.5])
    with pytest.raises(InputError, match="evaluation.area.enabled"):
        AreaSettings(enabled="sometimes")
    assert AreaSettings(keep=[0.25, 0.5, 0.5]).keep == [0.5, 0.25]


def test_the_least_useful_cells_go_first_and_every_step_is_scored(stop_scene, signnet):
    from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline
    from physattack.render import Renderer

    h, w = stop_scene.texture.shape[-2:]
    mask = torch.zeros(1, h, w)
    mask[0, h // 4:h // 2, w // 4:3 * w // 4] = 1
    mask = mask * stop_scene.face_mask.cpu()
    attacked = stop_scene.texture.clone()
    attacked[:, mask[0] > 0] = torch.tensor([0.1, 0.8, 0.2])[:, None]
    cell = w // 8
    cells = sticker_cells(mask, cell)
    useful = 2                                      # only this cell matters to the (planted) score

    def score(texture):
        return (texture - stop_scene.texture).abs()[:, cells[useful]].mean()

    grid = EvalGrid(azimuth_deg=[-20.0, 20.0], distance_m=[6.0], lighting=["noon"], background_count=2)
    members = {"signnet": Member(signnet, "attacked", "vgg")}
    params = grid.params()
    rate_views = classifier_view_rates(stop_scene, stop_scene.texture, members,
                                       ViewPipeline(Renderer(), BackgroundBank(2, seed=1000), (64, 64)), params, "yield")
    inputs = FrontierInputs(stop_scene.texture, attacked, mask, cell, float(stop_scene.face_mask.sum()), score,
                            rate_views, len(params))
    frontier = area_frontier(inputs, AreaSettings(keep=[0.5, 0.1]))
    steps = frontier["steps"]
    assert [s["keep"] for s in steps] == [1.0, 0.5, 0.1] and frontier["cells"] == len(cells)
    assert steps[0]["cells"] == len(cells) > steps[1]["cells"] > steps[2]["cells"] >= 1
    areas = [s["area_fraction"] for s in steps]
    assert areas[0] == pytest.approx(float(mask.sum() / stop_scene.face_mask.sum())) and areas[0] > areas[1] > areas[2]
    assert areas[2] < 0.5 * areas[0]
    # the planted useful cell is the last one standing
    texture_last = with_cells(stop_scene.texture, attacked, cells, torch.zeros(len(cells), dtype=torch.bool))
    assert float(score(texture_last)) == 0
    for s in steps:
        v = s["views"]["signnet"]
        assert v["role"] == "attacked" and 0 <= v["rate"] <= 1 and v["n"] <= 2
        assert s["views_attacked_min"] == v["rate"] and s["views_held_out_mean"] is None
    lines = area_markdown(frontier)
    assert lines[0] == "## Area frontier" and sum(line.startswith("| ") for line in lines) == 1 + len(steps)
    assert area_figure(frontier) is not None


def test_the_last_cell_kept_is_the_useful_one(stop_scene, signnet):
    """The ranking itself: with one useful cell, every step keeps it."""
    from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline
    from physattack.evaluate import area as area_module
    from physattack.render import Renderer

    h, w = stop_scene.texture.shape[-2:]
    mask = torch.zeros(1, h, w)
    mask[0, h // 3:h // 2, w // 4:3 * w // 4] = 1
    mask = mask * stop_scene.face_mask.cpu()
    attacked = torch.zeros_like(stop_scene.texture)
    cells = sticker_cells(mask, w // 8)
    useful = len(cells) - 1
    seen = []
    original = area_module.with_cells

    def spy(clean, adv, c, keep):
        seen.append(keep.clone())
        return original(clean, adv, c, keep)

    def score(texture):
        return (texture - stop_scene.texture).abs()[:, cells[useful]].mean()

    grid = EvalGrid(azimuth_deg=[0.0], distance_m=[6.0], lighting=["noon"], background_count=1)
    rate_views = classifier_view_rates(stop_scene, stop_scene.texture, {"signnet": Member(signnet, "attacked", "vgg")},
                                       ViewPipeline(Renderer(), BackgroundBank(1, seed=1000), (48, 48)), grid.params(),
                                       "yield")
    inputs = FrontierInputs(stop_scene.texture, attacked, mask, w // 8, float(stop_scene.face_mask.sum()), score,
                            rate_views, 1)
    area_module.with_cells = spy
    try:
        area_frontier(inputs, AreaSettings(keep=[0.5, 0.15]))
    finally:
        area_module.with_cells = original
    steps = seen[1 + len(cells):]                   # after the ranking: one texture per step
    assert len(steps) == 3 and all(bool(k[useful]) for k in steps) and int(steps[-1].sum()) < int(steps[0].sum())


def test_an_ensembles_frontier_shows_its_lowest_member_over_drives():
    """A car runs one member: where the stack's figure is the members' reading, the lowest member's is drawn too."""
    rate = {"rate": 1.0, "count": 2, "n": 2}
    steps = [{"keep": k, "cells": c, "area_fraction": a, "views_attacked_min": 0.5, "views_held_out_mean": 0.4,
              "views_held_out_families": None,
              "drives": {"attack_success_rate": rate, "attacked_min": m, "held_out_mean": 0.0, "held_out_families": None}}
             for k, c, a, m in ((1.0, 4, 0.2, 0.0), (0.5, 2, 0.1, 0.0))]
    frontier = {"cells": 4, "cell_px": 8, "ranked_by": "occlusion", "views": 2, "steps": steps}
    text = "\n".join(area_markdown(frontier))
    assert "| per drive: the stack | lowest attacked member | held-out mean |" in text
    assert "| 20.0 % | 4 | 50.0 % | 40.0 % | – | 100.0 % (2/2) | 0.0 % | 0.0 % | – |" in text
    labels = [line.get_label() for line in area_figure(frontier).axes[0].get_lines()]
    assert "per drive, attacked (lowest member)" in labels
