"""Look-at pinhole cameras (physattack/render/camera.py), checked against closed-form projections."""

from __future__ import annotations

import math

import pytest
import torch

from physattack.render import Cameras, fov_for_width, look_at_cameras


def _cams(distance=5.0, azimuth=0.0, elevation=0.0, roll=0.0, fov=30.0, size=(96, 128), **kw) -> Cameras:
    t = lambda v: torch.tensor([float(v)])  # noqa: E731
    return look_at_cameras(t(distance), t(azimuth), t(elevation), t(roll), t(fov), size, **kw)


def test_head_on_projection_matches_closed_form():
    h, w, d, fov = 96, 128, 5.0, 30.0
    cams = _cams(distance=d, fov=fov, size=(h, w))
    f = (w / 2) / math.tan(math.radians(fov) / 2)
    pts = torch.tensor([[0.0, 0.0, 0.0], [0.3, 0.0, 0.0], [0.0, 0.2, 0.0], [-0.3, -0.1, 0.5]])
    uv, z = cams.project(pts)
    assert uv.shape == (1, 4, 2) and z.shape == (1, 4)
    # Camera x is world +x, camera y is world -y (image rows go down), depth is d - z_world.
    expected = torch.tensor([[w / 2, h / 2],
                             [w / 2 + f * 0.3 / d, h / 2],
                             [w / 2, h / 2 - f * 0.2 / d],
                             [w / 2 - f * 0.3 / (d - 0.5), h / 2 + f * 0.1 / (d - 0.5)]])
    torch.testing.assert_close(uv[0], expected, atol=1e-4, rtol=0)
    torch.testing.assert_close(z[0], torch.tensor([d, d, d, d - 0.5]), atol=1e-5, rtol=0)


def test_positive_azimuth_moves_the_camera_to_plus_x():
    d, az = 4.0, 40.0
    cams = _cams(distance=d, azimuth=az)
    a = math.radians(az)
    torch.testing.assert_close(cams.centers[0], torch.tensor([d * math.sin(a), 0.0, d * math.cos(a)]),
                               atol=1e-5, rtol=0)
    # The face's right-hand edge (+x) is nearer to this camera than its left-hand edge.
    _, z = cams.project(torch.tensor([[0.3, 0.0, 0.0], [-0.3, 0.0, 0.0]]))
    assert z[0, 0] < z[0, 1]
    torch.testing.assert_close(z[0], torch.tensor([d - 0.3 * math.sin(a), d + 0.3 * math.sin(a)]),
                               atol=1e-5, rtol=0)


def test_off_axis_projection_matches_closed_form():
    h, w, d, fov, az = 96, 128, 4.0, 30.0, 40.0
    cams = _cams(distance=d, azimuth=az, fov=fov, size=(h, w))
    f = (w / 2) / math.tan(math.radians(fov) / 2)
    a = math.radians(az)
    x, y = 0.375, 0.155
    uv, _ = cams.project(torch.tensor([[x, y, 0.0]]))
    # Camera right is (cos a, 0, -sin a); depth is d - x sin a for a point on the z = 0 plane.
    depth = d - x * math.sin(a)
    expected = torch.tensor([w / 2 + f * x * math.cos(a) / depth, h / 2 - f * y / depth])
    torch.testing.assert_close(uv[0, 0], expected, atol=1e-3, rtol=0)


def test_elevation_lifts_the_camera_and_centre_stays_centred():
    cams = _cams(distance=5.0, elevation=30.0, size=(64, 64))
    c = cams.centers[0]
    assert float(c[1]) == pytest.approx(5.0 * math.sin(math.radians(30.0)), abs=1e-5)
    uv, _ = cams.project(torch.zeros(1, 3))
    torch.testing.assert_close(uv[0, 0], torch.tensor([32.0, 32.0]), atol=1e-4, rtol=0)
    # Seen from above, a point in front of the face (+z) appears lower in the image than the centre.
    uv, _ = cams.project(torch.tensor([[0.0, 0.0, 0.5]]))
    assert float(uv[0, 0, 1]) > 32.0


def test_roll_turns_the_image_clockwise():
    cams = _cams(roll=90.0, size=(64, 64))
    uv, _ = cams.project(torch.tensor([[0.3, 0.0, 0.0], [0.0, 0.3, 0.0]]))
    right, up = uv[0]
    # Clockwise by 90°: what was right of centre goes below it, what was above goes to the right.
    assert float(right[0]) == pytest.approx(32.0, abs=1e-4) and float(right[1]) > 32.0
    assert float(up[1]) == pytest.approx(32.0, abs=1e-4) and float(up[0]) > 32.0


