"""The z-buffer rasterizer (physattack/render/raster.py) on small hand-made meshes."""

from __future__ import annotations

import math

import pytest
import torch

from physattack.render import Fragments, MeshRasterizer, look_at_cameras
from physattack.render import backends

H, W = 48, 64
FOV = math.degrees(2 * math.atan(0.4))      # focal 80 px for a 64-px-wide image: 40 px per metre at 2 m


@pytest.fixture(autouse=True, params=["compiled", "torch"])
def backend(request, monkeypatch):
    """Every test here runs on both paths: the compiled CPU kernel and the PyTorch one (CUDA's)."""
    if request.param == "torch":
        monkeypatch.setattr(backends, "numba_kernels", lambda: None)
    return request.param


def _t(v) -> torch.Tensor:
    return torch.tensor([float(v)])


def _cams(distance=2.0, azimuth=0.0, elevation=0.0, size=(H, W)):
    return look_at_cameras(_t(distance), _t(azimuth), _t(elevation), _t(0), _t(FOV), size)


def _quad(x0, x1, y0, y1, z) -> torch.Tensor:
    return torch.tensor([[x0, y0, z], [x1, y0, z], [x1, y1, z], [x0, y1, z]])


def _two_quads(far_first: bool = True):
    """A far quad at z = 0 and a nearer one at z = 0.3 overlapping it; both face +z.

    Returns verts, faces (F×3), normals (F×3) and a boolean F mask of the near quad's faces.
    """
    far, near = _quad(-0.5, 0.3, -0.3, 0.3, 0.0), _quad(-0.1, 0.6, -0.2, 0.4, 0.3)
    verts = torch.cat([far, near] if far_first else [near, far])
    faces = torch.tensor([[0, 1, 2], [0, 2, 3], [4, 5, 6], [4, 6, 7]])
    normals = torch.tensor([[0.0, 0.0, 1.0]]).expand(4, 3)
    is_near = torch.tensor([False, False, True, True]) if far_first else torch.tensor([True, True, False, False])
    return verts, faces, normals, is_near


def _inside(cams, quad: torch.Tensor, margin: float = 1.0) -> torch.Tensor:
    """H×W mask of pixel centres at least ``margin`` px inside the projected (axis-aligned) quad."""
    uv, _ = cams.project(quad)
    lo, hi = uv[0].amin(0) + margin, uv[0].amax(0) - margin
    h, w = cams.image_size
    ys, xs = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
    return (xs > lo[0]) & (xs < hi[0]) & (ys > lo[1]) & (ys < hi[1])


@pytest.mark.parametrize("far_first", [True, False])
def test_nearer_face_wins_whatever_the_face_order(far_first):
    verts, faces, normals, is_near = _two_quads(far_first)
    cams = _cams()
    frags = MeshRasterizer()(verts, faces, cams, normals)
    assert isinstance(frags, Fragments)
    assert frags.pix_to_face.shape == (1, H, W) and frags.bary.shape == (1, H, W, 3)
    far_q, near_q = _quad(-0.5, 0.3, -0.3, 0.3, 0.0), _quad(-0.1, 0.6, -0.2, 0.4, 0.3)
    in_far, in_near = _inside(cams, far_q), _inside(cams, near_q)
    overlap = in_far & in_near
    assert overlap.sum() > 100
    p2f, zbuf = frags.pix_to_face[0], frags.zbuf[0]
    assert is_near[p2f[overlap]].all()
    torch.testing.assert_close(zbuf[overlap], torch.full((int(overlap.sum()),), 1.7), atol=1e-4, rtol=0)
    only_far = in_far & ~_inside(cams, near_q, margin=-1.0)
    assert only_far.sum() > 50
    assert (~is_near[p2f[only_far]]).all()
    torch.testing.assert_close(zbuf[only_far], torch.full((int(only_far.sum()),), 2.0), atol=1e-4, rtol=0)
    empty = ~_inside(cams, far_q, margin=-1.0) & ~_inside(cams, near_q, margin=-1.0)
    assert (p2f[empty] == -1).all() and torch.isinf(zbuf[empty]).all()
    assert (frags.coverage[0][empty] == 0).all()


def test_swapping_face_order_gives_the_same_picture():
    verts, faces, normals, _ = _two_quads(True)
    a = MeshRasterizer()(verts, faces, _cams(azimuth=20.0), normals)
    verts, faces, normals, _ = _two_quads(False)
    b = MeshRasterizer()(verts, faces, _cams(azimuth=20.0), normals)
    # Faces 0,1 <-> 2,3 swap between the two meshes.
    remap = torch.tensor([2, 3, 0, 1])
    mapped = torch.where(b.pix_to_face >= 0, remap[b.pix_to_face.clamp(min=0)], -1)
    assert torch.equal(mapped, a.pix_to_face)
    torch.testing.assert_close(b.zbuf, a.zbuf)
    torch.testing.assert_close(b.coverage, a.coverage)


