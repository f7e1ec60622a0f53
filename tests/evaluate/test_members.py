"""The members table (physattack/evaluate/members.py): the final patch on attacked and held-out victims."""

from __future__ import annotations


import pytest
import torch
import wandb

from physattack.eot import BackgroundBank, EvalGrid, ViewPipeline
from physattack.errors import InputError
from physattack.evaluate.members import (ATTACKED, HELD_OUT, headline_figures, log_members, members_line,
                                         not_fitted_phrase, tag_members)
from physattack.victims.signnet import bundled_signnet
from physattack.render import Renderer
from physattack.victims.base import Classifier

BATCH = 2


class CountingPipeline:
    """A view pipeline that counts its calls."""

    def __init__(self, pipeline):
        self.pipeline, self.calls = pipeline, 0

    def __call__(self, scene, texture, params):
        self.calls += 1
        return self.pipeline(scene, texture, params)


class NoYield(Classifier):
    """SignNet's logits under labels that lack 'yield'."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.labels = tuple("stop" if n == "stop" else f"other_{i}" for i, n in enumerate(inner.labels))

    def logits(self, images):
        return self.inner(images)


class Detector(torch.nn.Module):
    is_detector = True


class Recorder:
    def __init__(self):
        self.tables, self.summaries = {}, {}

    def log_table(self, name, columns, rows):
        self.tables[name] = (columns, rows)

    def summary(self, metrics):
        self.summaries.update(metrics)

    def __getattr__(self, name):             # log, log_images, ...: accepted and ignored
        return lambda *a, **k: None


@pytest.fixture(scope="module")
def setup(stop_scene):
    adv = stop_scene.texture.clone()
    adv[:, 100:412, 100:412] = 1.0            # a white square: SignNet reads yield, its sibling only sometimes
    grid = EvalGrid(azimuth_deg=[-25.0, 25.0], distance_m=[5.0, 10.0], lighting=["noon"], background_count=4)
    pipe = ViewPipeline(Renderer(), BackgroundBank(4, seed=1000), (56, 56))
    return stop_scene, adv, grid, pipe


@pytest.fixture(scope="module")
def sibling():
    return bundled_signnet("signnet_seed1")


def direct_rates(victim, clean, attacked, true_idx, target_idx):
    """Rates from plain argmaxes of the victim's outputs, without the project's metrics code."""
    with torch.no_grad():
        cp, ap = victim(clean).argmax(1), victim(attacked).argmax(1)
        conf = torch.softmax(victim(attacked), 1)[:, target_idx].mean()
    ok, hit = cp == true_idx, ap == target_idx
    return {"clean": (int(ok.sum()), len(ok)), "rp2": (int((hit & ok).sum()), int(ok.sum())),
            "all": (int(hit.sum()), len(hit)), "conf": float(conf)}


def counts(r):
    return r["count"], r["n"]


def test_rates_match_direct_classification_and_grid_renders_once(setup, signnet, sibling):
    scene, adv, grid, pipe = setup
    spy = CountingPipeline(pipe)
    members = tag_members(attacked={"signnet": signnet}, held_out={"signnet_seed1": sibling})
    table = evaluate_members(scene, scene.texture, adv, spy, grid, members, "yield", batch_size=BATCH)
    batches = -(-len(grid) // BATCH)
    assert spy.calls == 2 * batches                    # clean + attacked per batch, whatever the victim count

    one = CountingPipeline(pipe)
    evaluate_members(scene, scene.texture, adv, one, grid, tag_members(held_out={"signnet_seed1": sibling}), "yield",
                     batch_size=BATCH)
    assert one.calls == spy.calls

    params = grid.params()
    clean = torch.cat([pipe(scene, scene.texture, params[s:s + BATCH]).images for s in range(0, len(grid), BATCH)])
    attacked = torch.cat([pipe(scene, adv, params[s:s + BATCH]).images for s in range(0, len(grid), BATCH)])
    for name, victim in (("signnet", signnet), ("signnet_seed1", sibling)):
        want = direct_rates(victim, clean, attacked, victim.labels.index("stop"), victim.labels.index("yield"))
        row = table["members"][name]
        assert row["mode"] == "targeted" and row["views"] == len(grid)
        assert counts(row["clean_accuracy"]) == want["clean"]
        assert counts(row["attack_success_rate"]) == want["rp2"]
        assert counts(row["attack_success_rate_unconditional"]) == want["all"]
        assert row["mean_target_confidence"] == pytest.approx(want["conf"], abs=1e-5)
        lo, hi = row["attack_success_rate"]["ci95"]
        assert 0 <= lo <= hi <= 1
    assert table["members"]["signnet"]["attack_success_rate"]["count"] > 0       # the check compares real successes
    assert table["members"]["signnet"]["role"] == ATTACKED and table["members"]["signnet_seed1"]["role"] == HELD_OUT
    mean = table["held_out_mean"]
    assert mean["victims"] == ["signnet_seed1"]
    assert mean["attack_success_rate"] == table["members"]["signnet_seed1"]["attack_success_rate"]["rate"]
    line = members_line(table)
    assert "held-out (never called by the optimizer) signnet_seed1" in line and "held-out mean" in line

    rec = Recorder()
    log_members(rec, table)
    columns, rows = rec.tables["heldout/victims"]
    assert [r[0] for r in rows] == ["signnet", "signnet_seed1"] and columns[:2] == ["victim", "role"]
    assert rec.summaries["heldout/signnet_seed1/attack_success_rate"] == mean["attack_success_rate"]


def test_untargeted_and_skipped_members(setup, signnet):
    scene, adv, grid, pipe = setup
    members = tag_members(attacked={"signnet": signnet},
                          held_out={"no_yield": NoYield(signnet), "detector": Detector()})
    table = evaluate_members(scene, scene.texture, adv, pipe, grid, members, "yield", batch_size=BATCH)
    assert set(table["members"]) == {"signnet"}
    assert "lack the target 'yield'" in table["skipped"]["no_yield"]["reason"]
    assert table["skipped"]["no_yield"]["role"] == HELD_OUT
    assert "classifier victims only" in table["skipped"]["detector"]["reason"]
    assert table["held_out_mean"]["attack_success_rate"] is None
    assert "skipped no_yield" in members_line(table)

    untargeted = evaluate_members(scene, scene.texture, adv, pipe, grid, members, None, batch_size=BATCH)
    row = untargeted["members"]["no_yield"]                   # no target needed: scored by leaving 'stop'
    assert row["mode"] == "untargeted" and "mean_target_confidence" not in row
    assert untargeted["held_out_mean"]["attack_success_rate"] == row["attack_success_rate"]["rate"] or \
        row["attack_success_rate"]["n"] == 0
    with pytest.raises(InputError, match="both as attacked and as held out"):
        tag_members(attacked={"a": signnet}, held_out={"a": signnet})


def test_heldout_run_writes_the_table(tmp_path, setup, signnet, sibling):
    from physattack.evaluate.protocol import HeldOutRun, HeldOutSettings, JudgedPatch, RunFacts

    scene, adv, grid, pipe = setup
    settings = HeldOutSettings(atlas=False, worst_views=2)
    members = tag_members(attacked={"signnet": signnet},
                          held_out={"signnet_seed1": sibling, "no_yield": NoYield(signnet)})
    plain, spy = CountingPipeline(pipe), CountingPipeline(pipe)
    a = HeldOutRun(plain, grid, settings).evaluate(
        JudgedPatch(scene, signnet, adv, {"scene": "stop_sign", "attack": "t", "target_label": "yield"}),
        RunFacts(tmp_path / "a", batch_size=BATCH))["heldout"]
    rec = Recorder()
    out = HeldOutRun(spy, grid, settings, members=members).evaluate(
        JudgedPatch(scene, signnet, adv, {"scene": "stop_sign", "attack": "t", "target_label": "yield",
                                          "victim_names": ["signnet"]}),
        RunFacts(tmp_path / "b", tracker=rec, batch_size=BATCH))
    assert spy.calls == plain.calls                   # the members add no render of the grid
    b = out["heldout"]
    assert "victims" not in a
    assert a["attack_success_rate"] == b["attack_success_rate"]
    assert b["attack_success_rate"] == b["victims"]["members"]["signnet"]["attack_success_rate"]
    assert set(b["victims"]["members"]) == {"signnet", "signnet_seed1"} and "no_yield" in b["victims"]["skipped"]
    assert out["heldout"]["victims"] == b["victims"]

    report = (tmp_path / "b" / "report.md").read_text()
    assert ("| victim | role | family | trained on | mode | clean accuracy | success (clean-correct) "
            "| success (all views)") in report
    assert "| signnet_seed1 | held-out | – | render | targeted |" in report
    assert "| signnet | attacked | – | render | targeted |" in report
    assert "`no_yield` (held-out): its labels lack the target 'yield'" in report
    assert "classifier victims only" in report
    assert "**Headline:**" in report and ", fitted to signnet; not fitted to: 1 held-out victim read it" in report
    assert "**Headline:**" not in (tmp_path / "a" / "report.md").read_text()     # no victim names, no claim
    assert "heldout/victims" in rec.tables and "heldout/signnet_seed1/clean_accuracy" in rec.summaries

    # Each victim's rates per grid value: the run's own victim, scored as a member, gets the same
    # per-condition rates as the run's headline; the sibling gets its own, drawn and tabled.
    assert b["victims"]["members"]["signnet"]["per_condition"] == b["per_condition"]
    sib = b["victims"]["members"]["signnet_seed1"]["per_condition"]
    assert [r["value"] for r in sib["azimuth_deg"]] == [-25.0, 25.0]
    assert sum(r["views"] for r in sib["distance_m"]) == len(grid)
    assert (tmp_path / "b" / "heldout_victims.png").is_file() and not (tmp_path / "a" / "heldout_victims.png").exists()
    assert "### Victims by condition" in report and "**azimuth_deg**" in report
    columns, rows = rec.tables["heldout/victims_per_condition"]
    assert {(r[0], r[2]) for r in rows} == {(n, a) for n in ("signnet", "signnet_seed1")
                                            for a in ("azimuth_deg", "distance_m", "elevation_deg")}


def test_held_out_families_average_only_families_no_attacked_victim_belongs_to():
    from physattack.evaluate.heldout_report import members_markdown
    from physattack.evaluate.members import LabelSets, ViewProbs, members_table

    def probs(fooled: int, n: int = 10) -> ViewProbs:
        clean = torch.tensor([[0.9, 0.1]]).repeat(n, 1)              # every view read as stop (index 0) when clean
        attacked = torch.tensor([[0.2, 0.8]] * fooled + [[0.9, 0.1]] * (n - fooled))
        return ViewProbs(clean=clean, attacked=attacked)

    members = tag_members(attacked={"vgg_a": object(), "resnet_a": object()},
                          held_out={"vgg_b": object(), "vit_a": object(), "convnext_a": object(), "unknown": object(),
                                    "warp_mobilenet": object(), "warp_resnet": object()},
                          families={"vgg_a": "vgg", "resnet_a": "resnet", "vgg_b": "vgg", "vit_a": "vit",
                                    "convnext_a": "convnext", "warp_mobilenet": "mobilenet", "warp_resnet": "resnet"},
                          data={"warp_mobilenet": "warp", "warp_resnet": "warp"})
    fooled = {"vgg_a": 10, "resnet_a": 10, "vgg_b": 9, "vit_a": 2, "convnext_a": 4, "unknown": 7, "warp_mobilenet": 1,
              "warp_resnet": 5}
    sets = {n: LabelSets((0,), (1,)) for n in members}
    table = members_table({n: probs(k) for n, k in fooled.items()}, members, sets, {})
    fam = table["held_out_families"]
    assert fam["attacked_families"] == ["resnet", "vgg"] and fam["families"] == ["convnext", "vit"]
    assert fam["victims"] == ["vit_a", "convnext_a"]                   # not the VGG sibling, not the unlabelled one
    assert fam["attack_success_rate"] == pytest.approx(0.3) and fam["attack_success_rate_min"] == pytest.approx(0.2)
    assert table["held_out_mean"]["attack_success_rate"] == pytest.approx((0.9 + 0.2 + 0.4 + 0.7) / 4)
    assert table["members"]["vit_a"]["family"] == "vit" and table["members"]["unknown"]["family"] is None
    # the victims trained on other images are their own group, out of the two means above
    other = table["held_out_other_data"]
    assert other["victims"] == ["warp_mobilenet", "warp_resnet"] and other["data"] == ["warp"]
    assert other["attack_success_rate"] == pytest.approx(0.3) and other["attack_success_rate_min"] == pytest.approx(0.1)
    assert table["members"]["warp_resnet"]["data"] == "warp" and table["members"]["vit_a"]["data"] == "render"
    line = members_line(table)
    assert "held-out families (convnext, vit; attacked: resnet, vgg) mean 30.0%" in line
    assert "held-out, trained on other images (warp) mean 30.0% (min 10.0%, 2 victims)" in line
    report = "\n".join(members_markdown(table))
    assert "| vit_a | held-out | vit | render |" in report and "**30.0%**" in report
    assert "| warp_resnet | held-out | resnet | warp |" in report
    assert "Over the 2 held-out victims trained on other images than the renders" in report
    fig = headline_figures(["vgg_a", "resnet_a"], {"victims": table})
    assert "the 2 trained on other images (warp: no render of this pipeline) read it 30.0% (lowest 10.0%)" in \
        not_fitted_phrase(fig)


def test_per_condition_rates_show_where_one_victim_fails():
    from physattack.evaluate.heldout_report import victims_conditions_figure, victims_conditions_markdown
    from physattack.evaluate.members import LabelSets, ViewProbs, members_table

    # Eight views, half under a low sun; "warm_blind" is fooled everywhere but under the low sun.
    conditions = [{"lighting": light, "distance_m": d} for light in ("low_sun", "noon") for d in (5.0, 5.0, 10.0, 10.0)]
    clean = torch.tensor([[0.9, 0.1]]).repeat(8, 1)
    fooled, resisted = torch.tensor([0.2, 0.8]), torch.tensor([0.9, 0.1])
    probs = {"everywhere": ViewProbs(clean, fooled.repeat(8, 1)),
             "warm_blind": ViewProbs(clean, torch.stack([resisted] * 4 + [fooled] * 4))}
    members = tag_members(attacked={"everywhere": object()}, held_out={"warm_blind": object()})
    sets = {n: LabelSets((0,), (1,)) for n in members}
    table = members_table(probs, members, sets, {}, conditions)
    light = {r["value"]: r["attack_success_rate"] for r in table["members"]["warm_blind"]["per_condition"]["lighting"]}
    assert (light["low_sun"]["count"], light["low_sun"]["n"]) == (0, 4) and light["noon"]["rate"] == 1.0
    assert light["low_sun"]["ci95"][1] < 0.6                       # a Wilson interval, not a bare count
    dist = table["members"]["warm_blind"]["per_condition"]["distance_m"]
    assert [r["attack_success_rate"]["rate"] for r in dist] == [0.5, 0.5]
    assert table["members"]["warm_blind"]["attack_success_rate"]["rate"] == 0.5
    text = "\n".join(victims_conditions_markdown(table))
    assert "| victim | role | low_sun | noon |" in text and "| warm_blind | held-out | 0% | 100% |" in text
    assert "per_condition" not in members_table(probs, members, sets, {})["members"]["warm_blind"]
    victims_conditions_figure(table, "t")                          # draws without error
    rec = Recorder()
    log_members(rec, table)
    columns, rows = rec.tables["heldout/victims_per_condition"]
    assert ["warm_blind", "held-out", "lighting", "low_sun", 4, 1.0, 0.0] in rows
    wandb.Table(columns=columns, data=rows)     # W&B takes it: preset names and distances share one column


def _rate(count: int, n: int = 10) -> dict:
    return {"rate": count / n if n else float("nan"), "count": count, "n": n, "ci95": [0.0, 1.0]}


def _ensemble_metrics() -> dict:
    """A finished ensemble run's metrics: members a (10/10) and b (7/10) attacked, the ensemble's mean
    probability 10/10 on the protocol and on the quick grid, a held-out ViT at 4/10 and a sibling of a."""
    from physattack.evaluate.members import LabelSets, ViewProbs, members_table

    def probs(fooled: int, n: int = 10) -> ViewProbs:
        return ViewProbs(clean=torch.tensor([[0.9, 0.1]]).repeat(n, 1),
                         attacked=torch.tensor([[0.2, 0.8]] * fooled + [[0.9, 0.1]] * (n - fooled)))

    members = tag_members(attacked={"a": object(), "b": object()}, held_out={"a_seed1": object(), "vit": object()},
                          families={"a": "vgg", "b": "convnext", "a_seed1": "vgg", "vit": "vit"})
    fooled = {"a": 10, "b": 7, "a_seed1": 9, "vit": 4}
    table = members_table({n: probs(k) for n, k in fooled.items()}, members,
                          {n: LabelSets((0,), (1,)) for n in members}, {})
    heldout = {"views": 10, "attack_success_rate": _rate(10), "attack_success_rate_unconditional": _rate(10),
               "clean_accuracy": _rate(10), "free_successes": {"attack_success_rate_outside_atlas": _rate(10)},
               "victims": table}
    return {"attack": "targeted -> yield", "true_label": "stop", "patch_area_fraction": 0.19,
            "victim_names": ["a", "b"], "attack_success_rate": _rate(12, 12), "clean_accuracy": _rate(12, 12),
            "heldout": heldout}


def test_the_headline_quotes_an_ensembles_lowest_member_and_what_it_was_not_fitted_to():
    """The success of the members' mean probability (10/10 here) is a figure no model the patch meets
    computes: the headline quotes the lowest member's own rate, names every member it was fitted to, and
    says how the held-out victims read the patch — everywhere the run's main figure is written."""
    from physattack.evaluate.heldout_report import fitted_markdown
    from physattack.evaluate.members import headline_figures
    from physattack.evaluate.protocol import heldout_line

    metrics = _ensemble_metrics()
    fig = headline_figures(metrics["victim_names"], metrics["heldout"], metrics)
    assert fig["quoted"] == "b" and fig["success"]["rate"] == pytest.approx(0.7)
    assert fig["members"] == {"a": 1.0, "b": 0.7}
    assert fig["not_fitted_to"] == ["a_seed1", "vit"] and fig["held_out_mean"] == pytest.approx(0.65)
    assert fig["held_out_families"]["victims"] == ["vit"] and fig["held_out_families"]["mean"] == pytest.approx(0.4)
    line = headline(metrics)
    assert line.startswith("targeted -> yield, fitted to a+b (members 100.0/70.0%; the lowest, b, is quoted): "
                           "held-out success 70.0%"), line
    assert "7/10 clean-correct views of the held-out protocol" in line
    assert ("not fitted to: 2 held-out victims read it 65.0% on average (lowest 40.0%), the 1 of families it never "
            "saw (vit) 40.0% (lowest 40.0%)") in line
    assert headline_rate(metrics) == pytest.approx(0.7)            # what a sweeper optimizes is what is quoted
    assert heldout_line(metrics["heldout"], metrics["victim_names"]).startswith(
        "held-out protocol (10 views), the mean probability of a+b (each member alone on the victims line): ")
    report = "\n".join(fitted_markdown(metrics["victim_names"], metrics["heldout"]))
    assert "70.0%" in report and "fitted to a+b" in report and "the members' mean probability" in report


