"""Drive reports in minutes and resumable (physattack/drive/judge.py early stop, physattack/drive/store.py):
a reader stops on a drive once it has recognised the sign, with the same verdicts as reading every drive to
its braking point; each finished drive is kept as it finishes, an interrupted report says how many it kept,
and a second run continues from there without judging them again."""

from __future__ import annotations

import json
import signal
from dataclasses import replace

import pytest
import torch
from test_judge import CAM, GREY, SETTINGS, STACK, PlantedClassifier, PlantedDetector, grey_drives  # noqa: F401

from physattack.drive.judge import Judging, evaluate_drives
from physattack.drive.stacks import Panel, PanelVictim, TiledDetector, TwoStageStack
from physattack.drive.store import DriveStore, continuing, judging_key, write_command
from physattack.errors import Interrupted


def stack_with_panel(detector=None, blind: bool = True):
    tiled = TiledDetector(detector or PlantedDetector(0), CAM, (0.75, 0.75), STACK)
    panel = {"sees": PanelVictim(PlantedClassifier(0), (0,), "held-out", "vgg"),
             **({"blind": PanelVictim(PlantedClassifier(1), (0,), "held-out", "vit")} if blind else {})}
    return TwoStageStack(tiled, PlantedClassifier(0), (0,), 0.3, 0.62, 32, {}, Panel(panel))


def verdicts(outcomes) -> list:
    return [(o.recognised, o.panel_recognised, {n: o.stops(n) for n in o.readings},
             {n: {v: o.stops(n, v) for v in o.panel_recognised[n]} for n in o.readings}) for o in outcomes]


@pytest.mark.parametrize("blind", [False, True])
def test_early_stop_and_near_sign_tiles_read_less_and_give_the_same_verdicts(blind, grey_drives, stop_scene):
    drives, renderer = grey_drives
    textures = {"clean": stop_scene.texture, "attacked": torch.full_like(stop_scene.texture, GREY)}
    counts, results = {}, {}
    for early in (False, True):
        detector = PlantedDetector(0)
        judging = Judging(stop_scene, textures, renderer, stack_with_panel(detector, blind),
                          replace(SETTINGS, timelines=0, early_stop=early, near_sign=early), chunk=4)  # short drives
        results[early] = evaluate_drives(judging, drives)
        counts[early] = detector.calls
    assert verdicts(results[True]) == verdicts(results[False])
    assert [o.recognised_at_m("clean") for o in results[True]] == [o.recognised_at_m("clean") for o in results[False]]
    read = [len(o.readings["clean"].correct) for o in results[True]]
    to_braking = [len(o.readings["clean"].correct) for o in results[False]]
    if blind:        # a panel victim that never recognises the sign keeps the drive read to its braking point
        assert read == to_braking and counts[True] < counts[False]      # fewer tiles a frame
    else:            # the clean sign is recognised early: the clean readings stop there
        assert all(r <= b for r, b in zip(read, to_braking)) and sum(read) < sum(to_braking)
        assert counts[True] < counts[False]


class Interrupting(PlantedDetector):
    """A planted detector on which Ctrl-C lands after ``after`` images."""

    def __init__(self, label: int, after: int):
        super().__init__(label)
        self.after = after

    def detect(self, images):
        if self.calls + images.shape[0] > self.after:
            raise KeyboardInterrupt
        return super().detect(images)


