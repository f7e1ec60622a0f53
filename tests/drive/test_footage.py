"""Drives over footage (physattack/drive/footage.py): a rendered approach written as footage with its track comes
back as the same drive — the composited sign on its corners, the same verdicts as the simulated drive — and
the track formats, videos and bad inputs behave as documented."""

from __future__ import annotations

import json
import math

import cv2
import numpy as np
import pytest
import torch

from physattack.drive.build import Perception, footage_evaluation, perception_stack
from physattack.drive.footage import (Footage, FootageOptions, FootageRenderer, footage_drive, read_track,
                                      write_footage)
from physattack.drive.judge import DriveSettings, Judging, evaluate_drives
from physattack.drive.stacks import SearchScale, StackSettings
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, Drive
from physattack.eot import BackgroundBank
from physattack.errors import InputError
from physattack.render import Renderer

# a 960×540 dashcam with the 1920×1080 one's focal length (960 px): signs as large, a quarter of the pixels
CAM = Dashcam(width_px=960, height_px=540, hfov_deg=2 * math.degrees(math.atan(0.5)))
DRIVE = Drive(speed_kmh=30.0, lane_offset_m=3.5, start_m=20.0, light="noon", background=3, seed=7)   # braking 14.1 m
SETTINGS = DriveSettings(timelines=0, videos=0, early_stop=False)
STACK = StackSettings(scales=[SearchScale(2.0, (40.0, 85.0)), SearchScale(1.0, (9.0, 45.0))])


@pytest.fixture(scope="module")
def footage(stop_scene, tmp_path_factory):
    """The clean drive to 13 m rendered as PNG frames, with its track, and the simulated world it came from."""
    renderer = DriveRenderer(Renderer(), BackgroundBank(4, seed=1000), CAM)
    frames = DRIVE.frames(CAM, tuple(stop_scene.texture_size_m))
    frames = frames[:int((frames.distance_m > 13.0).sum())]
    folder, track = write_footage(renderer, stop_scene, stop_scene.texture, frames, tmp_path_factory.mktemp("footage"))
    return folder, track, frames, renderer


def blue_face(scene) -> torch.Tensor:
    """The sign's face painted blue: no stack reads it as a stop sign."""
    texture = scene.texture.clone()
    texture[:, scene.face_mask[0] > 0.5] = torch.tensor([0.15, 0.45, 0.9])[:, None]
    return texture


def test_a_footage_drive_of_a_rendered_approach_has_the_simulated_drives_verdicts(stop_scene, footage):
    from physattack.victims import load_detnet, load_signnet

    folder, track, frames, renderer = footage
    perception = Perception(load_detnet(), load_signnet(), {"detector": "detnet", "classifier": "signnet"},
                            crop_px=96, crop_frame=0.62)
    textures = {"clean": stop_scene.texture, "attacked": blue_face(stop_scene)}
    stack = perception_stack(perception, stop_scene, CAM, SETTINGS, STACK)
    sim = evaluate_drives(Judging(stop_scene, textures, renderer, stack, SETTINGS), [DRIVE])[0]
    evaluation = footage_evaluation(stop_scene, folder, track, perception, SETTINGS, STACK,
                                    FootageOptions(hfov_deg=CAM.hfov_deg))
    drive = evaluation.drives[0]
    # distance and speed by the corners alone
    assert drive.speed_source == "track" and drive.speed_kmh == pytest.approx(30.0, rel=0.01)
    assert drive.start_m == pytest.approx(20.0, abs=0.05) and drive.lane_offset_m == pytest.approx(3.5, abs=0.05)
    assert torch.allclose(drive.frames().distance_m, frames.distance_m, atol=0.05)
    real = evaluate_drives(Judging(stop_scene, textures, evaluation.renderer, evaluation.stack, SETTINGS),
                           evaluation.drives)[0]
    assert sim.stops("clean") and not sim.stops("attacked")          # the planted drive is not trivial...
    for name in textures:                                             # ...and the footage drive judges it the same
        assert real.stops(name) == sim.stops(name)
        assert real.recognised[name] == sim.recognised[name]
    assert torch.equal(real.readings["clean"].correct, sim.readings["clean"].correct)
    assert "footage itself" in evaluation.setup and "estimated from the track" in evaluation.setup


