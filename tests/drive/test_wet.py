"""A wet street (physattack/drive/weather.py, street.py, render.py): water's Fresnel reflectance, a road darker near
the car and mirroring more far ahead, the sign's reflection where the mirror puts it (and the patch's gradient
through it), and regions as the full frame has them."""

from __future__ import annotations

import pytest
import torch

from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, Drive
from physattack.drive.weather import WATER_R0, WEATHER, road_gloss, water_reflectance
from physattack.eot import BackgroundBank
from physattack.render import Renderer

CAM = Dashcam(width_px=640, height_px=360)


def frames_of(scene, weather: str, start_m: float = 12.0):
    drive = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=start_m, fps=2.0, noise_std=0.0, blur_sigma_px=0.0,
                  street=7, weather=weather)
    return drive.frames(CAM, tuple(scene.texture_size_m))[:1]


def render(scene, frames, texture=None, region=None):
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)
    return renderer.render(scene, scene.texture if texture is None else texture, frames, region=region, effects=False)


def test_water_reflects_two_percent_looking_down_and_everything_at_grazing_incidence():
    assert WATER_R0 == pytest.approx(0.020, abs=1e-3)
    assert float(water_reflectance(1.0)) == pytest.approx(WATER_R0)
    assert float(water_reflectance(0.0)) == pytest.approx(1.0)
    gloss = road_gloss([100.5, 181.0, 200.5, 300.5, 359.5], horizon=180.0, focal_px=320.0, weather=WEATHER["wet"])
    assert gloss[0] == 0.0                                                   # above the horizon: no road
    assert all(a > b for a, b in zip(gloss[1:], gloss[2:]))                  # grazing far ahead, steeper near the car
    assert gloss[1] == pytest.approx(WEATHER["wet"].wetness, abs=0.02) and gloss[-1] < 0.2
    assert road_gloss([300.5], 180.0, 320.0, WEATHER["fog"])[0] == 0.0       # a dry road mirrors nothing


def test_a_wet_road_is_darker_near_the_car_and_mirrors_more_far_ahead(stop_scene):
    dry = render(stop_scene, frames_of(stop_scene, "clear")).images[0]
    wet = render(stop_scene, frames_of(stop_scene, "wet")).images[0]
    near = (slice(None), slice(340, 360), slice(280, 320))                  # the lane just ahead of the car
    assert float(wet[near].mean()) < 0.8 * float(dry[near].mean())           # darker: the albedo falls
    far = (slice(None), slice(198, 207), slice(290, 311))                   # the lane 20-25 px below the horizon
    ratio = float(wet[far].mean()) / float(dry[far].mean())
    assert ratio > float(wet[near].mean()) / float(dry[near].mean()) + 0.2   # the mirror grows towards the horizon
    assert ratio > 0.9
    above = (slice(None), slice(0, 150))                                    # nothing above the horizon changes
    assert torch.allclose(wet[above], dry[above], atol=1e-6)


def test_the_sign_is_mirrored_about_its_foot_and_its_patch_gets_a_gradient_through_the_reflection(stop_scene):
    frames = frames_of(stop_scene, "wet")
    texture = stop_scene.texture.clone().requires_grad_(True)
    shown = render(stop_scene, frames, texture)
    black = render(stop_scene, frames, torch.zeros_like(stop_scene.texture)).images[0]
    x0, y0, x1, y1 = (float(v) for v in shown.boxes[0])
    cams = frames.cameras(CAM)
    height = frames.sign_height_m if frames.sign_height_m is not None else CAM.height_m - float(frames.camera_m[0, 1])
    foot = float(cams.project(torch.tensor([[0.0, -height, 0.0]], dtype=cams.R.dtype))[0][0, 0, 1])
    diff = (shown.images[0].detach() - black).abs().sum(0)
    diff[: int(y1) + 2] = 0                                                 # the sign itself (and its post) left out
    rows = torch.arange(diff.shape[0], dtype=torch.float32) + 0.5
    cols = torch.arange(diff.shape[1], dtype=torch.float32) + 0.5
    weight = float(diff.sum())
    assert weight > 1.0, "no reflection of the sign on the wet road"
    row = float((diff.sum(1) * rows).sum()) / weight
    col = float((diff.sum(0) * cols).sum()) / weight
    assert row == pytest.approx(2 * foot - (y0 + y1) / 2, abs=3.0)           # the face's centre, mirrored
    assert col == pytest.approx((x0 + x1) / 2, abs=2.0)
    reflection = (slice(None), slice(int(y1) + 2, None))
    shown.images[0][reflection].sum().backward()
    assert texture.grad is not None and float(texture.grad.abs().sum()) > 0
    dry = render(stop_scene, frames_of(stop_scene, "clear"), stop_scene.texture).images[0]
    dry_black = render(stop_scene, frames_of(stop_scene, "clear"), torch.zeros_like(stop_scene.texture)).images[0]
    assert float((dry - dry_black)[reflection].abs().max()) == 0.0          # a dry road shows no reflection


def test_a_wet_region_is_the_full_frame_there(stop_scene):
    frames = frames_of(stop_scene, "wet", start_m=20.0)
    full = render(stop_scene, frames).images[0]
    part = render(stop_scene, frames, region=(300, 150, 620, 360)).images[0]
    diff = (part - full[:, 150:360, 300:620]).abs().amax(0)
    assert float((diff > 2e-3).float().mean()) < 0.01 and float(diff.mean()) < 2e-3
