"""The renderer end to end (physattack/render/renderer.py and shade.py): geometry lands on the right
pixels, nearer surfaces hide farther ones, shading follows the light, and gradients reach exactly the
texels a camera sees."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from physattack.patch import sticker_for_scene
from physattack.render import Lights, PhongShader, Renderer, fov_for_width, look_at_cameras, mask_boxes
from physattack.scene import Material, Mesh, Scene, load_scene


@pytest.fixture(scope="module")
def stop():
    return load_scene("stop_sign")


def _t(*v) -> torch.Tensor:
    return torch.tensor([float(x) for x in v])


def _cams(distance=5.0, azimuth=0.0, elevation=0.0, roll=0.0, frame=0.6, size=96, width_m=0.75):
    fov = fov_for_width(_t(width_m), _t(distance), _t(frame))
    return look_at_cameras(_t(distance), _t(azimuth), _t(elevation), _t(roll), fov, (size, size))


def _lights(ambient=1.0, diffuse=0.0, direction=(0.0, 0.0, 1.0), color=(1.0, 1.0, 1.0), b=1) -> Lights:
    d = F.normalize(torch.tensor([direction], dtype=torch.float32), dim=-1)
    return Lights(ambient=torch.full((b,), ambient), diffuse=torch.full((b,), diffuse),
                  direction=d.expand(b, 3), color=torch.tensor([color]).expand(b, 3))


def _front_octagon(scene: Scene) -> torch.Tensor:
    mesh = scene.mesh
    idx = mesh.faces[mesh.faces_of({"face"})].unique()
    return mesh.verts[idx]


# --------------------------------------------------------------------------- geometry lands on pixels


def _silhouette(stop, azimuth):
    """Rendered object mask and, per pixel, the signed distance (px, + inside) of its centre to the
    projected sign plate (front and back octagons)."""
    cams = _cams(azimuth=azimuth)
    views = Renderer().render(stop, stop.texture, cams, _lights())
    plate = stop.mesh.verts[stop.mesh.faces[stop.object_faces].unique()]
    uv, _ = cams.project(plate)
    hull = cv2.convexHull(uv[0].numpy().astype(np.float32))
    dist = np.array([[cv2.pointPolygonTest(hull, (x + 0.5, y + 0.5), True) for x in range(96)]
                     for y in range(96)])
    return views, cams, hull, dist


@pytest.mark.parametrize("azimuth", [0.0, 40.0])
def test_stop_sign_silhouette_matches_projected_corners(stop, azimuth):
    views, cams, hull, dist = _silhouette(stop, azimuth)
    assert views.images.shape == (1, 3, 96, 96)
    corners = _front_octagon(stop)
    uv, _ = cams.project(corners)
    uv = uv[0]
    if azimuth == 0.0:
        # Head-on, the rightmost corner lies at W/2 + frame·W/2: independent of cameras.project.
        assert float(uv[:, 0].max()) == pytest.approx(48 + 0.6 * 48, abs=1e-3)
        assert float(uv[:, 1].min()) == pytest.approx(48 - 0.6 * 48, abs=1e-3)
    else:
        # Seen from the right, the right-hand (+x) edge is nearer and so taller than the left one.
        right = uv[corners[:, 0] > 0.3]
        left = uv[corners[:, 0] < -0.3]
        assert float(np.ptp(right[:, 1].numpy())) > float(np.ptp(left[:, 1].numpy())) + 1.0
    x0, y0, x1, y1 = views.boxes[0].tolist()
    lo, hi = uv.amin(0), uv.amax(0)
    assert abs(x0 - float(lo[0])) <= 1.0 and abs(x1 - float(hi[0])) <= 1.0
    assert abs(y0 - float(lo[1])) <= 1.0 and abs(y1 - float(hi[1])) <= 1.0
    mask = views.object_mask[0, 0].numpy()
    # The thresholded mask agrees with the projected outline everywhere but within a pixel of it.
    assert np.all((mask > 0.5)[dist >= 1.0])
    assert not np.any((mask > 0.5)[dist <= -1.0])
    # Anti-aliased coverage sums to the projected area (box filter).
    assert float(views.object_mask.sum()) == pytest.approx(cv2.contourArea(hull), rel=0.01)


@pytest.mark.parametrize("azimuth", [
    0.0,
    40.0,
])
def test_no_coverage_beyond_the_silhouette(stop, azimuth):
    views, _, _, dist = _silhouette(stop, azimuth)
    mask = views.object_mask[0, 0].numpy()
    alpha = views.alpha[0, 0].numpy()
    outside = dist <= -1.0
    assert float(mask[outside].max()) == 0.0
    assert float(alpha[outside & (np.arange(96)[:, None] < 60)].max()) == 0.0    # above the post's reach


@pytest.mark.parametrize("azimuth", [0.0, 40.0])
def test_full_coverage_inside_the_silhouette(stop, azimuth):
    views, _, _, dist = _silhouette(stop, azimuth)
    mask = views.object_mask[0, 0].numpy()
    assert float(mask[dist >= 1.0].min()) == pytest.approx(1.0, abs=1e-4)


def test_projected_vertex_pixel_is_covered_just_inside(stop):
    cams = _cams(size=64)
    views = Renderer().render(stop, stop.texture, cams, _lights())
    uv, _ = cams.project(_front_octagon(stop))
    mask = views.object_mask[0, 0]
    centre = torch.tensor([32.0, 32.0])
    for p in uv[0]:
        inward = p + (centre - p) / (centre - p).norm() * 1.5       # 1.5 px towards the centre
        outward = p - (centre - p) / (centre - p).norm() * 1.5
        assert mask[int(inward[1]), int(inward[0])] > 0.5
        assert mask[int(outward[1]), int(outward[0])] == 0


def test_post_is_drawn_but_not_in_the_object_mask(stop):
    cams = _cams(frame=0.3, size=64)       # the sign fills 30 % of the width; the post runs below it
    views = Renderer().render(stop, stop.texture, cams, _lights())
    x0, y0, x1, y1 = (int(v) for v in views.boxes[0].tolist())
    below = slice(y1 + 2, 64)
    assert float(views.alpha[0, 0, below, 31:33].min()) > 0.5
    assert float(views.object_mask[0, 0, below].max()) == 0.0
    assert float(views.alpha[0, 0, :y0 - 1].max()) == 0.0
    assert torch.all(views.object_mask <= views.alpha + 1e-6)


def test_backgrounds_show_where_nothing_covers_them(stop):
    cams = _cams(size=48)
    bg = torch.rand(1, 3, 48, 48, generator=torch.Generator().manual_seed(0))
    views = Renderer().render(stop, stop.texture, cams, _lights(), bg)
    empty = views.alpha[0, 0] == 0
    assert empty.sum() > 100
    assert torch.equal(views.images[0][:, empty], bg[0][:, empty])
    full = views.alpha[0, 0] == 1
    black = Renderer().render(stop, stop.texture, cams, _lights())
    torch.testing.assert_close(views.images[0][:, full], black.images[0][:, full])
    assert torch.isinf(views.depth[0, 0][empty]).all()
    assert float(views.depth[0, 0][full].max()) == pytest.approx(5.0, abs=0.01)


def test_texture_is_mapped_upright_and_unmirrored():
    scene = load_scene("speed_limit_45")      # "SPEED LIMIT 45": no flip of it looks like itself
    views = Renderer().render(scene, scene.texture, _cams(frame=0.8, size=128), _lights())
    x0, y0, x1, y1 = (int(v) for v in views.boxes[0].tolist())
    crop = views.images[0, :, y0 + 1:y1 - 1, x0 + 1:x1 - 1].mean(0)
    tex = F.interpolate(scene.texture[None], size=(y1 - y0, x1 - x0), mode="area")[0].mean(0)[1:-1, 1:-1]

    def corr(a, b):
        a, b = a - a.mean(), b - b.mean()
        return float((a * b).sum() / (a.norm() * b.norm()))

    assert corr(crop, tex) > 0.95
    assert corr(crop, tex.flip(0)) < 0.7
    assert corr(crop, tex.flip(1)) < 0.8
    assert float((crop - tex).abs().mean()) < 0.05


def test_back_of_the_sign_is_grey_from_behind(stop):
    views = Renderer().render(stop, stop.texture, _cams(azimuth=180.0, size=48), _lights(ambient=1.0))
    centre = views.images[0, :, 16:22, 14:20].flatten(1).mean(1)     # clear of the post
    back = torch.tensor(stop.mesh.materials[1].diffuse)
    assert stop.mesh.materials[1].name == "back"
    torch.testing.assert_close(centre, back, atol=1e-4, rtol=0)


def test_batched_textures_render_per_view(stop):
    cams = look_at_cameras(_t(5, 5), _t(0, 0), _t(0, 0), _t(0, 0),
                           fov_for_width(_t(0.75, 0.75), _t(5, 5), _t(0.6, 0.6)), (32, 32))
    textures = torch.stack([stop.texture, 1 - stop.texture])
    views = Renderer().render(stop, textures, cams, _lights(b=2))
    single = Renderer().render(stop, 1 - stop.texture, _cams(size=32), _lights())
    torch.testing.assert_close(views.images[1], single.images[0])
    assert float((views.images[0] - views.images[1]).abs().max()) > 0.5


def test_supersampling_agrees_with_analytic_antialiasing(stop):
    cams = _cams(azimuth=30.0, elevation=10.0, size=64)
    one = Renderer(supersample=1).render(stop, stop.texture, cams, _lights(0.6, 0.5, (0.3, 0.5, 1.0)))
    two = Renderer(supersample=2).render(stop, stop.texture, cams, _lights(0.6, 0.5, (0.3, 0.5, 1.0)))
    assert two.images.shape == one.images.shape
    assert float((one.alpha - two.alpha).abs().mean()) < 0.01
    assert float((one.images - two.images).abs().mean()) < 0.02
    assert torch.all((one.boxes - two.boxes).abs() <= 1)


def test_mask_boxes():
    mask = torch.zeros(3, 1, 10, 12)
    mask[0, 0, 2:5, 3:9] = 1.0
    mask[1, 0, 7, 11] = 0.9
    mask[2, 0, 4, 4] = 0.4                      # below the threshold: empty
    boxes = mask_boxes(mask)
    assert boxes.tolist() == [[3.0, 2.0, 9.0, 5.0], [11.0, 7.0, 12.0, 8.0], [0.0, 0.0, 0.0, 0.0]]
    assert mask_boxes(mask, threshold=0.3)[2].tolist() == [4.0, 4.0, 5.0, 5.0]


# --------------------------------------------------------------------------- occlusion and shading


def _flat_scene(quads, colors, specular=0.0) -> Scene:
    """Axis-aligned quads (x0, x1, y0, y1, z) facing +z, each with its own flat material."""
    verts, faces = [], []
    for k, (x0, x1, y0, y1, z) in enumerate(quads):
        verts += [[x0, y0, z], [x1, y0, z], [x1, y1, z], [x0, y1, z]]
        faces += [[4 * k, 4 * k + 1, 4 * k + 2], [4 * k, 4 * k + 2, 4 * k + 3]]
    nf = len(faces)
    mesh = Mesh(verts=torch.tensor(verts), faces=torch.tensor(faces), uvs=torch.full((1, 2), 0.5),
                face_uvs=torch.zeros(nf, 3, dtype=torch.long), normals=torch.tensor([[0.0, 0.0, 1.0]]),
                face_normals=torch.zeros(nf, 3, dtype=torch.long),
                face_materials=torch.arange(nf) // 2,
                materials=tuple(Material(f"m{k}", c, specular=specular) for k, c in enumerate(colors)))
    return Scene(name="quads", class_name="quads", mesh=mesh, texture=torch.zeros(3, 4, 4),
                 face_mask=torch.ones(1, 4, 4), texture_size_m=(1.0, 1.0))


RED, BLUE = (0.9, 0.1, 0.1), (0.1, 0.2, 0.9)
FAR_Q, NEAR_Q = (-0.5, 0.3, -0.3, 0.3, 0.0), (-0.1, 0.6, -0.2, 0.4, 0.3)


@pytest.mark.parametrize("near_first", [False, True])
def test_nearer_quad_colour_shows_in_the_overlap(near_first):
    quads, colors = [FAR_Q, NEAR_Q], [RED, BLUE]
    if near_first:
        quads, colors = quads[::-1], colors[::-1]
    scene = _flat_scene(quads, colors)
    cams = _cams(distance=2.0, frame=0.6, size=64, width_m=1.1)
    views = Renderer().render(scene, scene.texture, cams, _lights())
    uv, _ = cams.project(torch.tensor([[0.1, 0.1, 0.3], [-0.35, -0.15, 0.0], [0.5, 0.3, 0.3]]))
    overlap, far_only, near_only = ([int(p[1]), int(p[0])] for p in uv[0])
    torch.testing.assert_close(views.images[0, :, overlap[0], overlap[1]], torch.tensor(BLUE))
    torch.testing.assert_close(views.images[0, :, far_only[0], far_only[1]], torch.tensor(RED))
    torch.testing.assert_close(views.images[0, :, near_only[0], near_only[1]], torch.tensor(BLUE))
    assert float(views.depth[0, 0, overlap[0], overlap[1]]) == pytest.approx(1.7, abs=1e-4)


@pytest.mark.parametrize("angle", [0.0, 30.0, 60.0, 100.0])
def test_lambert_shading_follows_the_light_angle(angle):
    scene = _flat_scene([(-0.5, 0.5, -0.5, 0.5, 0.0)], [(0.8, 0.6, 0.4)])
    a = math.radians(angle)
    lights = _lights(ambient=0.2, diffuse=0.7, direction=(math.sin(a), 0.0, math.cos(a)))
    views = Renderer().render(scene, scene.texture, _cams(size=32, width_m=1.0), lights)
    expected = torch.tensor([0.8, 0.6, 0.4]) * (0.2 + 0.7 * max(0.0, math.cos(a)))
    torch.testing.assert_close(views.images[0, :, 16, 16], expected, atol=1e-5, rtol=0)


def test_light_colour_tints_the_image():
    scene = _flat_scene([(-0.5, 0.5, -0.5, 0.5, 0.0)], [(0.5, 0.5, 0.5)])
    views = Renderer().render(scene, scene.texture, _cams(size=32, width_m=1.0),
                              _lights(ambient=1.0, color=(1.2, 1.0, 0.6)))
    torch.testing.assert_close(views.images[0, :, 16, 16], torch.tensor([0.6, 0.5, 0.3]), atol=1e-5, rtol=0)


def test_specular_highlight_adds_light_when_mirrored_towards_the_camera():
    lights = _lights(ambient=0.2, diffuse=0.5, direction=(0.0, 0.0, 1.0))
    dull = _flat_scene([(-0.5, 0.5, -0.5, 0.5, 0.0)], [(0.3, 0.3, 0.3)], specular=0.0)
    shiny = _flat_scene([(-0.5, 0.5, -0.5, 0.5, 0.0)], [(0.3, 0.3, 0.3)], specular=0.5)
    a = Renderer().render(dull, dull.texture, _cams(size=32, width_m=1.0), lights).images[0, :, 16, 16]
    b = Renderer().render(shiny, shiny.texture, _cams(size=32, width_m=1.0), lights).images[0, :, 16, 16]
    # Head-on light and camera: the half vector is the normal, so the highlight is ks · diffuse.
    torch.testing.assert_close(b - a, torch.full((3,), 0.25), atol=1e-3, rtol=0)


# --------------------------------------------------------------------------- gradients reach visible texels


def test_gradients_reach_exactly_the_visible_texels(stop):
    # 384 px across a 512-texel face is 1.33 texels per pixel: log2 rounds to mip level 0, so each
    # pixel's bilinear lookup touches only its 2×2 neighbouring texels of the full-resolution texture.
    cams = _cams(distance=3.0, frame=1.0, size=384)
    lights = _lights(ambient=0.5, diffuse=0.4)          # keeps every pixel below 1 (no clamp)
    patch = sticker_for_scene(stop, shape="bars", area=0.15)
    base = stop.texture.clone().requires_grad_(True)
    views = Renderer().render(stop, patch.apply(base), cams, lights)
    reference = Renderer(shader=PhongShader(mip_levels=1)).render(stop, patch.apply(stop.texture), cams, lights)
    torch.testing.assert_close(views.images.detach(), reference.images)   # i.e. level 0 was used
    views.images.sum().backward()

    sticker = patch.mask[0] > 0.5
    g_patch = patch.logits.grad.abs().sum(0)
    assert torch.all(g_patch[~sticker] == 0)
    assert float((g_patch[sticker] != 0).float().mean()) > 0.9

    g_base = base.grad.abs().sum(0)
    face = stop.face_mask[0] > 0.5
    near_face = F.max_pool2d(stop.face_mask[None], 5, 1, 2)[0, 0] > 0.5     # 2-texel dilation
    assert torch.all(g_base[~near_face] == 0)
    assert torch.all(g_base[sticker] == 0)
    assert float((g_base[face & ~sticker] != 0).float().mean()) > 0.9


def test_no_gradient_from_views_that_miss_the_sign(stop):
    texture = stop.texture.clone().requires_grad_(True)
    views = Renderer().render(stop, texture, _cams(azimuth=180.0, size=32), _lights())
    views.images.sum().backward()
    assert texture.grad is None or float(texture.grad.abs().sum()) == 0.0
