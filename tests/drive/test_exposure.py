"""The dashcam's auto-exposure (``Dashcam.auto_exposure``): each frame's gain is metered on the whole frame, the
same whichever frames or regions are drawn; a dark street at dusk and night is lifted, a lit one barely; what the
gain lifts past white clips; without it nothing changes."""

from __future__ import annotations

import pytest
import torch

from physattack.drive.trajectories import Dashcam, Drive, DriveRenderer
from physattack.eot import BackgroundBank
from physattack.errors import InputError
from physattack.render import Renderer

CAM = Dashcam(width_px=640, height_px=360, auto_exposure=True)


def drive_frames(scene, light, cam=CAM):
    drive = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=25.0, fps=4.0, noise_std=0.0, blur_sigma_px=0.0,
                  street=7, light=light)
    return drive.frames(cam, tuple(scene.texture_size_m))


def test_auto_exposure_lifts_dark_frames_and_meters_each_frame_on_the_whole_of_it(stop_scene):
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)
    gains = {light: renderer.exposure_gains(drive_frames(stop_scene, light)) for light in ("noon", "dusk", "night")}
    assert float(gains["noon"].max()) < 1.5 < float(gains["dusk"].min())
    assert float(gains["night"].min()) > float(gains["dusk"].max())
    frames = drive_frames(stop_scene, "dusk")
    fresh = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)
    assert torch.allclose(fresh.exposure_gains(frames[2:4]), gains["dusk"][2:4])
    plain = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), Dashcam(width_px=640, height_px=360))
    assert torch.equal(plain.exposure_gains(frames), torch.ones(len(frames)))
    one = frames[len(frames) - 1]
    x0, y0, x1, y1 = (int(v) for v in one.face_boxes[0])
    region = (x0 - 4, y0 - 4, x1 + 4, y1 + 4)
    lifted = renderer.render(stop_scene, stop_scene.texture, one, region=region).images
    fixed = plain.render(stop_scene, stop_scene.texture, one, region=region).images
    assert float(lifted.mean()) > 1.5 * float(fixed.mean())
    night = renderer.render(stop_scene, stop_scene.texture, drive_frames(stop_scene, "night")[-1:], region=region)
    assert float(night.images.max()) == 1.0                          # the lit sheeting clips at white


def test_a_bad_exposure_setting_says_which_key():
    with pytest.raises(InputError, match="dashcam.exposure_target"):
        Dashcam(auto_exposure=True, exposure_target=1.5)
    with pytest.raises(InputError, match="dashcam.exposure_range"):
        Dashcam(exposure_range=(4.0, 0.5))
