"""The compiled CPU kernels (physattack/render/kernels.py) against the PyTorch paths they stand in for."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from physattack.eot import ViewSampler
from physattack.render import MeshRasterizer, Renderer, backends
from physattack.scene import load_scene

pytest.importorskip("numba")


def _views(scene_name: str, n: int = 6, size: int = 96, seed: int = 3):
    scene = load_scene(scene_name)
    params = ViewSampler(background_count=4).sample(n, torch.Generator().manual_seed(seed))
    return scene, params.cameras(max(scene.texture_size_m), (size, size)), params.lights()


@pytest.mark.parametrize("scene_name", ["stop_sign", "speed_limit_45", "reprogram_board"])
def test_compiled_rasterizer_matches_the_torch_path(scene_name):
    scene, cams, _ = _views(scene_name)
    mesh = scene.mesh
    normals = F.normalize(mesh.normals[mesh.face_normals].mean(1), dim=-1)
    a = MeshRasterizer(backend="numba")(mesh.verts, mesh.faces, cams, normals)
    b = MeshRasterizer(backend="torch")(mesh.verts, mesh.faces, cams, normals)
    same = a.pix_to_face == b.pix_to_face
    assert (a.pix_to_face >= 0).sum() > 1000
    assert (~same).sum() <= 0.001 * same.numel()        # exact ties between faces may go either way
    hit = same & (a.pix_to_face >= 0)
    torch.testing.assert_close(a.bary[hit], b.bary[hit], atol=1e-5, rtol=0)
    torch.testing.assert_close(a.zbuf[hit], b.zbuf[hit], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a.coverage[same], b.coverage[same], atol=1e-4, rtol=0)


@pytest.mark.parametrize("batched", [False, True])
def test_compiled_shading_gives_the_torch_image_gradient_and_object_mask(monkeypatch, batched):
    scene, cams, lights = _views("stop_sign")
    texture = scene.texture[None].repeat(len(cams), 1, 1, 1) * torch.linspace(0.4, 1, len(cams))[:, None, None, None] \
        if batched else scene.texture
    background = torch.rand(len(cams), 3, 96, 96, generator=torch.Generator().manual_seed(0))

    def render():
        tex = texture.clone().requires_grad_(True)
        views = Renderer().render(scene, tex, cams, lights, background)
        (views.images * torch.linspace(0, 1, 96)).sum().backward()
        return views, tex.grad

    compiled, grad_c = render()
    monkeypatch.setattr(backends, "numba_kernels", lambda: None)
    plain, grad_t = render()
    assert grad_c.abs().sum() > 0
    torch.testing.assert_close(compiled.images.detach(), plain.images.detach(), atol=2e-4, rtol=0)
    torch.testing.assert_close(grad_c, grad_t, atol=1e-4, rtol=1e-3)
    torch.testing.assert_close(compiled.object_mask, plain.object_mask, atol=1e-4, rtol=0)
    assert compiled.object_mask.sum() > 100 and (compiled.object_mask <= compiled.alpha + 1e-6).all()
    torch.testing.assert_close(compiled.boxes, plain.boxes, atol=1.0, rtol=0)
