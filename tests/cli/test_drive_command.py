"""``python -m physattack.drive run_dir=<run>``: the report, timeline and video beside a finished run's
files (which stay as they were), and one sentence for each bad input."""

from __future__ import annotations

import json
import shutil

import cv2
import pytest
from commands import call, one_sentence, tree_digest

from physattack.cli.drive import main as drive_main

# a small drive on a small dashcam: few frames, few tiles
TINY_DRIVE = ["drive=quick", "drive.dashcam.width_px=640", "drive.dashcam.height_px=360",
              "drive.drives.speeds_kmh=[70]", "drive.drives.lighting=[noon]", "drive.drives.fps=4",
              "drive.drives.start_m=60",
              "drive.settings.video_scale=0.5", "progress=false"]


@pytest.mark.slow
def test_drive_writes_the_report_timeline_and_video_beside_the_run(finished_run, in_tmp):
    before = tree_digest(finished_run)
    assert call(drive_main, [f"run_dir={finished_run}", *TINY_DRIVE]) == 0
    out = finished_run / "drive"
    for name in ("drive.json", "drive.md", "timeline_0.png", "drive_0.mp4"):
        assert (out / name).is_file(), f"{name} missing"
    report = json.loads((out / "drive.json").read_text())
    assert report["stack"] == "two-stage" and report["victims"] == {"detector": "detnet", "classifier": "signnet"}
    assert report["drives"] == 1 and report["stop_rate_clean"]["n"] == 1 and "stop_rate_attacked" in report
    drive = report["per_drive"][0]
    assert drive["speed_kmh"] == 70 and drive["braking_m"] == pytest.approx(51.0, abs=0.1)
    assert drive["judged_frames"] == drive["frames"] == len(drive["timeline"]["attacked"]["distance_m"])
    video = cv2.VideoCapture(str(out / "drive_0.mp4"))
    assert int(video.get(cv2.CAP_PROP_FRAME_COUNT)) == drive["frames"]
    ok, frame = video.read()
    assert ok and frame.shape == (2 * 180, 320, 3)                  # clean above attacked, at half the sensor
    text = (out / "drive.md").read_text()
    assert "two-stage (detnet -> signnet)" in text and "70 km/h (braking 51.0 m)" in text
    # every classifier of the run's evaluation.victims read the same crops: the attacked one and the held out
    panel = report["panel"]["members"]
    assert panel["signnet"]["role"] == "attacked" and panel["zoo_vit"]["role"] == "held-out"
    assert all(r["drives"] == 1 and "attack_success_rate" in r for r in panel.values())
    assert "## Victims over the drives" in text and "| zoo_vit | held-out | vit | render |" in text
    # the victims that learned from no render are their own group (evaluation.data)
    assert panel["warp_resnet10t"]["data"] == "warp" and "| warp_mobilenetv3 | held-out | mobilenet | warp |" in text
    assert set(report["panel"]["held_out_other_data"]["victims"]) <= {"warp_resnet10t", "warp_mobilenetv3"}
    after = tree_digest(finished_run)
    assert {k: v for k, v in after.items() if not k.startswith("drive/")} == before, "the run's own files changed"
    shutil.rmtree(out)


@pytest.mark.parametrize("overrides, words", [
    (["drive.drives.speeds_kmh=[50,0]"], ["drive.drives.speeds_kmh", "> 0"]),
    (["drive.drives.fps=0"], ["drive.drives.fps", "> 0"]),
    (["drive.settings.k=4", "drive.settings.n=3"], ["drive.settings.k", "<= drive.settings.n"]),
    (["drive.drives.start_m=25"], ["braking distance", "drive.drives.start_m=25"]),
    (["drive=none"], ["drive=none judges no drives", "drive=default"]),
    (["footage=dashcam.mp4"], ["footage= needs track=", "four corners"]),
    (["footage=dashcam.mp4", "track=corners.csv"], ["track file", "corners.csv", "does not exist"]),
    (["footage=dashcam.mp4", "track=corners.csv", "footage_options.zoom=2"], ["footage_options.zoom is not a setting", "hfov_deg"]),
])
def test_bad_drive_settings_are_one_sentence_and_leave_nothing(overrides, words, finished_run, in_tmp, capsys):
    before = tree_digest(finished_run)
    option = [] if any(o.startswith("drive=") for o in overrides) else ["drive=quick"]
    assert call(drive_main, [f"run_dir={finished_run}", *option, *overrides]) == 2
    msg = one_sentence(capsys)
    for w in words:
        assert w in msg, msg
    assert tree_digest(finished_run) == before and not (finished_run / "drive").exists()


def test_a_run_folder_without_a_patch_is_one_sentence(tmp_path, in_tmp, capsys):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("seed: 0\n")
    assert call(drive_main, [f"run_dir={tmp_path / 'run'}"]) == 2
    msg = one_sentence(capsys)
    assert "patch.pt" in msg and "run_dir=" in msg
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["config.yaml"]


def test_help_names_the_command_and_its_sets(capsys):
    assert call(drive_main, ["--help"]) == 0
    out = capsys.readouterr().out
    for w in ("python -m physattack.drive", "run_dir=", "default*, none, quick", "braking distance"):
        assert w in out, out


def test_a_drive_over_footage_is_judged_and_reported_as_one(finished_run, in_tmp, stop_scene):
    """A rendered approach written as footage (frames and track) through the command: one footage drive."""
    from physattack.drive.footage import write_footage
    from physattack.drive.render import DriveRenderer
    from physattack.drive.trajectories import Dashcam, Drive
    from physattack.eot import BackgroundBank
    from physattack.render import Renderer

    cam = Dashcam(width_px=640, height_px=360)
    drive = Drive(speed_kmh=30.0, lane_offset_m=3.5, start_m=20.0, fps=4.0)
    frames = drive.frames(cam, tuple(stop_scene.texture_size_m))
    frames = frames[:int((frames.distance_m > 12.0).sum())]
    folder, track = write_footage(DriveRenderer(Renderer(), BackgroundBank(2, seed=5), cam), stop_scene,
                                  stop_scene.texture, frames, in_tmp / "footage")
    before = tree_digest(finished_run)
    out = in_tmp / "footage-drive"
    assert call(drive_main, [f"run_dir={finished_run}", f"footage={folder}", f"track={track}", "footage_options.fps=4",
                             "drive.settings.video_scale=0.5", "progress=false", f"hydra.run.dir={out}"]) == 0
    report = json.loads((out / "drive.json").read_text())
    assert report["drives"] == 1 and report["source"] == "footage"
    drive = report["per_drive"][0]
    assert drive["footage"] == str(folder) and drive["frames"] == len(frames) and drive["light"] == "footage"
    assert drive["speed_kmh"] == pytest.approx(30.0, rel=0.01) and drive["speed_from"] == "track"
    text = (out / "drive.md").read_text()
    assert "1 footage drive through" in text and "the clean drive is the footage itself" in text
    assert (out / "timeline_0.png").is_file() and (out / "drive_0.mp4").is_file()
    assert tree_digest(finished_run) == before
