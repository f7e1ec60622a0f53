"""The held-out protocol (physattack/evaluate/heldout.py, protocol.py) and the grid's new axes."""

from __future__ import annotations


import pytest
import torch

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline
from physattack.eot.grid import CAMERA_EFFECT_PRESETS
from physattack.errors import InputError
from physattack.evaluate.heldout import HeldOutResult, free_successes, heldout_metrics, worst_views
from physattack.render import Renderer


def result(clean, adv, region=None, target=(1,)):
    conds = [{"azimuth_deg": float(a), "distance_m": 5.0, "lighting": "noon", "effects": "default", "background": 0,
              "elevation_deg": -5.0} for a in range(len(clean))]
    onehot = lambda t: torch.nn.functional.one_hot(torch.tensor(t), 3).float() * 0.9 + 0.1 / 3  # noqa: E731
    n = len(clean)
    return HeldOutResult(conds, onehot(clean), onehot(adv), torch.ones(n),
                         torch.tensor(region) if region is not None else torch.zeros(n, dtype=torch.bool), (0,), target)


def test_rates_tables_and_free_successes():
    r = result(clean=[0, 0, 0, 2, 0, 0], adv=[1, 1, 0, 1, 1, 2], region=[False, True, False, False, False, False])
    m = heldout_metrics(r)
    assert (m["attack_success_rate"]["count"], m["attack_success_rate"]["n"]) == (3, 5)
    assert m["attack_success_rate_unconditional"]["count"] == 4
    rows = m["per_condition"]["azimuth_deg"]
    assert len(rows) == 6 and rows[3]["clean_accuracy"]["count"] == 0 and rows[3]["attack_success_rate"]["n"] == 0
    free = free_successes(r)
    assert free["free_clean_wrong"] == 1 and free["free_atlas_region"] == 1
    assert (free["attack_success_rate_outside_atlas"]["count"], free["attack_success_rate_outside_atlas"]["n"]) == (2, 4)
    picks = worst_views(r, 2)
    assert 3 not in picks["victim"] and picks["attack"][0] in (2, 5)


def test_grid_axes_multiply_and_replay():
    base = EvalGrid(azimuth_deg=[-30.0, 30.0], distance_m=[5.0], lighting=["noon"], background_count=8)
    assert [{k: c[k] for k in ("azimuth_deg", "distance_m", "lighting")} for c in base.conditions()] == \
        [{"azimuth_deg": -30.0, "distance_m": 5.0, "lighting": "noon"}, {"azimuth_deg": 30.0, "distance_m": 5.0, "lighting": "noon"}]
    g = EvalGrid(azimuth_deg=[-30.0, 30.0], distance_m=[5.0], lighting=["noon"], elevation_deg=[0.0, 15.0],
                 camera_effects=["default", "dim", "jpeg"], backgrounds_per_view=2, background_count=8)
    assert len(g) == 2 * 2 * 3 * 2 == len(g.params()) == len(g.conditions())
    p, conds = g.params(), g.conditions()
    for i, c in enumerate(conds):
        assert float(p.elevation_deg[i]) == c["elevation_deg"]
        preset = CAMERA_EFFECT_PRESETS[c["effects"]]
        assert float(p.exposure[i]) == pytest.approx(preset.get("exposure", 1.0))
        assert float(p.jpeg_quality[i]) == preset.get("jpeg_quality", 100.0)
    same = [i for i, c in enumerate(conds) if c["effects"] == "default" and c["elevation_deg"] == 0.0 and c["azimuth_deg"] == -30.0]
    assert len(same) == 2 and p.background_index[same[0]] != p.background_index[same[1]]
    with pytest.raises(InputError, match="fog"):
        EvalGrid(camera_effects=["fog"])


def test_evaluate_attack_writes_report_plots_and_returns_the_sections(tmp_path, stop_scene, signnet):
    from physattack.evaluate.protocol import HeldOutRun, HeldOutSettings, JudgedPatch, RunFacts, evaluate_attack

    adv = stop_scene.texture.clone()
    adv[:, 180:330, 60:450] = torch.tensor([0.1, 0.6, 0.2])[:, None, None]        # a big green bar
    grid = EvalGrid(azimuth_deg=[-30.0, 30.0], distance_m=[5.0, 12.0], lighting=["noon"],
                    camera_effects=["default", "dim"], background_count=6)
    pipe = ViewPipeline(Renderer(), BackgroundBank(6, seed=1000), (64, 64))
    protocol = HeldOutRun(pipe, grid, HeldOutSettings(atlas_per_axis=6, atlas_bins=3))
    m = evaluate_attack(protocol, JudgedPatch(stop_scene, signnet, adv, {"scene": "stop_sign", "attack": "t",
                                                                        "target_label": "yield"}),
                        RunFacts(tmp_path, zero_grad_steps=0, steps_done=5, quiet=True))
    assert not (tmp_path / "metrics.json").exists()          # the command writes the run report, once
    assert m["heldout"]["views"] == 8 and len(m["heldout"]["per_view"]) == 8
    assert set(m["heldout"]["per_condition"]) >= {"azimuth_deg", "distance_m", "effects"}
    assert {f["name"] for f in m["sanity"]} == {"patch_invisible", "zero_gradient", "stochastic_victim",
                                                  "probabilities_not_logits", "low_clean_accuracy"}
    assert m["atlas"]["samples"] == 60 and m["heldout"]["target_label_set"] == [1]
    assert m["report"] == str(tmp_path / "report.md")
    for name in ("report.md", "heldout_azimuth_distance.png", "heldout_lighting_distance.png",
                 "heldout_conditions.png", "worst_views.png", "atlas_bins.png"):
        assert (tmp_path / name).is_file(), name
    report = (tmp_path / "report.md").read_text()
    assert "clean accuracy" in report and "Wilson" in report and "Sanity flags" in report
