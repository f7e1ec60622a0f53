"""The printer/camera colour model (physattack/printing/colour.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import kornia
import pytest
import torch

from physattack.printing import ColourModel, load_colour_model, load_palette
from physattack.printing.colour import (ColourModelError, PhotographedPipeline, identity_plus_gamut,
                                        polynomial_features, polynomial_terms)


@pytest.fixture(scope="module")
def default_model():
    return load_colour_model()


def test_default_model_is_the_identity_inside_the_palette_gamut(default_model):
    x = torch.rand(3, 32, 32, generator=torch.Generator().manual_seed(0)) * 0.6 + 0.2
    torch.testing.assert_close(default_model.print_colours(x), x, atol=1 / 255, rtol=0)
    assert default_model.info["name"] == "identity plus gamut"


def test_default_model_keeps_colours_within_the_palettes_black_and_white(default_model):
    pal = load_palette()
    out = default_model.print_colours(torch.tensor([[0.0, 1.0], [0.0, 1.0], [0.0, 1.0]]).view(3, 1, 2))
    lo, hi = out[:, 0, 0], out[:, 0, 1]
    torch.testing.assert_close(lo, pal.amin(0), atol=1.5 / 255, rtol=0)     # the printer's black
    torch.testing.assert_close(hi, pal.amax(0), atol=1.5 / 255, rtol=0)     # the paper's white
    # and it is the same model identity_plus_gamut builds from the bundled palette
    built = identity_plus_gamut(pal)
    x = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(built.print_colours(x), default_model.print_colours(x), atol=1e-5, rtol=0)


def test_the_model_is_differentiable_with_useful_gradients(default_model):
    x = (torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(2)) * 0.6 + 0.2).requires_grad_(True)
    default_model.print_colours(x).sum().backward()
    assert torch.isfinite(x.grad).all() and float(x.grad.min()) > 0.5     # ~1 inside the gamut
    y = torch.tensor([0.0, 0.5, 1.0]).view(3, 1, 1).requires_grad_(True)
    default_model.print_colours(y).sum().backward()
    assert torch.isfinite(y.grad).all()


def test_print_patch_changes_only_the_masked_texels():
    model = ColourModel([[0.1, 0.5, 0, 0], [0.0, 0, 0.5, 0], [0.0, 0, 0, 0.5]], 1)
    texture = torch.rand(3, 6, 6, generator=torch.Generator().manual_seed(3))
    mask = torch.zeros(1, 6, 6)
    mask[:, 2:4, 1:5] = 1
    out = model.print_patch(texture, mask)
    on = mask[0] > 0
    assert torch.equal(out[:, ~on], texture[:, ~on])
    assert float((out[:, on] - texture[:, on]).abs().min()) > 0.01



def test_a_batch_of_textures_prints_as_each_texture_alone_with_the_same_gradient():
    model = ColourModel([[0.1, 0.5, 0, 0], [0.0, 0, 0.5, 0], [0.0, 0, 0, 0.5]], 1, (0.1, 0.1, 0.1), (0.9, 0.9, 0.9))
    g = torch.Generator().manual_seed(6)
    mask = (torch.rand(1, 6, 6, generator=g) > 0.4).float() * torch.rand(1, 6, 6, generator=g)
    program = torch.rand(3, 6, 6, generator=g).requires_grad_(True)
    for inputs in (torch.rand(4, 3, 6, 6, generator=g) * (1 - mask),     # one patch, per-texture task inputs
                   torch.rand(4, 3, 6, 6, generator=g)):                 # patch texels that differ
        weights = torch.arange(4.0).view(4, 1, 1, 1)
        grads = []
        for batched in (True, False):
            program.grad = None
            texture = inputs + program * mask
            out = model.print_patch(texture, mask) if batched else torch.stack([model.print_patch(t, mask)
                                                                                for t in texture])
            (out * weights).sum().backward()
            grads.append((out.detach(), program.grad.clone()))
        torch.testing.assert_close(grads[0][0], grads[1][0])
        torch.testing.assert_close(grads[0][1], grads[1][1])

def test_polynomial_features_and_a_saved_fitted_model_round_trip(tmp_path):
    assert [len(polynomial_terms(d)) for d in (1, 2, 3)] == [4, 10, 20]
    rgb = torch.tensor([[0.5, 0.25, 2.0]])
    f = polynomial_features(rgb, 2)[0].tolist()
    assert f == pytest.approx([1, 0.5, 0.25, 2.0, 0.25, 0.125, 1.0, 0.0625, 0.5, 4.0])
    coeffs = torch.randn(3, 10, generator=torch.Generator().manual_seed(4)) * 0.05
    coeffs[:, 1:4] += torch.eye(3) * 0.9
    model = ColourModel(coeffs, 2, (0.05, 0.04, 0.06), (0.95, 0.9, 0.93), camera=torch.eye(3, 4).roll(1, 1) * 0.8)
    path = tmp_path / "m.json"
    path.write_text(json.dumps(model.to_dict()))
    again = load_colour_model(path)
    x = torch.rand(2, 3, 5, 5, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(again.print_colours(x), model.print_colours(x))
    torch.testing.assert_close(again.photograph(x), model.photograph(x))
    expected = kornia.color.linear_rgb_to_rgb(0.8 * kornia.color.rgb_to_linear_rgb(x))   # a gain in linear light
    torch.testing.assert_close(again.photograph(x), expected, atol=1e-4, rtol=0)
    assert load_colour_model("identity").print_colours(x).sub(x).abs().max() < 1e-5


@dataclass
class Views:
    images: torch.Tensor


def test_the_camera_stage_applies_to_rendered_images_through_the_pipeline():
    model = ColourModel(torch.eye(3, 4).roll(1, 1), 1, camera=torch.eye(3, 4).roll(1, 1) * 0.5)
    base = lambda scene, texture, params: Views(texture.expand(2, -1, -1, -1))  # noqa: E731
    wrapped = PhotographedPipeline(base, model)
    tex = torch.full((3, 4, 4), 0.8)
    out = wrapped(None, tex, None).images
    assert out.shape == (2, 3, 4, 4) and float(out.max()) < 0.8 - 0.1
    assert torch.equal(ColourModel(torch.eye(3, 4).roll(1, 1), 1).photograph(tex[None]), tex[None])


def test_bad_model_files_say_what_to_do(tmp_path):
    with pytest.raises(ColourModelError, match="does not exist"):
        load_colour_model(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    with pytest.raises(ColourModelError, match="not JSON"):
        load_colour_model(bad)
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ColourModelError, match="calibrate fit"):
        load_colour_model(bad)
    bad.write_text(json.dumps({"format": "physattack-colour-model",
                               "printer": {"degree": 2, "coefficients": [[1, 0]]}}))
    with pytest.raises(ColourModelError, match="3×10"):
        load_colour_model(bad)