def test_the_composited_patch_lands_on_its_projected_pixels(stop_scene, footage):
    """Four green squares inside the face, composited onto the footage, have their centroids within 1 px of
    where the camera projects their centres."""
    folder, track, frames, renderer = footage
    texture, centres = stop_scene.texture.clone(), []
    h, w = texture.shape[1:]
    w_m, h_m = stop_scene.texture_size_m
    for fy, fx in ((0.3, 0.3), (0.3, 0.62), (0.62, 0.3), (0.62, 0.62)):          # top-left corners, 8 % squares
        texture[:, int(fy * h):int((fy + 0.08) * h), int(fx * w):int((fx + 0.08) * w)] = \
            torch.tensor([0.0, 1.0, 0.0])[:, None, None]
        centres.append([(fx + 0.04 - 0.5) * w_m, (0.5 - fy - 0.04) * h_m, 0.0])
    video = Footage(folder)
    drive = footage_drive(video, read_track(track), CAM, tuple(stop_scene.texture_size_m), SETTINGS.braking_m)
    renderer = FootageRenderer(video, CAM, blur_sigma_px=0.0)
    for i in (0, len(frames) // 2, len(frames) - 1):
        change = (renderer.render(stop_scene, texture, drive.frames()[i]).images[0]
                  - renderer.render(stop_scene, stop_scene.texture, drive.frames()[i]).images[0])
        green = (change[1] - change[0]).clamp(min=0).numpy()
        count, labels = cv2.connectedComponents((green > 0.3).astype(np.uint8))
        assert count == 5, f"frame {i}: {count - 1} markers"
        found = []
        for k in range(1, count):
            weight = green * (labels == k)
            ys, xs = np.mgrid[:weight.shape[0], :weight.shape[1]]
            found.append(((weight * xs).sum() / weight.sum() + 0.5, (weight * ys).sum() / weight.sum() + 0.5))
        uv, _ = CAM.cameras(frames.camera_m[i:i + 1]).project(torch.tensor(centres))
        for u, v in uv[0].tolist():
            assert min(math.hypot(u - x, v - y) for x, y in found) < 1.0, (i, (u, v), found)
    # the clean texture gives the footage itself
    clean = renderer.render(stop_scene, stop_scene.texture, drive.frames()[:1]).images[0]
    assert torch.equal((clean * 255).round().to(torch.uint8),
                       torch.from_numpy(cv2.cvtColor(cv2.imread(str(folder / "000000.png")), cv2.COLOR_BGR2RGB)
                                        ).permute(2, 0, 1))


def test_every_track_format_reads_the_same_corners_in_any_order(tmp_path):
    corners = {3: np.array([[10.0, 20.0], [30.5, 21.0], [31.0, 40.0], [9.5, 41.5]]),
               4: np.array([[11.0, 20.0], [32.5, 21.0], [33.0, 42.0], [10.5, 43.5]])}
    shuffled = {i: c[[2, 0, 3, 1]] for i, c in corners.items()}
    pts = lambda c: ";".join(f"{x},{y}" for x, y in c)  # noqa: E731
    (tmp_path / "t.csv").write_text("frame,x_tl,y_tl,x_tr,y_tr,x_br,y_br,x_bl,y_bl\n" + "".join(
        f"{i}," + ",".join(str(v) for v in c.reshape(-1)) + "\n" for i, c in shuffled.items()))
    (tmp_path / "t.json").write_text(json.dumps({"frames": [{"frame": i, "corners": c.tolist()}
                                                            for i, c in shuffled.items()]}))
    (tmp_path / "video.xml").write_text(
        "<annotations><track id='0' label='stop sign'>"
        + "".join(f"<polygon frame='{i}' outside='0' points='{pts(c)}'/>" for i, c in shuffled.items())
        + "<polygon frame='5' outside='1' points='0,0;1,0;1,1;0,1'/></track></annotations>")
    (tmp_path / "images.xml").write_text(
        "<annotations>" + "".join(f"<image id='{i}' name='f{i}.png'><points label='sign' points='{pts(c)}'/></image>"
                                  for i, c in shuffled.items()) + "<image id='9' name='f9.png'/></annotations>")
    (tmp_path / "coco.json").write_text(json.dumps({
        "images": [{"id": 1, "file_name": "frame_000003.png"}, {"id": 2, "file_name": "frame_000004.png"},
                   {"id": 3, "file_name": "frame_000005.png"}],
        "annotations": [{"image_id": k, "keypoints": [v for x, y in shuffled[i] for v in (x, y, 2)]}
                        for k, i in ((1, 3), (2, 4))]
        + [{"image_id": 3, "keypoints": [1, 1, 2, 2, 1, 2, 2, 2, 2, 0, 0, 0]}]}))       # a corner unlabelled
    for name in ("t.csv", "t.json", "video.xml", "images.xml", "coco.json"):
        track = read_track(tmp_path / name)
        assert sorted(track.corners) == [3, 4], name
        for i, c in corners.items():
            assert np.allclose(track.corners[i], c), (name, track.corners[i])


def test_a_video_is_read_forwards_and_back(tmp_path):
    path, size = tmp_path / "clip.avi", (64, 48)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 25.0, size)
    for i in range(6):
        writer.write(np.full((48, 64, 3), 40 * i, np.uint8))
    writer.release()
    video = Footage(path)
    assert (video.width, video.height, video.count, video.fps) == (64, 48, 6, 25.0)
    assert [round(video.frame(i).mean() / 40) for i in (4, 5, 1, 2)] == [4, 5, 1, 2]
    (tmp_path / "notes.mp4").write_text("not a video")
    with pytest.raises(InputError, match="OpenCV cannot read the video .*notes.mp4.*folder of PNG"):
        Footage(tmp_path / "notes.mp4")


@pytest.mark.parametrize("edit, words", [
    (lambda c: {i: v for i, v in c.items() if i not in (5, 6)}, ["no corners for 2 frame(s)", "5, 6", "annotate"]),
    (lambda c: {**c, 20: c[20] + [900.0, 0.0]}, ["leave the 960×540 frame", "20", "end the track"]),
    (lambda c: {i: v for i, v in c.items() if i < 12}, ["ends with the sign", "before the braking point"]),
    (lambda c: {i: v for i, v in c.items() if i > 22}, ["starts with the sign", "inside the braking distance"]),
])
def test_a_track_the_drive_cannot_be_judged_on_is_one_sentence(edit, words, footage, stop_scene):
    folder, track, _, _ = footage
    corners = edit(read_track(track).corners)
    bad = type(read_track(track))(corners, "bad.csv")
    with pytest.raises(InputError) as err:
        footage_drive(Footage(folder), bad, CAM, tuple(stop_scene.texture_size_m), SETTINGS.braking_m)
    msg = str(err.value)
    assert msg.count(". ") == 0 and msg.endswith("."), msg
    for w in words:
        assert w in msg, msg


def test_the_renderer_refuses_a_region_outside_the_frame(footage, stop_scene):
    folder, _, frames, _ = footage
    renderer = FootageRenderer(Footage(folder), CAM)
    with pytest.raises(InputError, match="not inside the 960×540 frame"):
        renderer.render(stop_scene, stop_scene.texture, None, region=(0, 0, 2000, 10))
