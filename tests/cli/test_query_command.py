"""``attack.method=query`` through the command: a finished run's patch (``init=``) refined through a victim
that answers only scores, the images counted exactly, the queried victim reported as query-attacked and the
init run's victims as attacked by gradient (never held out); bad input is one sentence naming the key."""

from __future__ import annotations

import json

import pytest
import torch
from commands import TINY, call, one_sentence, run_module

from physattack.cli.attack import main as attack_main

QUERY = ["attack.method=query", "victim=zoo_convnext_atto", "attack.query.samples=2", "attack.query.judge_every=50",
         "attack.query.judge_views=8"]


def test_a_query_run_refines_the_init_patch_and_says_what_it_asked(finished_run, in_tmp):
    out = in_tmp / "q"
    proc = run_module("physattack", ["+scene=stop_sign", "attack=yield", *TINY, *QUERY, f"init={finished_run}",
                                     "attack.queries=100", "attack.query.keep=0.5", "attack.query.select=1",
                                     "attack.query.select_draws=1", "~evaluation.victims.zoo_vit",
                                     "~evaluation.victims.zoo_resnet10t_96", f"hydra.run.dir={out}"], in_tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m = json.loads((out / "metrics.json").read_text())
    q = m["query"]
    assert m["kind"] == "query" and q["victim"] == "zoo_convnext_atto" and q["answers"] == "scores"
    # the tiny approach: one drive of one 5-frame window and two views, 2 antithetic pairs: at most 28 images a step;
    # a check of the patch on the held-aside draw (one such window and two views) after every step: at most 7 more
    assert q["images_per_step"] == 28 and 0 < q["images"] <= 100 and q["images"] + 28 + 7 > 100
    assert q["curve"][0]["images"] == 0 and q["curve"][-1]["images"] == q["images"]
    assert q["select"] == 1 and len(q["checks"]) == q["steps"] + 1 and q["checks"][-1]["images"] == q["images"]
    assert q["selected"] in q["checks"] and "counted checks" in m["headline"] + proc.stdout
    assert q["attacked_by_gradient"] == ["signnet"] and m["init"]["run"] == str(finished_run)
    assert q["keep"] == 0.5 and q["kept"] == ["signnet"] and q["gradient_calls"] == 0   # init's victim steers
    rows = m["heldout"]["victims"]["members"]
    assert rows["zoo_convnext_atto"]["role"] == "attacked" and rows["signnet"]["role"] == "attacked"
    assert rows["signnet_seed1"]["role"] == "held-out"
    assert {"vgg", "convnext"} <= set(m["heldout"]["victims"]["held_out_families"]["attacked_families"])
    assert "query-attacked zoo_convnext_atto with" in m["headline"] and "from a patch attacked by gradient on signnet" \
        in m["headline"] and "still steered by their gradients (keep=0.5)" in m["headline"]
    assert (out / "queries.png").is_file() and "## Queries" in (out / "report.md").read_text()
    assert "| signnet | vgg | attacked by gradient (init run, and steered this run) |" in proc.stdout
    mine, theirs = (torch.load(p / "patch.pt", weights_only=True) for p in (out, finished_run))
    mine, theirs = (s.get("patch", s) for s in (mine, theirs))
    assert torch.equal(mine["mask"], theirs["mask"])              # the stickers stay where the init run put them
    panel = m["drive"]["panel"]["members"]                          # the run's quick drives: the same roles
    assert panel["signnet"]["role"] == "attacked" and panel["zoo_convnext_atto"]["role"] == "attacked"
    # and so does the drive command on the finished run (it reads the init run's victims from the report)
    proc = run_module("physattack.drive", [f"run_dir={out}", "drive=quick", "drive.settings.videos=0",
                                           "drive.settings.timelines=0", "progress=false"], in_tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    panel = json.loads((out / "drive-2" / "drive.json").read_text())["panel"]["members"]
    assert panel["signnet"]["role"] == "attacked" and panel["signnet_seed1"]["role"] == "held-out"
    # init= that query run, asking another victim: the one asked before is query-attacked (never "by gradient",
    # never held out), its images are said, and keep= follows the chain back to the gradient run's SignNet
    again = in_tmp / "q2"
    proc = run_module("physattack", ["+scene=stop_sign", "attack=yield", *TINY, *QUERY, "victim=zoo_tinynet_e",
                                     f"init={out}", "attack.queries=60", "attack.query.keep=0.5",
                                     "~evaluation.victims.zoo_vit", "~evaluation.victims.zoo_resnet10t_96",
                                     "~evaluation.victims.signnet", "+drive=none", f"hydra.run.dir={again}"], in_tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    m2 = json.loads((again / "metrics.json").read_text())
    assert m2["init"] == {"run": str(out), "attacked_by_gradient": ["signnet"], "query_attacked": ["zoo_convnext_atto"],
                          "query_images": q["images"]}
    assert m2["query"]["kept"] == ["signnet"] and m2["query"]["gradient_calls"] == 0
    rows = m2["heldout"]["victims"]["members"]
    assert rows["zoo_convnext_atto"]["role"] == "attacked" and rows["zoo_tinynet_e"]["role"] == "attacked"
    # the gradient run's SignNet is out of this run's evaluation.victims, yet it has its row, built as that run built it
    assert rows["signnet"]["role"] == "attacked" and rows["signnet"]["attack_success_rate"]["n"] > 0
    assert "| signnet | vgg | attacked by gradient (init run, and steered this run) |" in proc.stdout
    assert f"after {q['images']} images asked of zoo_convnext_atto" in m2["headline"]
    assert "| zoo_convnext_atto | convnext | query-attacked (init run) |" in proc.stdout


@pytest.mark.parametrize("extra, words", [
    (["attack.queries=10", "patch.shape=bars"], ["attack.queries=10 is below one step's 28 images"]),
    (["attack.query.answers=logits"], ["attack.query.answers must be scores or labels", "logits"]),
    ([], ["patch.shape=search", "init="]),
    (["victim=ensemble"], ["attack.method=query", "single classifier"]),
])
def test_bad_query_settings_are_one_sentence(extra, words, in_tmp, capsys):
    assert call(attack_main, ["+scene=stop_sign", *TINY, *QUERY, *extra]) == 2
    msg = one_sentence(capsys)
    for w in words:
        assert w in msg, msg


def test_init_from_a_run_of_another_scene_names_the_key(finished_run, in_tmp, capsys):
    assert call(attack_main, ["+scene=yield_sign", "attack=untargeted", *TINY, f"init={finished_run}"]) == 2
    msg = one_sentence(capsys)
    assert f"init={finished_run}" in msg and "stop_sign" in msg and "yield_sign" in msg


SMALL_FRAMES = ["attack.batch_size=2", "gallery_views=2", "eval_batch_size=2", "eot.grid.azimuth_deg=[-30,30]",
                "eot.grid.distance_m=[6]", "eot.grid.lighting=[noon]", "progress=false", "+drive=none",
                "evaluation.area.enabled=false", "printer.export.dpi=40"]


def detector_query_run(out, victim: str, init, cwd, *extra: str, eot: str = "default"):
    """A tiny ``attack=hide attack.method=query`` run of ``victim`` from ``init``: (folder, process, metrics)."""
    proc = run_module("physattack", ["+scene=stop_sign", "attack=hide", f"victim={victim}", f"eot={eot}",
                                     *SMALL_FRAMES, "attack.method=query", "attack.query.samples=2",
                                     "attack.query.views=4", "attack.query.judge_views=2", *extra, f"init={init}",
                                     f"hydra.run.dir={out}"], cwd)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, proc, json.loads((out / "metrics.json").read_text())


def test_a_detector_is_query_attacked_to_miss_the_sign(finished_run, in_tmp):
    """``attack=hide victim=detnet attack.method=query``: DetNet answers only its detections; the run says so, and
    the other detectors of the pool are held out."""
    out, proc, m = detector_query_run(in_tmp / "qd", "detnet", finished_run, in_tmp, "attack.queries=40",
                                      "attack.query.judge_every=20")
    q = m["query"]
    assert m["kind"] == "query_detector" and q["victim"] == "detnet" and q["images"] == 32 and q["images_per_step"] == 16
    assert m["victim_names"] == ["detnet"]           # the init run's victims are attacked, not this run's victim
    assert m["headline"].startswith("hide, query-attacked detnet with 32 images (scores only")
    rows = m["heldout"]["detectors"]["members"]
    assert rows["detnet"]["role"] == "attacked" and rows["det_retinanet"]["role"] == "held-out"
    assert "| det_retinanet | " in proc.stdout and "| detnet | " in proc.stdout and "query-attacked" in proc.stdout
    assert (out / "queries.png").is_file()


def test_a_stack_is_query_attacked_as_one_model_over_approach_windows(finished_run, in_tmp):
    """``victim=stack_tinynet_e eot=approach``: DetNet -> zoo_tinynet_e answers as one model, asked about one drive's
    5-frame window on the drive stack's tiles that hold the sign (two or three a frame) and two context frames per
    candidate (2 antithetic pairs: 4 x 17 images a step at most). DetNet ran on every image asked, so it is
    reported inside the stack, the pool's other detectors held out."""
    _, proc, m = detector_query_run(in_tmp / "qs", "stack_tinynet_e", finished_run, in_tmp, "attack.queries=68",
                                    "attack.query.judge_every=0", "eot.sampler.drives=1", "eot.sampler.segments=1",
                                    "eot.sampler.views_per_step=2", eot="approach")
    q = m["query"]
    assert m["kind"] == "query_detector" and q["victim"] == "stack_detnet_zoo_tinynet_e"
    assert q["images_per_step"] == 68 and q["steps"] == 1 and q["images"] in (48, 68)     # 10 or 15 tiles drawn
    assert q["stack_parts"] == ["detnet", "zoo_tinynet_e"] and m["victim_names"] == ["stack_detnet_zoo_tinynet_e"]
    rows = m["heldout"]["detectors"]["members"]
    assert rows["detnet"]["role"] == "attacked" and rows["det_retinanet"]["role"] == "held-out"
    assert "| detnet | – | inside the query-attacked stack |" in proc.stdout
    assert "not fitted to: 2 held-out detectors (det_fcos, det_retinanet)" in m["headline"]
