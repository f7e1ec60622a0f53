"""A bend in the road before the sign (physattack/drive/curve.py): the road keeps its arc lengths and joins the
straight stretch, the car looks along its lane on the bend, the sign is drawn where the pinhole puts it, the street
bends with the road, and the drive set judges each bend as a condition of its own."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from physattack.drive.curve import Curve
from physattack.drive.render import DriveRenderer
from physattack.drive.trajectories import Dashcam, Drive, DriveSet, face_corners
from physattack.eot import BackgroundBank
from physattack.errors import InputError
from physattack.render import Renderer

CAM = Dashcam(width_px=640, height_px=360)


def test_a_bend_keeps_arc_lengths_and_joins_the_straight_road():
    curve = Curve(100.0, 30.0)
    near = np.array([[-3.5, 0.0, 5.0], [2.0, -2.1, 29.0]])
    assert np.allclose(curve.place(near), near)                                  # straight up to straight_m
    quarter = 30.0 + 100.0 * math.pi / 2
    assert np.allclose(curve.place(np.array([0.0, 0.0, quarter])), [100.0, 0.0, 130.0])
    s = np.linspace(0.0, 120.0, 241)
    line = curve.place(np.stack([np.zeros_like(s), np.zeros_like(s), s], 1))
    assert np.allclose(np.linalg.norm(np.diff(line, axis=0), axis=1), 0.5, atol=1e-4)      # arc length kept
    across = curve.place(np.stack([np.full_like(s, -3.5), np.zeros_like(s), s], 1)) - line
    assert np.allclose(np.linalg.norm(across, axis=1), 3.5)                    # the lane stays 3.5 m from the line
    th = curve.theta(s)
    tangent = np.stack([np.sin(th), np.zeros_like(s), np.cos(th)], 1)          # the road's direction, d line / ds
    assert np.allclose(np.diff(line, axis=0) / 0.5, (tangent[1:] + tangent[:-1]) / 2, atol=1e-3)
    assert np.abs((across * tangent).sum(1)).max() < 1e-9                      # ... straight across the road
    assert torch.allclose(curve.place(torch.tensor(near)), torch.tensor(near))
    with pytest.raises(InputError, match=r"drive.drives.curve_radius_m=10 is tighter than a road bends; give 0"):
        Curve(10.0)


@pytest.mark.parametrize("radius", [80.0, -80.0])
def test_on_a_bend_the_car_looks_along_its_lane_and_the_sign_is_drawn_where_the_pinhole_puts_it(stop_scene, radius):
    size = tuple(stop_scene.texture_size_m)
    drive = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=60.0, fps=2.0, curve_radius_m=radius, noise_std=0.0,
                  blur_sigma_px=0.0)
    frames = drive.frames(CAM, size)
    curve = Curve(radius)
    f = frames[0]
    assert float(f.heading_deg[0]) == pytest.approx(math.degrees(30.0 / radius), abs=1e-3)
    ahead = curve.place(torch.tensor([[-3.5, CAM.height_m - 2.1, float(f.distance_m[0]) - 2.0]], dtype=torch.float64))
    uv, _ = f.cameras(CAM).project(ahead.float())
    assert abs(float(uv[0, 0, 0]) - CAM.width_px / 2) < 5                     # 2 m along the lane: dead ahead
    straight_on = CAM.cameras(f.camera_m).project(ahead.float())[0]          # ... not where a camera down -z looks
    assert abs(float(straight_on[0, 0, 0]) - CAM.width_px / 2) > 100
    assert (float(f.face_boxes[0, 0]) > CAM.width_px / 2) == (radius > 0)   # a right bend: the sign right of ahead
    f = frames[int((frames.distance_m - 34.0).abs().argmin())]               # 4 m into the bend, the sign ~8 px
    assert float(f.heading_deg[0]) != 0.0
    x0, y0, x1, y1 = f.face_boxes[0].tolist()
    image = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM).render(
        stop_scene, stop_scene.texture, f, effects=False).images[0]
    red = (image[0] > 0.45) & (image[1] < 0.25) & (image[2] < 0.25)
    ys, xs = torch.nonzero(red, as_tuple=True)
    assert len(xs) > 10
    assert x0 - 1.5 <= float(xs.min()) and float(xs.max()) <= x1 + 1.5
    assert y0 - 1.5 <= float(ys.min()) and float(ys.max()) <= y1 + 1.5
    corners, _ = f.cameras(CAM).project(face_corners(size))
    assert torch.allclose(corners[0].amin(0), f.face_boxes[0, :2], atol=1e-3)


def test_the_street_bends_with_the_road(stop_scene):
    """Ten metres ahead along the car's lane on a bend is the same asphalt as four metres ahead on the bent street;
    on the street left straight under the same camera the same pixel falls off the road."""
    from physattack.drive.street import Street, street_backdrop

    frames = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=70.0, fps=2.0, street=50003,
                   curve_radius_m=60.0).frames(CAM, tuple(stop_scene.texture_size_m))[0]
    s = float(frames.distance_m[0])
    ground = Curve(60.0).place(torch.tensor([[-2.7, -2.1, s - 10.0], [-2.7, -2.1, s - 4.0]], dtype=torch.float64))
    cams = frames.road_cameras(CAM)
    uv, _ = cams.project(ground.float())
    (u, v), (u4, v4) = ((int(c) for c in p) for p in uv[0])
    lights = frames.params.lights()
    bent = street_backdrop(frames.street, cams, (0, 0, CAM.width_px, CAM.height_px), lights)[0]
    unbent = street_backdrop(Street(50003, 3.5), cams, (0, 0, CAM.width_px, CAM.height_px), lights)[0]
    asphalt = bent[:, v4, u4]
    assert torch.allclose(bent[:, v, u], asphalt, atol=0.01)
    assert not torch.allclose(unbent[:, v, u], asphalt, atol=0.03)


def test_the_drive_set_judges_each_bend_as_a_condition_and_a_blind_bend_starts_at_first_sight():
    from physattack.drive.judge import drive_metrics
    from physattack.drive.report import bend

    drives = DriveSet(curve_radius_m=[0.0, 60.0]).drives()
    assert len(drives) == 36 == len(DriveSet(curve_radius_m=[0.0, 60.0]))
    assert drives[20].describe()["curve_radius_m"] == 60.0 and "curve_radius_m" not in drives[0].describe()
    outcome = lambda d, stops: SimpleNamespace(  # noqa: E731
        drive=d, readings={"clean": 0, "attacked": 0}, stops=lambda name, *_: name == "clean" or stops)
    by_curve = drive_metrics([outcome(drives[0], False), outcome(drives[20], True)])["by_curve"]
    assert by_curve["0"]["attack_success_rate"]["rate"] == 1.0 and by_curve["60"]["attack_success_rate"]["rate"] == 0.0
    assert bend(60.0) == "bends right (radius 60 m)" and bend(-45.0) == "bends left (radius 45 m)"
    blind = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=80.0, fps=2.0, curve_radius_m=40.0).frames(CAM, (0.75, 0.75))
    assert float(blind.distance_m[0]) < 80.0                                 # round the bend, out of sight at first
    x0, _, x1, _ = blind.face_boxes[0].tolist()
    assert x1 > 0 and x0 < CAM.width_px
    with pytest.raises(InputError, match="drive.drives.curve_radius_m"):
        DriveSet(curve_radius_m=[20.0])


def test_the_stacks_search_regions_cover_the_sign_round_every_bend_of_the_drives():
    """A straight road's region of interest misses a sign round a left bend (it shows left of ahead) and on a grade;
    widened by ``covering_roads``, every scale's region holds the sign in each frame at that scale's distances."""
    from physattack.drive.stacks import StackSettings, TiledDetector, covering_roads
    from physattack.victims import load_detnet

    cam, size = Dashcam(), (0.75, 0.75)
    drives = (DriveSet(curve_radius_m=[-60.0, 60.0], lighting=["noon"], speeds_kmh=[70.0]).drives()
              + DriveSet(grade_pct=[12.0, -12.0], lighting=["noon"], speeds_kmh=[70.0]).drives())
    straight = StackSettings()
    assert covering_roads(straight, DriveSet(lighting=["noon"]).drives(), cam, size) is straight
    settings = covering_roads(straight, drives, cam, size)
    assert settings.lateral_m[0] < 0 < straight.lateral_m[0] and settings.height_m[0] < straight.height_m[0]
    detnet = load_detnet()
    missed = {}
    for name, s in (("straight", straight), ("covering", settings)):
        tiled = TiledDetector(detnet, cam, size, s)
        missed[name] = 0
        for drive in drives:
            frames = drive.frames(cam, size)
            for scale, (x0, y0, x1, y1) in zip(tiled.scales, tiled.regions):
                near, far = scale.distance_m
                at = (frames.distance_m >= near) & (frames.distance_m <= far)
                b = frames.face_boxes[at]
                missed[name] += int(((b[:, 0] < x0) | (b[:, 2] > x1) | (b[:, 1] < y0) | (b[:, 3] > y1)).sum())
    assert missed["straight"] > 0 and missed["covering"] == 0, missed


@pytest.mark.parametrize("grade", [8.0, -8.0])
def test_on_a_grade_the_road_tilts_and_the_car_pitches_with_it(grade):
    curve = Curve(0.0, 30.0, grade)
    pts = np.array([[-3.5, -2.1, 20.0], [-3.5, -2.1, 80.0]])
    assert np.allclose(curve.place(pts), [[-3.5, -2.1, 20.0], [-3.5, -2.1 - grade / 100 * 50.0, 80.0]])
    frames = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=70.0, fps=2.0, grade_pct=grade).frames(CAM, (0.75, 0.75))
    f = frames[0]
    assert float(f.slope_deg[0]) == pytest.approx(math.degrees(math.atan(grade / 100)))
    s = float(f.distance_m[0])
    eye = curve.place(torch.tensor([[-3.5, CAM.height_m - 2.1, s - 2.0]], dtype=torch.float64))
    uv, _ = f.cameras(CAM).project(eye.float())
    assert abs(float(uv[0, 0, 1]) - CAM.height_px / 2) < 1.0              # 2 m up the lane at eye height: dead ahead
    level = frames[int((frames.distance_m - 20.0).abs().argmin())]         # on the level stretch: not pitched
    assert float(level.slope_deg[0]) == 0.0


def test_a_crest_hides_the_sign_until_the_car_sees_over_it_and_a_sag_hides_nothing(stop_scene):
    size = tuple(stop_scene.texture_size_m)
    renderer = DriveRenderer(Renderer(), BackgroundBank(2, seed=1000), CAM)

    def red_at(grade, at_m):
        frames = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=80.0, fps=2.0, grade_pct=grade, noise_std=0.0,
                       blur_sigma_px=0.0).frames(CAM, size)
        f = frames[int((frames.distance_m - at_m).abs().argmin())]
        x0, y0, x1, y1 = (int(v) for v in f.face_boxes[0])
        image = renderer.render(stop_scene, stop_scene.texture, f, region=(x0 - 2, y0 - 2, x1 + 3, y1 + 3),
                                effects=False).images[0]
        return float((image[0] - image[1]).amax()), f

    hidden, far = red_at(12.0, 75.0)
    seen, near = red_at(12.0, 45.0)
    assert hidden < 0.15 and seen > 0.4                                     # the red face: behind the crest, then not
    assert far.crest == (30.0, -2.1) and bool(renderer._behind_crest(far, (0, 0, 640, 360)).any())
    past = Drive(speed_kmh=36.0, lane_offset_m=3.5, start_m=25.0, fps=2.0, grade_pct=12.0).frames(CAM, size)[0]
    assert not bool(renderer._behind_crest(past, (0, 0, 640, 360)).any())     # over the crest: nothing hidden
    assert red_at(-12.0, 75.0)[0] > 0.4 and red_at(-12.0, 75.0)[1].crest is None
    with pytest.raises(InputError, match="drive.drives.grade_pct"):
        DriveSet(grade_pct=[20.0])
    from physattack.drive.report import slope
    assert slope(8.0) == "climbs 8 % to a crest" and slope(-6.0) == "falls 6 % to a sag"
    drives = DriveSet(grade_pct=[0.0, 8.0]).drives()
    assert len(drives) == 36 and drives[20].describe()["grade_pct"] == 8.0