def test_back_faces_are_culled_from_behind_and_kept_when_culling_is_off():
    verts, faces, normals, is_near = _two_quads()
    cams = _cams(azimuth=180.0)
    culled = MeshRasterizer(cull_backfaces=True)(verts, faces, cams, normals)
    assert (culled.pix_to_face == -1).all() and (culled.coverage == 0).all()
    both = MeshRasterizer(cull_backfaces=False)(verts, faces, cams, normals)
    # From behind (camera on -z) the z = 0 quad is the nearer one.
    far_q = _quad(-0.5, 0.3, -0.3, 0.3, 0.0)
    near_q = _quad(-0.1, 0.6, -0.2, 0.4, 0.3)
    overlap = _inside(cams, far_q) & _inside(cams, near_q)
    assert overlap.sum() > 100
    assert (~is_near[both.pix_to_face[0][overlap]]).all()
    torch.testing.assert_close(both.zbuf[0][overlap], torch.full((int(overlap.sum()),), 2.0), atol=1e-4, rtol=0)


def test_culling_uses_the_normals_it_is_given():
    verts, faces, normals, _ = _two_quads()
    flipped = normals.clone()
    flipped[:2] = -flipped[:2]                       # the far quad now "faces away" from a +z camera
    frags = MeshRasterizer()(verts, faces, _cams(), flipped)
    hit = frags.pix_to_face[frags.pix_to_face >= 0]
    assert hit.numel() > 0 and (hit >= 2).all()
    # Without normals nothing is culled.
    frags = MeshRasterizer()(verts, faces, _cams(azimuth=180.0))
    assert (frags.pix_to_face >= 0).sum() > 0


def test_coverage_is_the_projected_area_and_one_inside():
    quad = _quad(-0.33, 0.41, -0.27, 0.22, 0.0)      # edges fall between pixel centres
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    normals = torch.tensor([[0.0, 0.0, 1.0]]).expand(2, 3)
    cams = _cams()
    frags = MeshRasterizer()(quad, faces, cams, normals)
    uv, _ = cams.project(quad)
    area = float((uv[0, :, 0].amax() - uv[0, :, 0].amin()) * (uv[0, :, 1].amax() - uv[0, :, 1].amin()))
    assert float(frags.coverage.sum()) == pytest.approx(area, rel=0.01)
    inner = _inside(cams, quad, margin=1.0)
    assert (frags.coverage[0][inner] == 1).all()
    assert float(frags.coverage.min()) >= 0 and float(frags.coverage.max()) <= 1
    # Partially covered pixels exist only along the silhouette.
    partial = (frags.coverage[0] > 0) & (frags.coverage[0] < 1)
    assert partial.any() and not (partial & inner).any()


def test_barycentrics_are_perspective_correct():
    # A quad whose UVs equal its xy coordinates (shifted), seen obliquely: the interpolated UV at each
    # pixel must be the UV of the point where that pixel's ray meets the plane z = 0.
    quad = _quad(-0.4, 0.4, -0.4, 0.4, 0.0)
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    uvs = quad[:, :2] + 0.4
    normals = torch.tensor([[0.0, 0.0, 1.0]]).expand(2, 3)
    cams = _cams(distance=1.2, azimuth=55.0, elevation=15.0)
    frags = MeshRasterizer()(quad, faces, cams, normals)
    inner = frags.coverage[0] == 1
    assert inner.sum() > 200
    bary = frags.bary[0][inner]                                      # N×3
    assert torch.allclose(bary.sum(-1), torch.ones(len(bary)), atol=1e-5)
    assert (bary >= -1e-6).all()
    p2f = frags.pix_to_face[0][inner]
    uv_interp = (uvs[faces[p2f]] * bary[..., None]).sum(1)
    # Ray through each pixel centre, intersected with z = 0 (in world coordinates).
    ys, xs = torch.nonzero(inner, as_tuple=True)
    f = float(cams.focal_px[0])
    cx, cy = cams.principal_px[0].tolist()
    dirs_cam = torch.stack([(xs + 0.5 - cx) / f, (ys + 0.5 - cy) / f, torch.ones(len(xs))], -1)
    dirs = dirs_cam @ cams.R[0]                                       # camera -> world (R^T d)
    origin = cams.centers[0]
    t = -origin[2] / dirs[:, 2]
    hit = origin + t[:, None] * dirs
    torch.testing.assert_close(uv_interp, hit[:, :2] + 0.4, atol=2e-4, rtol=0)
    # Depth is along the optical axis: t times the ray's z in camera coordinates (which is 1).
    torch.testing.assert_close(frags.zbuf[0][inner], t, atol=1e-4, rtol=0)