def test_an_interrupted_report_keeps_its_finished_drives_and_a_second_run_continues(grey_drives, stop_scene, tmp_path):
    drives, renderer = grey_drives
    textures = {"clean": stop_scene.texture}
    settings = replace(SETTINGS, timelines=0)
    straight = evaluate_drives(Judging(stop_scene, textures, renderer, stack_with_panel(), settings), drives)

    probe = PlantedDetector(0)
    evaluate_drives(Judging(stop_scene, textures, renderer, stack_with_panel(probe), settings), drives[:2])
    judging = Judging(stop_scene, textures, renderer, stack_with_panel(Interrupting(0, probe.calls + 1)), settings)
    store = DriveStore(tmp_path, judging_key(judging))
    with pytest.raises(Interrupted) as stop:
        evaluate_drives(judging, drives, store=store)
    assert stop.value.signum == signal.SIGINT
    assert stop.value.kept.startswith(f"2 of {len(drives)} drives are judged and kept in {tmp_path}; run the same")
    assert store.kept() == 2

    again = PlantedDetector(0)
    judging = Judging(stop_scene, textures, renderer, stack_with_panel(again), settings)
    resumed = evaluate_drives(judging, drives, store=DriveStore(tmp_path, judging_key(judging)))
    assert verdicts(resumed) == verdicts(straight)
    assert store.kept() == len(drives)
    solo = PlantedDetector(0)
    evaluate_drives(Judging(stop_scene, textures, renderer, stack_with_panel(solo), settings), drives[2:])
    assert again.calls == solo.calls                          # only the drives it had not kept were judged again


def test_a_kept_drive_of_another_patch_is_judged_again(grey_drives, stop_scene, tmp_path):
    drives, renderer = grey_drives
    settings = replace(SETTINGS, timelines=0)
    first = Judging(stop_scene, {"clean": stop_scene.texture}, renderer, stack_with_panel(), settings)
    evaluate_drives(first, drives[:1], store=DriveStore(tmp_path, judging_key(first)))
    other = torch.full_like(stop_scene.texture, GREY)
    detector = PlantedDetector(0)
    second = Judging(stop_scene, {"clean": other}, renderer, stack_with_panel(detector), settings)
    assert judging_key(second) != judging_key(first)
    out = evaluate_drives(second, drives[:1], store=DriveStore(tmp_path, judging_key(second)))
    assert detector.calls > 0 and not out[0].stops("clean")    # the grey face: never recognised


def test_a_second_run_takes_over_only_the_same_commands_unfinished_folder(tmp_path):
    identity = {"run_dir": "/r", "drive": {"k": 3}}
    done, open_, other = tmp_path / "drive", tmp_path / "drive-2", tmp_path / "drive-3"
    for folder, ident in ((done, identity), (open_, identity), (other, {**identity, "drive": {"k": 2}})):
        write_command(folder, ident)
    (done / "drive.json").write_text(json.dumps({}))
    assert continuing([done, open_, other], identity) == open_
    assert continuing([done, other], identity) is None


def test_the_same_command_continues_in_the_folder_it_named_or_in_the_runs_drive_folders(tmp_path):
    """`python -m physattack.drive run_dir=R [hydra.run.dir=F]` run again after an interrupt continues in F
    when it names F, else in the first unfinished R/drive*, and never in another command's folder."""
    from physattack.cli.door import compose_checked
    from physattack.cli.drive import command_identity, unfinished_report

    run = tmp_path / "run"
    chosen = tmp_path / "elsewhere" / "report"
    named = compose_checked("drive", [f"run_dir={run}", f"hydra.run.dir={chosen}"])
    default = compose_checked("drive", [f"run_dir={run}"])
    assert unfinished_report(named) is None and unfinished_report(default) is None
    write_command(chosen, command_identity(named))
    write_command(run / "drive-2", command_identity(default))
    assert unfinished_report(named) == chosen.resolve()
    assert unfinished_report(default) == (run / "drive-2").resolve()
    other = compose_checked("drive", [f"run_dir={run}", f"hydra.run.dir={chosen}", "drive.settings.k=2"])
    assert unfinished_report(other) is None                     # other settings: a new report, never this one


def test_a_stack_that_joins_its_tiles_boxes_otherwise_gets_another_key(grey_drives, stop_scene):
    """The tiles' search and the crops are part of every verdict: a drive kept under suppression is not reused
    for merging (``drive.stack.merge``), nor one kept with other crops."""
    _, renderer = grey_drives
    keys = set()
    for merge, frame in (("nms", 0.62), ("nmm", 0.62), ("nms", 0.5)):
        stack = stack_with_panel()
        stack.tiled.settings = replace(stack.tiled.settings, merge=merge)
        stack.crop_frame = frame
        keys.add(judging_key(Judging(stop_scene, {"clean": stop_scene.texture}, renderer, stack, SETTINGS)))
    assert len(keys) == 3