def test_rotation_is_orthonormal_and_T_consistent_with_centers():
    g = torch.Generator().manual_seed(0)
    n = 6
    rnd = lambda lo, hi: lo + (hi - lo) * torch.rand(n, generator=g)  # noqa: E731
    cams = look_at_cameras(rnd(2, 20), rnd(-70, 70), rnd(-20, 30), rnd(-10, 10), rnd(5, 40), (32, 48))
    eye = torch.eye(3).expand(n, 3, 3)
    torch.testing.assert_close(cams.R @ cams.R.transpose(1, 2), eye, atol=1e-5, rtol=0)
    torch.testing.assert_close(torch.linalg.det(cams.R), torch.ones(n), atol=1e-5, rtol=0)
    # Each camera's own centre maps to the camera origin; the target maps onto the optical axis.
    cam_c = cams.to_camera(cams.centers.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(cam_c, torch.zeros(n, 3), atol=1e-4, rtol=0)
    assert len(cams) == n


def test_indexing_selects_cameras_that_project_as_those_rows_of_the_batch():
    g = torch.Generator().manual_seed(1)
    n = 7
    rnd = lambda lo, hi: lo + (hi - lo) * torch.rand(n, generator=g)  # noqa: E731
    cams = look_at_cameras(rnd(2, 20), rnd(-70, 70), rnd(-20, 30), rnd(-10, 10), rnd(5, 40), (32, 48))
    idx = torch.tensor([5, 0, 3])
    sub = cams[idx]
    pts = torch.tensor([[0.2, -0.1, 0.0], [-0.3, 0.25, 0.1]])
    assert len(sub) == 3 and sub.image_size == cams.image_size
    assert torch.equal(sub.project(pts)[0], cams.project(pts)[0][idx])
    assert torch.equal(sub.centers, cams.centers[idx])


def test_fov_for_width_frames_the_object():
    w_img, width, d, frame = 200, 0.75, 8.0, 0.6
    fov = fov_for_width(torch.tensor([width]), torch.tensor([d]), torch.tensor([frame]))
    cams = _cams(distance=d, fov=float(fov), size=(100, w_img))
    uv, _ = cams.project(torch.tensor([[-width / 2, 0.0, 0.0], [width / 2, 0.0, 0.0]]))
    assert float(uv[0, 1, 0] - uv[0, 0, 0]) == pytest.approx(frame * w_img, rel=1e-4)


def test_shift_moves_the_target_by_a_share_of_the_image():
    cams = _cams(size=(80, 100), shift=torch.tensor([[0.1, -0.25]]))
    uv, _ = cams.project(torch.zeros(1, 3))
    torch.testing.assert_close(uv[0, 0], torch.tensor([50.0 + 10.0, 40.0 - 20.0]), atol=1e-4, rtol=0)


def test_scaled_cameras_scale_pixel_coordinates():
    cams = _cams(azimuth=25.0, size=(30, 40))
    big = cams.scaled(3)
    assert big.image_size == (90, 120)
    pts = torch.tensor([[0.2, -0.1, 0.0], [-0.3, 0.25, 0.1]])
    torch.testing.assert_close(big.project(pts)[0], cams.project(pts)[0] * 3, atol=1e-4, rtol=0)


def test_batched_points_and_target():
    target = torch.tensor([0.0, -1.0, 0.0])
    t = lambda *v: torch.tensor(v)  # noqa: E731
    cams = look_at_cameras(t(3.0, 6.0), t(0.0, -30.0), t(10.0, 0.0), t(0.0, 0.0), t(20.0, 20.0), (50, 50),
                           target=target)
    uv, z = cams.project(target.view(1, 3))
    torch.testing.assert_close(uv[:, 0], torch.full((2, 2), 25.0), atol=1e-4, rtol=0)
    torch.testing.assert_close(z[:, 0], torch.tensor([3.0, 6.0]), atol=1e-5, rtol=0)
    # B×P×3 points project per camera.
    uv2, _ = cams.project(target.view(1, 1, 3).expand(2, 1, 3))
    torch.testing.assert_close(uv2, uv)
