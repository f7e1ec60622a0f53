"""Occlusion and shadows over a drive (physattack/drive/occlusion.py): a parked truck hides the sign until the car
is near enough to see past it, foliage hides part of the face and leaves the rest (and its gradient) to the
texture, a shadow darkens one side of an edge by day and nothing at night, and the drive set and its report
carry the presets as conditions of their own."""

from __future__ import annotations

import pytest
import torch

from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, Drive, DriveSet
from physattack.eot import BackgroundBank
from physattack.errors import InputError
from physattack.render import Renderer

CAM = Dashcam(width_px=640, height_px=360)


def sign_pixels(scene, occlusion, at_m, light="noon", texture=None, lane_offset_m=6.0):
    """The pixels of the sign's face box in the frame nearest ``at_m`` of a drive with ``occlusion``."""
    drive = Drive(speed_kmh=36.0, lane_offset_m=lane_offset_m, start_m=80.0, fps=2.0, noise_std=0.0,
                  blur_sigma_px=0.0, occlusion=occlusion, light=light, seed=5)
    frames = drive.frames(CAM, tuple(scene.texture_size_m))
    i = int((frames.distance_m - at_m).abs().argmin())
    frames = frames[i]
    x0, y0, x1, y1 = (int(v) for v in frames.face_boxes[0])
    region = (x0 - 2, y0 - 2, x1 + 2, y1 + 2)
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)
    images = renderer.render(scene, scene.texture if texture is None else texture, frames, region=region,
                             effects=False).images
    return images[0, :, 3:-3, 3:-3]


def changed(a, b, tol=0.03):
    return float(((a - b).abs().amax(0) > tol).float().mean())


def test_a_parked_truck_hides_the_sign_until_the_car_is_past_its_rear_corner(stop_scene):
    assert changed(sign_pixels(stop_scene, "truck", 70.0), sign_pixels(stop_scene, "none", 70.0)) > 0.95
    assert changed(sign_pixels(stop_scene, "truck", 36.0), sign_pixels(stop_scene, "none", 36.0)) == 0.0
    with pytest.raises(InputError, match="drive.drives.occlusion=truck needs room"):
        Drive(lane_offset_m=2.5, occlusion="truck").frames(CAM, tuple(stop_scene.texture_size_m))


def test_foliage_hides_part_of_the_face_and_the_rest_still_carries_the_gradient(stop_scene):
    share = changed(sign_pixels(stop_scene, "foliage", 15.0), sign_pixels(stop_scene, "none", 15.0))
    assert 0.1 < share < 0.6
    texture = stop_scene.texture.clone().requires_grad_(True)
    sign_pixels(stop_scene, "foliage", 30.0, texture=texture).sum().backward()
    assert texture.grad is not None and float(texture.grad.abs().sum()) > 0


def test_a_shadow_darkens_one_side_of_its_edge_by_day_and_changes_nothing_at_night(stop_scene):
    lit, shaded = sign_pixels(stop_scene, "none", 20.0), sign_pixels(stop_scene, "shadow", 20.0)
    darker = (shaded.sum(0) < lit.sum(0) - 0.05).float().mean()
    assert 0.1 < float(darker) < 0.9
    assert bool((shaded <= lit + 1e-4).all())                     # a shadow only takes light away
    night = [sign_pixels(stop_scene, o, 20.0, light="night") for o in ("none", "shadow")]
    assert torch.allclose(night[0], night[1], atol=1e-4)


