"""The placement-error table of the held-out protocol (physattack/evaluate/placement.py, protocol.py)."""

from __future__ import annotations


import pytest
import torch

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline
from physattack.errors import InputError
from physattack.evaluate.placement import PlacementSettings, Scored, drop_words, placement_line, placement_table
from physattack.evaluate.grid import Comparison
from physattack.evaluate.protocol import HeldOutRun, HeldOutSettings, JudgedPatch, RunFacts, evaluate_attack
from physattack.render import Renderer


class Counting:
    """A pipeline that counts the views it renders."""

    def __init__(self, pipeline):
        self.pipeline, self.views = pipeline, 0

    def __call__(self, scene, texture, params, **kw):
        self.views += len(params)
        return self.pipeline(scene, texture, params, **kw)


@pytest.fixture(scope="module")
def setup(stop_scene):
    mask = torch.zeros(1, 512, 512)
    mask[:, 180:250, 60:250] = 1                                   # two green stickers across STOP
    mask[:, 260:330, 262:450] = 1
    mask *= stop_scene.face_mask
    adv = stop_scene.texture * (1 - mask) + torch.tensor([0.1, 0.6, 0.2])[:, None, None] * mask
    grid = EvalGrid(azimuth_deg=[-30.0, 0.0, 30.0], distance_m=[5.0, 12.0], lighting=["noon"], background_count=6)
    pipe = ViewPipeline(Renderer(), BackgroundBank(6, seed=1000), (64, 64))
    return {"mask": mask, "adv": adv, "grid": grid, "pipe": pipe}


def test_settings_are_checked_with_one_sentence_naming_the_key():
    with pytest.raises(InputError, match=r"^evaluation.settings.placement.shift_mm must be"):
        PlacementSettings(shift_mm=[0, -2])
    with pytest.raises(InputError, match=r"^evaluation.settings.placement.headline must be .*got \[5, 4\]\.$"):
        PlacementSettings(headline=[5, 4])
    with pytest.raises(InputError, match=r"^evaluation.settings.placement.views must be an integer"):
        PlacementSettings(views=-1)
    with pytest.raises(InputError, match=r"^evaluation.settings.placement.scale must be"):
        PlacementSettings(scale=2)
    with pytest.raises(InputError, match=r"^evaluation.settings.placement.viwes is not a setting"):
        HeldOutSettings(placement={"viwes": 3})
    assert HeldOutSettings(placement={"views": 0, "draws": 2}).placement.draws == 2
    assert HeldOutSettings(placement=None).placement.enabled is False


def test_a_cell_without_error_is_the_protocol_and_costs_no_render(stop_scene, signnet, setup):
    params = setup["grid"].params()
    with torch.no_grad():
        images = setup["pipe"](stop_scene, setup["adv"], params).images
        clean = setup["pipe"](stop_scene, stop_scene.texture, params).images
        adv_pred, clean_pred = signnet(images).argmax(1), signnet(clean).argmax(1)
    yield_set, stop_set = tuple(signnet.label_set("yield")), tuple(signnet.label_set("stop"))
    scored = {"signnet": Scored(signnet, stop_set, yield_set, torch.isin(clean_pred, torch.tensor(stop_set)),
                                torch.isin(adv_pred, torch.tensor(yield_set)))}
    counting = Counting(setup["pipe"])
    settings = PlacementSettings(shift_mm=[0.0, 10.0], rotation_deg=[0.0, 6.0], views=0, headline=[10, 6])
    table = placement_table(Comparison(stop_scene, stop_scene.texture, setup["adv"], counting), setup["mask"], params,
                            scored, settings)
    n = int(scored["signnet"].clean_correct.sum())
    assert counting.views == 3 * table["views_scored"] and table["views"] == table["of"] == len(params)
    cells = {(c["shift_mm"], c["rotation_deg"]): c for c in table["victims"]["signnet"]["cells"]}
    assert set(cells) == {(0.0, 0.0), (0.0, 6.0), (10.0, 0.0), (10.0, 6.0)} and table["stickers"] == 2
    assert cells[(0.0, 0.0)]["attack_success_rate"] == table["victims"]["signnet"]["reference"]
    assert cells[(0.0, 0.0)]["attack_success_rate"]["n"] == n and cells[(0.0, 0.0)]["drop_points"] == 0
    assert table["headline"]["shift_mm"] == 10 and table["headline"]["placed"] == cells[(10.0, 6.0)]["attack_success_rate"]
    assert "10 mm / ±6°" in placement_line(table)
    assert drop_words(7.5) == "7.5 points lost" and drop_words(-1.25) == "1.2 points gained"
    # the same cell with a 1e-3 mm shift renders, and reads what the design reads
    near = placement_table(Comparison(stop_scene, stop_scene.texture, setup["adv"], setup["pipe"]), setup["mask"], params,
                            scored, PlacementSettings(shift_mm=[0.001], rotation_deg=[0.0], views=0, headline=[0.001, 0]))
    assert near["victims"]["signnet"]["cells"][0]["attack_success_rate"]["count"] == \
        table["victims"]["signnet"]["reference"]["count"]


