"""The PyTorch3D backend agrees with the built-in renderer (skipped where PyTorch3D is not installed)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("pytorch3d.renderer", reason="PyTorch3D is not installed (it has no wheels; see README)")

from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler  # noqa: E402
from physattack.render import Renderer  # noqa: E402
from physattack.render.pytorch3d import PyTorch3DRasterizer  # noqa: E402


@pytest.fixture(scope="module")
def views(stop_scene):
    params = ViewSampler(background_count=8).sample(12, torch.Generator().manual_seed(5))
    bank = BackgroundBank(8, seed=0)
    ours = ViewPipeline(Renderer(), bank, (128, 128))(stop_scene, stop_scene.texture, params, effects=False)
    theirs = ViewPipeline(Renderer(rasterizer=PyTorch3DRasterizer()), bank, (128, 128))(
        stop_scene, stop_scene.texture, params, effects=False)
    return ours, theirs


def test_images_agree_inside_the_sign(views):
    ours, theirs = views
    inside = (F.max_pool2d(-ours.object_mask, 3, 1, 1) < -0.999) & (theirs.object_mask > 0.999)  # eroded
    diff = (ours.images - theirs.images).abs().mean(1, keepdim=True)[inside]
    assert float(diff.mean()) < 2 / 255


def test_silhouettes_agree_within_one_pixel(views):
    ours, theirs = views
    a, b = ours.object_mask > 0.5, theirs.object_mask > 0.5
    dilate = lambda m: F.max_pool2d(m.float(), 3, 1, 1) > 0  # noqa: E731
    assert not (a & ~dilate(b)).any() and not (b & ~dilate(a)).any()
    assert torch.allclose(ours.boxes, theirs.boxes, atol=1.0)


def test_gradients_reach_the_texture_through_pytorch3d(stop_scene):
    params = ViewSampler(background_count=4).sample(2, torch.Generator().manual_seed(1))
    tex = stop_scene.texture.clone().requires_grad_(True)
    pipe = ViewPipeline(Renderer(rasterizer=PyTorch3DRasterizer()), BackgroundBank(4, seed=0), (64, 64))
    pipe(stop_scene, tex, params).images.sum().backward()
    assert float(tex.grad.abs().sum()) > 0