def test_faces_too_near_the_camera_are_dropped():
    verts, faces, normals, is_near = _two_quads()
    # Camera 0.32 m from the origin: the near quad (z = 0.3) is within near_m = 0.05.
    cams = look_at_cameras(_t(0.32), _t(0), _t(0), _t(0), _t(170.0), (16, 16))
    frags = MeshRasterizer(near_m=0.05)(verts, faces, cams, normals)
    hit = frags.pix_to_face[frags.pix_to_face >= 0]
    assert hit.numel() > 0
    assert not is_near[hit].any()


def test_mesh_outside_the_image_gives_empty_fragments():
    verts, faces, normals, _ = _two_quads()
    frags = MeshRasterizer()(verts + torch.tensor([50.0, 0.0, 0.0]), faces, _cams(), normals)
    assert (frags.pix_to_face == -1).all()
    assert torch.isinf(frags.zbuf).all()
    assert (frags.coverage == 0).all()


def test_chunking_and_batching_do_not_change_the_result():
    verts, faces, normals, _ = _two_quads()
    az = torch.tensor([-30.0, 0.0, 35.0])
    cams = look_at_cameras(torch.full((3,), 2.0), az, torch.tensor([5.0, -10.0, 0.0]), torch.zeros(3),
                           torch.full((3,), FOV), (H, W))
    whole = MeshRasterizer()(verts, faces, cams, normals)
    chunked = MeshRasterizer(max_chunk_elems=1)(verts, faces, cams, normals)
    for name in ("pix_to_face", "bary", "zbuf", "coverage"):
        torch.testing.assert_close(getattr(chunked, name), getattr(whole, name))
    for i in range(3):
        single = MeshRasterizer()(verts, faces, _cams(azimuth=float(az[i]),
                                                      elevation=[5.0, -10.0, 0.0][i]), normals)
        assert torch.equal(single.pix_to_face[0], whole.pix_to_face[i])
        torch.testing.assert_close(single.zbuf[0], whole.zbuf[i])


def test_rasterization_carries_no_gradient():
    verts, faces, normals, _ = _two_quads()
    verts = verts.clone().requires_grad_(True)
    frags = MeshRasterizer()(verts, faces, _cams(), normals)
    assert not frags.bary.requires_grad and not frags.zbuf.requires_grad


def test_no_coverage_streak_beyond_a_sliver_apex():
    # A sliver 16 px tall and 0.1 px wide whose long vertical edge lies 0.2 px left of a column of pixel
    # centres, plus a tall quad elsewhere so that the rows past the sliver's apex are rasterized.
    verts = torch.tensor([[0.0075, -0.2, 0.0], [0.0075, 0.2, 0.0], [0.0050, 0.2, 0.0],
                          [-0.7, -0.5, 0.0], [-0.5, -0.5, 0.0], [-0.5, 0.5, 0.0], [-0.7, 0.5, 0.0]])
    faces = torch.tensor([[0, 1, 2], [3, 4, 5], [3, 5, 6]])
    normals = torch.tensor([[0.0, 0.0, 1.0]]).expand(3, 3)
    frags = MeshRasterizer()(verts, faces, _cams(), normals)
    apex_row = 24 + 0.2 * 40                      # image row of the apex (y = -0.2 m): 32
    below = frags.coverage[0, int(apex_row) + 2:, 28:37]
    assert float(below.max()) == 0.0


def test_interior_edges_do_not_thin_the_silhouette():
    # A regular octagon (apothem 0.5 m, 19 px here) triangulated as a fan, as the sign's face is.
    r = 0.5 / math.cos(math.pi / 8)
    a = torch.deg2rad(22.5 + 45.0 * torch.arange(8))
    verts = torch.stack([r * torch.cos(a), r * torch.sin(a), torch.zeros(8)], -1)
    faces = torch.tensor([[0, k, k + 1] for k in range(1, 7)])
    cams = _cams(distance=2.1)
    frags = MeshRasterizer()(verts, faces, cams, torch.tensor([[0.0, 0.0, 1.0]]).expand(6, 3))
    f = float(cams.focal_px[0]) / 2.1                                   # px per metre on the face
    ys, xs = torch.meshgrid(torch.arange(H) + 0.5, torch.arange(W) + 0.5, indexing="ij")
    px, py = (xs - W / 2) / f, -(ys - H / 2) / f
    normals = torch.deg2rad(45.0 * torch.arange(8))
    inside_px = (0.5 - (px[..., None] * torch.cos(normals) + py[..., None] * torch.sin(normals))).amin(-1) * f
    deep = inside_px >= 1.0
    assert deep.sum() > 500
    assert float(frags.coverage[0][deep].min()) == 1.0
