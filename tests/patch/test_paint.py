"""Paint patches (physattack/patch/paint.py): an L∞-bounded change to the face."""

from __future__ import annotations

import pytest
import torch

from physattack.patch import PaintPatch, paint_for_scene
from physattack.scene import load_scene


@pytest.fixture(scope="module")
def stop():
    return load_scene("stop_sign")


def _randomize(patch: PaintPatch, scale: float = 5.0) -> None:
    with torch.no_grad():
        patch.theta.normal_(0, scale, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("eps", [4 / 255, 16 / 255, 0.25])
def test_paint_stays_within_eps_of_the_base(stop, eps):
    patch = paint_for_scene(stop, eps=eps)
    _randomize(patch)
    out = patch.apply(stop.texture).detach()
    diff = (out - stop.texture).abs()
    assert float(diff.max()) <= eps + 1e-6
    # Large parameters saturate the bound wherever clipping to [0, 1] leaves room.
    room = (stop.texture > eps) & (stop.texture < 1 - eps) & (stop.face_mask > 0.5)
    assert float(diff[room].mean()) > 0.8 * eps
    assert float(out.min()) >= 0.0 and float(out.max()) <= 1.0


def test_paint_leaves_texels_off_the_face_alone(stop):
    patch = paint_for_scene(stop)
    _randomize(patch)
    out = patch.apply(stop.texture).detach()
    off = stop.face_mask[0] < 0.5
    assert torch.equal(out[:, off], stop.texture[:, off])


def test_zero_paint_is_the_identity(stop):
    patch = paint_for_scene(stop)
    assert torch.equal(patch.apply(stop.texture), stop.texture)
    torch.testing.assert_close(patch.colors(), torch.full_like(stop.texture, 0.5))
    assert patch.area_fraction(stop.face_mask) == pytest.approx(1.0)


def test_paint_gradient_reaches_only_the_face():
    mask = torch.zeros(1, 6, 6)
    mask[:, 1:4, 2:5] = 1
    patch = PaintPatch(mask, eps=0.1)
    base = torch.full((3, 6, 6), 0.5)
    patch.apply(base).sum().backward()
    g = patch.theta.grad.abs().sum(0)
    assert torch.all(g[mask[0] > 0] > 0) and torch.all(g[mask[0] == 0] == 0)
    # At theta = 0, d/dθ [eps·tanh θ] = eps.
    torch.testing.assert_close(patch.theta.grad[:, 1, 2], torch.full((3,), 0.1))


def test_colors_are_centred_and_bounded():
    patch = PaintPatch(torch.ones(1, 4, 4), eps=0.2)
    with torch.no_grad():
        patch.theta.fill_(100.0)
    torch.testing.assert_close(patch.colors(), torch.full((3, 4, 4), 0.7))
