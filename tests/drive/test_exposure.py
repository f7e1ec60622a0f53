"""The dashcam's light: auto-exposure (``Dashcam.auto_exposure``) meters each frame's gain on the whole frame, the
same whichever frames or regions are drawn, lifts a dark street at dusk and night and a lit one barely, clips past
white, and without it changes nothing; a low sun ahead (``sun_ahead``) backlights the sign and veils the frame, most
near the sun."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, Drive
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


def test_a_low_sun_ahead_backlights_the_sign_and_veils_the_frame_most_near_the_sun(stop_scene):
    from physattack.drive.glare import sun_image

    cam = Dashcam(width_px=640, height_px=360)
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), cam)
    frames = {light: Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=25.0, fps=2.0, noise_std=0.0,
                           blur_sigma_px=0.0, light=light).frames(cam, tuple(stop_scene.texture_size_m))[:1]
              for light in ("low_sun", "sun_ahead")}
    sun = sun_image(frames["sun_ahead"].cameras(cam), frames["sun_ahead"].params)[0]
    assert abs(float(sun[0]) - 320) < 1 and float(sun[1]) < 180                    # down the road, above the horizon
    assert bool(sun_image(frames["low_sun"].cameras(cam), frames["low_sun"].params).isnan().all())
    x0, y0, x1, y1 = (int(v) for v in frames["sun_ahead"].face_boxes[0])
    region = (x0 + 2, y0 + 2, x1 - 2, y1 - 2)
    veil = frames["sun_ahead"].glare.veil(frames["sun_ahead"].cameras(cam), (0, 0, 640, 360),
                                          frames["sun_ahead"].params)[0].mean(0)
    assert float(veil[int(sun[1]), int(sun[0])]) > 5 and float(veil[int(sun[1]), int(sun[0])]) > 50 * float(veil[-1, 0])
    unveiled = {light: renderer.render(stop_scene, stop_scene.texture, replace_glare(frames[light]), region=region,
                                       effects=False).images for light in frames}
    assert float(unveiled["sun_ahead"].mean()) < 0.7 * float(unveiled["low_sun"].mean())    # only the sky lights it
    seen = renderer.render(stop_scene, stop_scene.texture, frames["sun_ahead"], region=region, effects=False).images
    assert float((seen - unveiled["sun_ahead"]).mean()) > 0.05                             # the veil over the face


def replace_glare(frames):
    from dataclasses import replace

    return replace(frames, glare=None)


def test_an_hdr_roll_off_keeps_a_bright_red_face_red_where_clipping_turns_it_white():
    from physattack.drive.render import roll_off

    dim = torch.rand(1, 3, 4, 4) * 0.5
    assert torch.equal(roll_off(dim, 0.8), dim)                                     # below the knee: untouched
    red = torch.tensor([7.2, 0.96, 0.8]).view(1, 3, 1, 1)                           # headlit red sheeting at gain 8
    kept, clipped = roll_off(red, 0.8)[0, :, 0, 0], red.clamp(0, 1)[0, :, 0, 0]
    assert float(kept[0]) > 0.99 and float(kept[1]) < 0.5 and float(clipped[1]) > 0.9       # red, not white
    assert torch.allclose(kept / kept[0], red[0, :, 0, 0] / 7.2)                           # the hue kept exactly
    balanced = torch.tensor([16.0, 2.5, 6.0]).view(1, 3, 1, 1)      # the same, white-balanced for 4000-K lamps
    out = roll_off(balanced, 0.8)[0, :, 0, 0]
    assert float(out[0]) > 2.5 * float(out[2])                                      # still red, not magenta
    ramp = roll_off(torch.linspace(0, 3, 50).view(1, 1, 1, 50).expand(1, 3, 1, 50).contiguous(), 0.8)[0, 0, 0]
    assert bool((ramp[1:] >= ramp[:-1]).all()) and float(ramp[-1]) < 1.0            # monotone, white only in the limit
    with pytest.raises(InputError, match="dashcam.highlights must be clip or rolloff"):
        Dashcam(highlights="hdr")


def test_auto_white_balance_takes_a_lamps_cast_out_and_keeps_the_luminance(stop_scene):
    cam = Dashcam(width_px=640, height_px=360, auto_exposure=True, auto_white_balance=True)
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), cam)
    frames = drive_frames(stop_scene, "night_lit", cam)
    balance = renderer.white_balance(frames)
    assert balance.shape == (len(frames), 3) and bool((balance[:, 2] > balance[:, 0]).all())   # orange: blue lifted
    luma = torch.tensor([0.2126, 0.7152, 0.0722])
    images = {awb: DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), replace(cam, auto_white_balance=awb))
              .render(stop_scene, stop_scene.texture, frames[:1]).images[0] for awb in (False, True)}
    spread = {awb: float(img.mean((1, 2)).std()) for awb, img in images.items()}        # the channels' means apart
    assert spread[True] < 0.5 * spread[False]
    assert torch.equal(DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM).white_balance(frames),
                       torch.ones(len(frames), 3))
    assert float(balance[0] @ luma) == pytest.approx(1.0, abs=0.35)