def test_the_drive_set_judges_each_occlusion_and_sign_yaw_as_a_condition_of_its_own():
    from types import SimpleNamespace

    from physattack.drive.judge import drive_metrics

    drives = DriveSet(occlusion=["none", "truck"]).drives()
    assert len(drives) == 36 == len(DriveSet(occlusion=["none", "truck"]))
    assert [d.occlusion for d in drives[17:19]] == ["none", "truck"]
    assert drives[20].describe()["occlusion"] == "truck" and "occlusion" not in drives[0].describe()
    with pytest.raises(InputError, match="drive.drives.occlusion has unknown preset"):
        DriveSet(occlusion=["snow"])
    outcome = lambda d, stops: SimpleNamespace(  # noqa: E731
        drive=d, readings={"clean": 0, "attacked": 0}, stops=lambda name, *_: name == "clean" or stops)
    metrics = drive_metrics([outcome(drives[0], False), outcome(drives[20], True)])
    assert metrics["by_occlusion"]["none"]["attack_success_rate"]["rate"] == 1.0
    assert metrics["by_occlusion"]["truck"]["attack_success_rate"]["rate"] == 0.0
    assert "by_occlusion" not in drive_metrics([outcome(drives[0], False)])
    turned = DriveSet(sign_yaw_deg=[-15.0, 15.0]).drives()
    by_yaw = drive_metrics([outcome(turned[0], False), outcome(turned[18], True)])["by_sign_yaw"]
    assert by_yaw["-15"]["attack_success_rate"]["rate"] == 1.0 and by_yaw["15"]["attack_success_rate"]["rate"] == 0.0


def test_a_sign_turned_on_its_post_projects_where_the_road_sees_it_and_the_street_stays_put(stop_scene):
    from physattack.drive.trajectories import face_corners, turn

    size = tuple(stop_scene.texture_size_m)
    straight = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=30.0, fps=2.0, street=7).frames(CAM, size)
    turned = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=30.0, fps=2.0, street=7,
                   sign_yaw_deg=15.0).frames(CAM, size)
    corners = face_corners(size)
    uv, _ = turned.cameras(CAM).project(corners)
    uv_road, _ = turned.road_cameras(CAM).project(corners @ turn(15.0).float())      # the corners turned on the road
    assert torch.allclose(uv, uv_road, atol=1e-3)
    assert torch.allclose(turned.road_cameras(CAM).R, straight.cameras(CAM).R.to(torch.float32), atol=1e-6)
    # seen from the turned face, the car is 15° further round: the view the classifier side is told of
    assert torch.allclose(turned.azimuth_deg, straight.azimuth_deg + 15.0, atol=1e-3)
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)
    a, b = (renderer.render(stop_scene, stop_scene.texture, f[:1], effects=False).images[0] for f in (straight, turned))
    x0, y0, x1, y1 = (int(v) for v in straight.face_boxes[0])
    outside = torch.ones(a.shape[1:], dtype=torch.bool)
    outside[max(0, y0 - 40):y1 + 120, max(0, x0 - 40):x1 + 40] = False      # the sign and its post
    assert torch.allclose(a[:, outside], b[:, outside], atol=1e-5)
    with pytest.raises(InputError, match="drive.drives.sign_yaw_deg"):
        DriveSet(sign_yaw_deg=[90.0])


def test_a_sign_mounted_per_mutcd_sits_at_its_height_and_its_post_reaches_the_road(stop_scene):
    """The bottom 2.1 m above the road (MUTCD, urban): the face's centre 2.475 m up, in the frame where the pinhole
    puts it; the scene's 2.1-m post is lengthened to the road; a sign lower than the scene's post is refused."""
    size = tuple(stop_scene.texture_size_m)
    frames = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=20.0, fps=2.0, sign_height_m=2.475).frames(CAM, size)
    x0, y0, x1, y1 = frames.face_boxes[0].tolist()
    up = 2.475 - CAM.height_m                                       # the face centre above the lens
    assert (y0 + y1) / 2 == pytest.approx(CAM.height_px / 2 - CAM.focal_px * up / float(frames.distance_m[0]), abs=0.5)
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)
    post = renderer._post_below(stop_scene.mesh.verts, frames)
    ys = post.polygons[0].points[:, 1]
    assert ys.min() == pytest.approx(-2.475) and ys.max() > -2.1      # from the road up past the scene post's foot
    assert renderer._post_below(stop_scene.mesh.verts, Drive(start_m=20.0).frames(CAM, size)) is None
    low = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=20.0, fps=2.0, sign_height_m=1.8).frames(CAM, size)
    with pytest.raises(InputError, match="drive.drives.sign_height_m=1.8 puts the scene's 2.1-m post below the road"):
        renderer.render(stop_scene, stop_scene.texture, low[:1], effects=False)