def test_a_single_victims_headline_quotes_the_protocol_and_says_when_nothing_was_held_out():
    metrics = _ensemble_metrics()
    metrics["victim_names"] = ["a"]
    metrics["heldout"]["attack_success_rate"] = _rate(9)           # the protocol, not the 12-view quick grid
    line = headline(metrics)
    assert line.startswith("targeted -> yield, fitted to a: held-out success 90.0%")
    assert "of the held-out protocol" in line
    assert headline_rate(metrics) == pytest.approx(0.9)
    del metrics["heldout"]                                         # the protocol did not run: the grid, said so
    line = headline(metrics)
    assert "held-out success 100.0%" in line and "12/12 clean-correct views of the grid" in line
    assert "not fitted to: no held-out victim scored, so this is a white-box figure only" in line


def test_the_headline_is_a_section_of_the_run_report_written_once(tmp_path):
    from physattack.run_report import RunReport, read_report

    report = RunReport.from_json(_ensemble_metrics())
    report.headline = headline(report.to_json())
    report.write(tmp_path)
    back = read_report(tmp_path)
    assert back.kind == "classifier" and back.headline == headline(_ensemble_metrics())
    assert back.to_json() == report.to_json() and back.summary["victim_names"] == ["a", "b"]


def headline(metrics: dict) -> str:
    """The headline a classifier run's report prints (its kind's), from ``metrics.json``'s content."""
    from physattack.cli.kinds.classifier import ClassifierKind
    from physattack.run_report import RunReport

    return ClassifierKind().headline(RunReport.from_json(metrics))


def headline_rate(metrics: dict) -> float:
    from physattack.cli.kinds.classifier import ClassifierKind
    from physattack.run_report import RunReport

    return ClassifierKind().headline_rate(RunReport.from_json(metrics))


def evaluate_members(scene, clean_texture, adv_texture, pipeline, grid, members, target, batch_size=64) -> dict:
    """The members table of ``adv_texture`` on ``grid``, as the held-out protocol makes it: every grid batch
    rendered once (clean and attacked) and read by every member that can be scored."""
    from physattack.evaluate.members import check_members, classify_views, members_table

    sets, skipped = check_members(members, scene.class_name, target)
    if not sets:
        return members_table({}, members, sets, skipped)
    probs, _ = classify_views(scene, clean_texture, adv_texture, pipeline, grid.params(),
                              [members[n].victim for n in sets], batch_size)
    return members_table(dict(zip(sets, probs)), members, sets, skipped, grid.conditions())