class Constant(torch.nn.Module):
    """Reads every view as label ``index`` of ``labels``, whatever the stickers."""

    def __init__(self, labels, index: int):
        super().__init__()
        self.labels, self.index = labels, index

    def forward(self, images):
        out = torch.zeros(images.shape[0], len(self.labels))
        out[:, self.index] = 5.0
        return out


def test_without_a_named_victim_the_headline_is_the_one_placement_error_hurts_most(stop_scene, signnet, setup):
    """An ensemble names no victim of its own (a car runs one model, not the members' mean): the headline
    is then the scored victim with the lowest success in the headline cell."""
    params = setup["grid"].params()
    yield_set, stop_set = tuple(signnet.label_set("yield")), tuple(signnet.label_set("stop"))
    every = torch.ones(len(params), dtype=torch.bool)
    scored = {"fooled": Scored(Constant(signnet.labels, yield_set[0]), stop_set, yield_set, every, every),
              "stubborn": Scored(Constant(signnet.labels, stop_set[0]), stop_set, yield_set, every, every)}
    settings = PlacementSettings(shift_mm=[0.0, 5.0], rotation_deg=[0.0], views=2, headline=[5, 0])
    table = placement_table(Comparison(stop_scene, stop_scene.texture, setup["adv"], setup["pipe"]), setup["mask"], params,
                            scored, settings)
    assert table["headline"]["victim"] == "stubborn" and table["headline"]["placed"]["count"] == 0
    named = placement_table(Comparison(stop_scene, stop_scene.texture, setup["adv"], setup["pipe"]), setup["mask"], params,
                            scored, settings, headline_victim="fooled")
    assert named["headline"]["victim"] == "fooled" and named["headline"]["placed"]["rate"] == 1.0


def test_the_table_lands_in_the_sections_report_and_a_heatmap(tmp_path, stop_scene, signnet, setup):
    from types import SimpleNamespace

    stickers = SimpleNamespace(mask=setup["mask"], cut_as_stickers=True)
    settings = HeldOutSettings(atlas=False, placement=PlacementSettings(shift_mm=[0, 5], rotation_deg=[0, 6], views=4))
    judged = JudgedPatch(stop_scene, signnet, setup["adv"], {"scene": "stop_sign", "attack": "t", "target_label": "yield"})
    m = evaluate_attack(HeldOutRun(setup["pipe"], setup["grid"], settings, patch=stickers), judged,
                        RunFacts(tmp_path, quiet=True))
    assert m["placement"]["views"] == 4 and m["placement"]["of"] == 6 and m["placement"]["headline"]["victim"] == "victim"
    assert len(m["placement"]["victims"]["victim"]["cells"]) == 4
    report = (tmp_path / "report.md").read_text()
    assert "## Placement error" in report and "| 5 mm |" in report and "±6°" in report
    assert (tmp_path / "placement.png").is_file()
    # off: no table, no picture
    off = evaluate_attack(HeldOutRun(setup["pipe"], setup["grid"], HeldOutSettings(atlas=False, placement={"enabled": False}),
                                     patch=stickers), judged, RunFacts(tmp_path / "off", quiet=True))
    assert off["placement"] is None and not (tmp_path / "off" / "placement.png").exists()
