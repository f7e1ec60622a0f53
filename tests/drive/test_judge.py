"""Judging drives (physattack/drive/judge.py, stacks.py, report.py): k-of-n voting, the braking point, the tiles, and
planted victims: one that always reads the sign wrong makes every drive run it, one that always reads
it right makes every drive stop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from physattack.eot import BackgroundBank
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, DriveSet
from physattack.errors import InputError
from physattack.drive.judge import (DriveSettings, Judging, check_braking, drive_metrics, evaluate_drives,
                                   first_recognition, panel_metrics)
from physattack.drive.report import drive_headline, drive_verdict, panel_markdown
from physattack.drive.stacks import DetectorStack, Panel, PanelVictim, StackSettings, TiledDetector, TwoStageStack
from physattack.render import Renderer
from physattack.victims.base import Classifier
from physattack.victims.detection import Detections, Detector, DetectorOutput

GREY = 0.5
CAM = Dashcam(width_px=480, height_px=270, hfov_deg=90.0)          # focal 240 px
LABELS = ("stop", "yield")


def test_k_of_n_recognises_at_the_first_full_window():
    t, f = True, False
    seq = torch.tensor([f, t, t, f, t, t, t])
    assert first_recognition(seq, 3, 5) == 4          # frames 1, 2, 4
    assert first_recognition(seq, 3, 3) == 6          # frames 4, 5, 6
    assert first_recognition(seq, 2, 2) == 2
    assert first_recognition(seq, 1, 1) == 1
    assert first_recognition(seq, 4, 5) == 5          # frames 1, 2, 4, 5
    assert first_recognition(torch.tensor([t, f, t, f, t, f]), 3, 4) is None
    assert first_recognition(torch.tensor([t, t]), 3, 5) is None
    assert first_recognition(torch.zeros(0, dtype=torch.bool), 1, 1) is None


def test_braking_point_and_bad_settings():
    s = DriveSettings(reaction_s=1.0, decel_mps2=6.0)
    assert s.braking_m(50.0) == pytest.approx(29.97, abs=0.01)
    with pytest.raises(InputError, match="drive.settings.k must be <= drive.settings.n"):
        DriveSettings(k=6, n=5)
    with pytest.raises(InputError, match="drive.settings.decel_mps2 must be > 0"):
        DriveSettings(decel_mps2=0.0)
    with pytest.raises(InputError, match=r"At 70 km/h the braking distance is 51.0 m .* beyond the first frame at "
                                         r"drive.drives.start_m=40"):
        check_braking(DriveSet(speeds_kmh=[30.0, 70.0], start_m=40.0).drives(), s)
    with pytest.raises(InputError, match="drive.stack.scales"):
        StackSettings(scales=[{"scale": 2.0}])


class PlantedDetector(Detector):
    """Finds red (a stop sign's face; not the grey road, post or background) and calls it ``label``, more
    sure the more of it it sees (a sign cut by a tile's edge scores lower than the whole one)."""

    labels = LABELS
    input_size = 64
    score_threshold = 0.5

    def __init__(self, label: int):
        super().__init__()
        self.label = label
        self.calls = 0

    def detect(self, images):
        self.calls += images.shape[0]
        out = []
        for img in images:
            on = img[0] > img[1:].amax(0) + 0.15
            if on.any():
                ys, xs = torch.nonzero(on, as_tuple=True)
                box = torch.tensor([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], dtype=torch.float32)
                score = torch.tensor([int(on.sum()) / (int(on.sum()) + 5.0)])
                out.append(Detections(box, score, torch.tensor([self.label])))
            else:
                out.append(Detections(torch.zeros(0, 4), torch.zeros(0), torch.zeros(0, dtype=torch.long)))
        n = images.shape[0]
        return DetectorOutput(torch.zeros(n, 1, 4), torch.zeros(n, 1, 2), torch.ones(n, 1, dtype=torch.bool), out, 0.5)


class PlantedClassifier(Classifier):
    """Always says ``label``."""

    labels = LABELS

    def __init__(self, label: int):
        super().__init__()
        self.label = label
        self.seen = nn.Parameter(torch.zeros(1), requires_grad=False)

    def logits(self, images):
        out = torch.zeros(images.shape[0], 2)
        out[:, self.label] = 5.0
        return out


@pytest.fixture(scope="module")
def grey_drives():
    bank = BackgroundBank(1, seed=0)
    bank.images = torch.full((1, 3, 8, 8), GREY)
    drives = DriveSet(speeds_kmh=[30.0, 50.0], lighting=["noon", "overcast"], lane_offsets_m=[3.0], start_m=40.0,
                      fps=4.0, blur_sigma_px=0.0, noise_std=0.0, background_count=1).drives()
    return drives, DriveRenderer(Renderer(), bank, CAM)


STACK = StackSettings(scales=[{"scale": 1.0, "distance_m": [3.0, 60.0]}], lateral_m=(1.5, 6.0), height_m=(1.5, 3.0))
SETTINGS = DriveSettings(k=2, n=3, timelines=1, videos=0)


def judge(stack, drives, renderer, scene, adv_texture=None):
    textures = {"clean": scene.texture, **({"attacked": adv_texture} if adv_texture is not None else {})}
    return evaluate_drives(Judging(scene, textures, renderer, stack, SETTINGS), drives)


@pytest.mark.parametrize("label, stops", [(0, True), (1, False)])
def test_a_planted_classifier_decides_every_drive(label, stops, grey_drives, stop_scene):
    drives, renderer = grey_drives
    tiled = TiledDetector(PlantedDetector(0), CAM, (0.75, 0.75), STACK)
    stack = TwoStageStack(tiled, PlantedClassifier(label), (0,), 0.3, 0.62, 32, {})
    outcomes = judge(stack, drives, renderer, stop_scene)
    assert len(outcomes) == 4
    assert all(o.stops("clean") is stops for o in outcomes)
    whole = outcomes[0]                                # the drawn drive is judged to its last frame
    assert whole.judged == len(whole.frames)
    assert all(o.judged < len(o.frames) for o in outcomes[1:])        # the others stop past their braking point
    assert (whole.readings["clean"].label >= 0).float().mean() > 0.8, "the planted detector should find the sign"
    m = drive_metrics(outcomes)
    assert m["stop_rate_clean"]["rate"] == (1.0 if stops else 0.0) and m["stop_rate_clean"]["n"] == 4
    assert set(m["by_speed"]) == {"30", "50"} and m["by_lighting"]["noon"]["drives"] == 2


def test_a_planted_detector_alone_decides_and_attack_success_counts_clean_stops(grey_drives, stop_scene):
    drives, renderer = grey_drives
    right = DetectorStack(TiledDetector(PlantedDetector(0), CAM, (0.75, 0.75), STACK), 0, 0.3, {})
    wrong = DetectorStack(TiledDetector(PlantedDetector(1), CAM, (0.75, 0.75), STACK), 0, 0.3, {})
    assert all(o.stops("clean") for o in judge(right, drives[:2], renderer, stop_scene))
    runs = judge(wrong, drives[:2], renderer, stop_scene)
    assert not any(o.stops("clean") for o in runs)
    # a texture the planted detector cannot see (no red): the attacked sign is never found, every drive runs it
    hidden = torch.full_like(stop_scene.texture, GREY)
    outcomes = judge(right, drives[:2], renderer, stop_scene, adv_texture=hidden)
    m = drive_metrics(outcomes)
    assert m["stop_rate_clean"]["rate"] == 1.0 and m["run_rate_attacked"]["rate"] == 1.0
    assert m["attack_success_rate"]["count"] == m["attack_success_rate"]["n"] == 2


def test_tiles_cover_the_search_regions_at_the_detectors_input_size():
    det = PlantedDetector(0)
    tiled = TiledDetector(det, Dashcam(), (0.75, 0.75), StackSettings())
    x0, y0, x1, y1 = tiled.region
    assert 960 <= x0 < 1000 and x1 == 1920 and y1 <= 600          # right of the vanishing point, upper frame
    for scale, region in zip(tiled.scales, tiled.regions):
        tiles = [t for t in tiled.tiles if tiled.scales[t.scale_index] is scale]
        w, h = round((region[2] - region[0]) * scale.scale), round((region[3] - region[1]) * scale.scale)
        covered = torch.zeros(h, w, dtype=torch.bool)
        for t in tiles:
            covered[t.y:t.y + 64, t.x:t.x + 64] = True
        assert covered.all() and all(t.x + 64 <= w and t.y + 64 <= h for t in tiles)
    # a sign 80 m away (9 px) is found in the 2x tiles, in full-frame pixels
    images = torch.full((1, 3, y1 - y0, x1 - x0), GREY)
    images[:, 0, 528 - y0:537 - y0, 1000 - x0:1009 - x0] = 1.0
    found = tiled(images, tiled.region)[0]
    assert len(found) >= 1 and torch.allclose(found.boxes[0], torch.tensor([1000.0, 528.0, 1009.0, 537.0]), atol=0.6)


def test_a_panel_judges_every_classifier_on_the_same_crops_by_the_same_rule(grey_drives, stop_scene):
    """Each panel victim reads the crops the stack's own classifier reads: one that reads them as the stack's
    does is recognised at the same frame; the attack's success is counted per victim over the drives it
    stops in clean, and a victim that never stops clean has no success to average (n = 0)."""
    drives, renderer = grey_drives
    tiled = TiledDetector(PlantedDetector(0), CAM, (0.75, 0.75), STACK)
    panel = {"twin": PanelVictim(PlantedClassifier(0), (0,), "attacked", "vgg"),
             "sibling": PanelVictim(PlantedClassifier(0), (0,), "held-out", "vgg"),
             "other": PanelVictim(PlantedClassifier(0), (0,), "held-out", "vit"),
             "blind": PanelVictim(PlantedClassifier(1), (0,), "held-out", "convnext"),
             "warped": PanelVictim(PlantedClassifier(0), (0,), "held-out", "mobilenet", "warp")}
    stack = TwoStageStack(tiled, PlantedClassifier(0), (0,), 0.3, 0.62, 32, {"detector": "d", "classifier": "twin"},
                          Panel(panel, {"det": "a detector"}))
    hidden = torch.full_like(stop_scene.texture, GREY)       # the planted detector cannot find it: every victim runs it
    outcomes = judge(stack, drives, renderer, stop_scene, adv_texture=hidden)
    for o in outcomes:                                         # drawn (whole) and verdict-only drives alike
        assert o.panel_recognised["clean"]["twin"] == o.recognised["clean"] is not None
        assert o.panel_recognised["clean"]["blind"] is None and not o.stops("clean", "blind")
        assert o.stops("clean", "sibling") and not o.stops("attacked", "sibling")
    table = panel_metrics(outcomes, stack.panel, stack.panel_skipped)
    rows = table["members"]
    assert rows["twin"]["stop_rate_clean"]["rate"] == 1.0 and rows["twin"]["attack_success_rate"]["count"] == 4
    assert rows["blind"]["stop_rate_clean"]["rate"] == 0.0 and rows["blind"]["attack_success_rate"]["n"] == 0
    assert table["held_out_mean"] == {"victims": ["sibling", "other"], "attack_success_rate": 1.0}
    assert table["held_out_families"]["victims"] == ["other"] and table["held_out_families"]["families"] == ["vit"]
    other = table["held_out_other_data"]                    # trained on other images: its own group
    assert other["victims"] == ["warped"] and other["data"] == ["warp"] and other["attack_success_rate"] == 1.0
    text = "\n".join(panel_markdown(table, attacked=True))
    assert "| blind | held-out | convnext | render | 0.0% [0%-49%] (0/4) | 0.0% [0%-49%] (0/4) | n/a |" in text
    assert "Over the 1 held-out victims trained on other images than the renders" in text
    assert "`det` (a detector)" in text
    result = {**drive_metrics(outcomes), "panel": table, "stack": "two-stage",
              "victims": {"detector": "d", "classifier": "twin"}, "report": "drive.md"}
    line = drive_headline(result)
    assert ("not fitted to: with 2 held-out classifiers it runs the sign in 100.0% of the drives they stop in clean "
            "on average, 100.0% for the 1 of families it never saw; the 1 trained on other images (warp: no render of "
            "this pipeline) run it in 100.0% of their clean stops") in line
    assert "the 1 trained on other images (warp) in 100.0%" in drive_verdict(result)
    assert "each attacked member alone" not in line            # one attacked victim: the stack's own figure is its


def test_an_ensembles_members_are_judged_one_by_one(grey_drives, stop_scene):
    """A car runs one model: with an ensemble's members on the panel the headline gives each member's own
    success beside that of the members' mean."""
    drives, renderer = grey_drives
    tiled = TiledDetector(PlantedDetector(0), CAM, (0.75, 0.75), STACK)
    panel = {"a": PanelVictim(PlantedClassifier(0), (0,), "attacked"), "b": PanelVictim(PlantedClassifier(1), (0,),
                                                                                          "attacked")}
    stack = TwoStageStack(tiled, PlantedClassifier(0), (0,), 0.3, 0.62, 32, {}, Panel(panel))
    outcomes = judge(stack, drives[:2], renderer, stop_scene, adv_texture=torch.full_like(stop_scene.texture, GREY))
    result = {**drive_metrics(outcomes), "panel": panel_metrics(outcomes, panel), "stack": "two-stage",
              "victims": {"detector": "d", "classifier": "the mean probability of a+b"}, "report": "drive.md"}
    assert "each attacked member alone: a 100.0%, b n/a of the drives it stops in clean" in drive_headline(result)


def test_a_panel_read_without_the_stacks_own_reading_gives_the_same_verdicts(grey_drives, stop_scene):
    """``Judging.own=False`` (the restart judge: each member alone): the stack's classifier is never run, and every
    panel victim's verdict on every drive is the one it gets when the stack reads too."""
    from dataclasses import replace

    class Counting(PlantedClassifier):
        def logits(self, images):
            self.calls = getattr(self, "calls", 0) + len(images)
            return super().logits(images)

    drives, renderer = grey_drives
    settings = replace(SETTINGS, timelines=0)
    verdicts = []
    for own in (True, False):
        mean = Counting(0)
        panel = {"a": PanelVictim(PlantedClassifier(0), (0,), "attacked"),
                 "b": PanelVictim(PlantedClassifier(1), (0,), "attacked")}
        stack = TwoStageStack(TiledDetector(PlantedDetector(0), CAM, (0.75, 0.75), STACK), mean, (0,), 0.3, 0.62, 32,
                              {}, Panel(panel))
        textures = {"clean": stop_scene.texture}
        outcomes = evaluate_drives(Judging(stop_scene, textures, renderer, stack, settings, own=own), drives)
        verdicts.append([o.panel_recognised["clean"] for o in outcomes])
        assert (getattr(mean, "calls", 0) > 0) is own
    assert verdicts[0] == verdicts[1] and any(v["a"] is not None for v in verdicts[1])


@pytest.mark.parametrize("single", [False, True])
def test_an_ensembles_members_on_its_panel_are_asked_once_and_read_the_same(single, grey_drives, stop_scene):
    """A two-stage stack whose classifier is an ensemble of its panel's members (or, ``single``, is itself on its
    panel): each member reads each crop once (for the ensemble's mean and its own verdict alike), and every reading
    equals that of a stack reading copies of them."""
    import copy

    from physattack.victims.ensemble import Ensemble

    class Reddish(Classifier):
        """Reads the crop's redness at its own input size; counts the crops it is asked."""

        labels = LABELS

        def __init__(self, size: int, bias: float):
            super().__init__()
            self.input_size, self.bias, self.calls = size, bias, 0
            self.seen = nn.Parameter(torch.zeros(1), requires_grad=False)

        def logits(self, images):
            self.calls += len(images)
            images = torch.nn.functional.interpolate(images, size=(self.input_size,) * 2, mode="bilinear",
                                                     antialias=True, align_corners=False)
            red = (images[:, 0] - images[:, 1:].mean(1)).mean((1, 2))
            return torch.stack([8 * red + self.bias, torch.zeros_like(red)], 1)

    drives, renderer = grey_drives
    members = [Reddish(24, -0.6)] if single else [Reddish(24, -0.6), Reddish(16, -0.2)]
    readings, calls = [], []
    for shared in (True, False):
        own = members if shared else copy.deepcopy(members)
        # single: a stack whose own classifier (not an ensemble) is on its panel, asked once a crop the same way
        classifier = own[0] if single else Ensemble(own, names=["a", "b"]).freeze()
        panel = {n: PanelVictim(m, (0,), "attacked") for n, m in zip("ab", members)}
        stack = TwoStageStack(TiledDetector(PlantedDetector(0), CAM, (0.75, 0.75), STACK), classifier, (0,), 0.3,
                              0.62, 32, {}, Panel(panel))
        asked = [*members, *own]
        for m in asked:
            m.calls = 0
        outcomes = judge(stack, drives, renderer, stop_scene, adv_texture=stop_scene.texture * 0.6 + 0.2)
        readings.append([(r.correct, r.label, r.score, r.panel) for o in outcomes for r in o.readings.values()])
        calls.append([m.calls for m in asked])
    k = len(members)
    once = calls[0][:k]                   # shared: the panel's members are the stack's, each asked once a crop
    assert once[0] > 0 and calls[0] == once * 2
    assert calls[1][k:] == once and 0 < calls[1][0] <= once[0]       # copies: the stack asks them all, the panel too
    for (c, lab, score, panel), (c2, lab2, score2, panel2) in zip(*readings, strict=True):
        assert torch.equal(c, c2) and torch.equal(lab, lab2) and torch.equal(score, score2)
        assert panel.keys() == panel2.keys() and all(torch.equal(panel[k], panel2[k]) for k in panel)
    scores = torch.cat([r[2][r[1] >= 0] for r in readings[0]])       # the mean's probability: neither 0 nor 1
    assert 0.05 < float(scores.min()) < float(scores.max()) < 0.95
    assert single or any(bool((r[3]["a"] != r[3]["b"]).any()) for r in readings[0])    # they disagree: a real mean


def test_a_detector_stacks_panel_scans_the_same_frames_with_each_detector(grey_drives, stop_scene):
    """Each panel detector scans the frames on its own tiles: one that finds the sign as its class stops
    every drive clean, one that calls it something else never does; the frames cover every panel
    detector's search region (a bigger input needs a wider one)."""
    drives, renderer = grey_drives

    def tiled(label, size=64):
        det = PlantedDetector(label)
        det.input_size = size
        return TiledDetector(det, CAM, (0.75, 0.75), STACK)

    panel = {"right": PanelVictim(tiled(0, 96), (0,), "held-out", "a"),
             "wrong": PanelVictim(tiled(1), (0,), "held-out", "b")}
    stack = DetectorStack(tiled(0), 0, 0.3, {"detector": "d"}, Panel(panel))
    assert all(lo <= inner for lo, inner in zip(stack.region[:2], panel["right"].model.region[:2]))
    assert all(hi >= inner for hi, inner in zip(stack.region[2:], panel["right"].model.region[2:]))
    outcomes = judge(stack, drives[:2], renderer, stop_scene, adv_texture=torch.full_like(stop_scene.texture, GREY))
    assert all(o.stops("clean", "right") and not o.stops("attacked", "right") for o in outcomes)
    assert not any(o.stops("clean", "wrong") for o in outcomes)
    assert panel["right"].model.detector.calls > 0
    result = {**drive_metrics(outcomes), "panel": {**panel_metrics(outcomes, panel), "kind": "detector"},
              "stack": "detector", "victims": {"detector": "d"}, "report": "drive.md"}
    assert ("not fitted to: with 1 held-out detector it runs the sign in 100.0% of the drives they stop in clean"
            in drive_headline(result))
    assert "Every detector of the run's held-out protocol scanned the same frames" in "\n".join(
        panel_markdown(result["panel"], attacked=True))
