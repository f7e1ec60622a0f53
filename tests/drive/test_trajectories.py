"""Drives (physattack/drive/trajectories.py): the frames follow the car's trajectory, the sign leaves the frame
where geometry says, a region renders as the full frame has it, and sampling is replayable."""

from __future__ import annotations

import math

import pytest
import torch

from physattack.eot import BackgroundBank
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, Drive, DriveSampler, DriveSet, braking_distance_m
from physattack.errors import InputError
from physattack.render import Renderer
from physattack.render.renderer import mask_boxes

SIGN = (0.75, 0.75)
SMALL = Dashcam(width_px=320, height_px=180, hfov_deg=90.0)     # focal 160 px: the sign is 120/d px wide


def test_the_sign_grows_moves_out_and_leaves_the_frame_where_geometry_says():
    drive = Drive(speed_kmh=36.0, lane_offset_m=4.0, start_m=40.0, fps=10.0)      # 1 m per frame
    f = drive.frames(SMALL, SIGN)
    width = f.face_boxes[:, 2] - f.face_boxes[:, 0]
    assert (width[1:] > width[:-1]).all(), "the sign's box must grow as the car nears it"
    assert width[0] == pytest.approx(SMALL.focal_px * 0.75 / 40.0, rel=1e-3)
    centre = (f.face_boxes[:, :2] + f.face_boxes[:, 2:]) / 2
    assert (centre[1:, 0] > centre[:-1, 0]).all() and (centre[1:, 1] < centre[:-1, 1]).all()   # right and up
    # its inner edge (0.375 m right of the path's side of the sign) crosses the right edge when
    # (offset - 0.375) / s = tan(45°): at 3.625 m; the frames stop there
    edge = 4.0 - 0.375
    assert float(f.distance_m[-1]) > edge >= float(f.distance_m[-1]) - 1.0
    assert float(f.face_boxes[-1, 0]) < SMALL.width_px
    assert torch.allclose(f.time_s, torch.arange(len(f)) / 10.0)
    assert torch.allclose(f.distance_m, 40.0 - 10.0 * f.time_s, atol=1e-4)
    # seen from the sign: the camera is towards -x (negative azimuth, growing) and below it
    assert (f.azimuth_deg < 0).all() and (f.azimuth_deg[1:] < f.azimuth_deg[:-1]).all()
    assert float(f.azimuth_deg[0]) == pytest.approx(-math.degrees(math.atan2(4.0, 40.0)), abs=1e-3)
    assert (f.elevation_deg < 0).all()


def test_the_rendered_sign_sits_in_its_projected_box_and_a_region_is_the_full_frame_there(stop_scene):
    drive = Drive(speed_kmh=36.0, lane_offset_m=4.0, start_m=16.0, fps=4.0, noise_std=0.0, blur_sigma_px=0.0)
    frames = drive.frames(SMALL, SIGN)[:4]
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), SMALL)
    full = renderer.render(stop_scene, stop_scene.texture, frames, effects=False)
    assert full.images.shape == (4, 3, 180, 320)
    for box, face in zip(full.boxes, frames.face_boxes):          # the octagon inside the face's square
        assert (box[:2] >= face[:2].floor() - 1).all() and (box[2:] <= face[2:].ceil() + 1).all()
        assert float(box[2] - box[0]) > 0.8 * float(face[2] - face[0])
    plain = renderer.render(stop_scene, torch.zeros_like(stop_scene.texture), frames, effects=False)
    changed = mask_boxes(((full.images - plain.images).abs().sum(1, keepdim=True) > 0.05).float())
    assert torch.allclose(changed, full.boxes, atol=2.0), "texture pixels outside the sign's box"
    region = (150, 40, 300, 120)
    part = renderer.render(stop_scene, stop_scene.texture, frames, region=region, effects=False)
    assert torch.allclose(part.images, full.images[:, :, 40:120, 150:300], atol=1e-5)
    assert torch.equal(part.boxes, full.boxes)


def test_bad_drives_are_one_sentence_naming_the_key():
    with pytest.raises(InputError, match="drive.speed_kmh must be > 0"):
        Drive(speed_kmh=0.0)
    with pytest.raises(InputError, match="drive.fps must be > 0"):
        Drive(fps=-30.0)
    with pytest.raises(InputError, match=r"drive.drives.speeds_kmh must be a non-empty list of numbers > 0"):
        DriveSet(speeds_kmh=[50.0, -10.0])
    with pytest.raises(InputError, match="drive.drives.fps must be > 0"):
        DriveSet(fps=0.0)
    with pytest.raises(InputError, match="outside the dashcam's frame at the start"):
        Drive(lane_offset_m=60.0, start_m=20.0).frames(SMALL, SIGN)


def test_braking_distance_is_reaction_then_constant_deceleration():
    assert braking_distance_m(50.0, 1.0, 6.0) == pytest.approx(50 / 3.6 + (50 / 3.6) ** 2 / 12.0)
    assert braking_distance_m(50.0, 1.0, 6.0) == pytest.approx(30.0, abs=0.1)
    assert braking_distance_m(70.0, 1.0, 6.0) == pytest.approx(51.0, abs=0.1)


def test_drive_set_is_fixed_and_covers_its_conditions():
    ds = DriveSet(speeds_kmh=[30.0, 70.0], lighting=["noon", "low_sun"], lane_offsets_m=[3.5], background_count=3)
    drives = ds.drives()
    assert len(drives) == len(ds) == 4 and drives == ds.drives()
    assert [d.speed_kmh for d in drives[:2]] == [30.0, 70.0]               # speed varies fastest
    assert {(d.speed_kmh, d.light) for d in drives} == {(30.0, "noon"), (70.0, "noon"), (30.0, "low_sun"),
                                                        (70.0, "low_sun")}
    assert [d.background for d in drives] == [0, 1, 2, 0] and len({d.seed for d in drives}) == 4


def test_drive_sampler_is_replayable_and_its_views_follow_the_road():
    s = DriveSampler(background_count=5, distance_m=(10.0, 60.0), lane_offset_m=(2.0, 6.0))
    a, b = s.sample(64, torch.Generator().manual_seed(1)), s.sample(64, torch.Generator().manual_seed(1))
    assert torch.equal(a.distance_m, b.distance_m) and torch.equal(a.azimuth_deg, b.azimuth_deg)
    along = a.distance_m * torch.cos(torch.deg2rad(a.elevation_deg)) * torch.cos(torch.deg2rad(a.azimuth_deg))
    assert ((along > 10.0 - 1e-3) & (along < 60.0 + 1e-3)).all()
    side = a.distance_m * torch.cos(torch.deg2rad(a.elevation_deg)) * torch.sin(torch.deg2rad(a.azimuth_deg))
    assert ((side < -2.0 + 1e-3) & (side > -6.0 - 1e-3)).all()          # the sign on the right of the road
    assert (a.background_index < 5).all()
    # the crop's native resolution is the dashcam's: a far sign spans few sensor pixels
    assert torch.allclose(a.sensor_px * a.distance_m * a.frame, torch.full((64,), 960.0 * 0.75), rtol=1e-4)
    d1, d2 = s.drives(6, torch.Generator().manual_seed(2)), s.drives(6, torch.Generator().manual_seed(2))
    assert d1 == d2 and all(20.0 <= d.speed_kmh <= 90.0 and 2.0 <= d.lane_offset_m <= 6.0 for d in d1)
