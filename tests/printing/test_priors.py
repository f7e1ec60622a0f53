"""Printability priors (physattack/printing/priors.py): palette files, NPS and total variation."""

from __future__ import annotations

import pytest
import torch

from physattack.errors import InputError
from physattack.printing import default_palette_path, load_palette, non_printability_score, total_variation


@pytest.fixture(scope="module")
def palette() -> torch.Tensor:
    return load_palette()


def _noise(seed: int = 0, size: int = 16) -> torch.Tensor:
    return torch.rand(3, size, size, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- palette files


def test_default_palette_has_30_colours_in_unit_range(palette):
    assert default_palette_path().is_file()
    assert palette.shape == (30, 3)
    assert float(palette.min()) >= 0.0 and float(palette.max()) <= 1.0
    assert len(torch.unique(palette, dim=0)) == 30
    # The first line of the bundled file is an off-white "242 242 236".
    torch.testing.assert_close(palette[0], torch.tensor([242.0, 242.0, 236.0]) / 255)


def test_palette_file_with_comments_commas_and_blank_lines(tmp_path):
    path = tmp_path / "pal.txt"
    path.write_text("# my printer\n\n255 0 0   # red\n0,128,255\n  10 20 30  \n")
    pal = load_palette(path)
    torch.testing.assert_close(pal, torch.tensor([[255.0, 0, 0], [0, 128, 255], [10, 20, 30]]) / 255)
    assert load_palette(str(path)).shape == (3, 3)


def test_wrong_number_of_columns_names_the_line(tmp_path):
    path = tmp_path / "pal.txt"
    path.write_text("# header\n10 20 30\n40 50\n")
    with pytest.raises(InputError) as info:
        load_palette(path)
    assert f"{path}:3:" in str(info.value)
    assert "40 50" in str(info.value)
    path.write_text("1 2 3 4\n")
    with pytest.raises(InputError, match=":1:"):
        load_palette(path)


def test_missing_or_empty_palette_raises(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_palette(tmp_path / "absent.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("# nothing here\n\n")
    with pytest.raises(InputError, match="no colours"):
        load_palette(empty)


# --------------------------------------------------------------------------- non-printability score


def test_nps_is_zero_on_palette_colours(palette):
    idx = torch.randint(0, len(palette), (8, 8), generator=torch.Generator().manual_seed(0))
    colors = palette[idx].permute(2, 0, 1).clone().requires_grad_(True)   # 3×8×8 of palette entries
    nps = non_printability_score(colors, palette)
    # cdist's matrix-product path leaves ~1e-4 of rounding at zero distance.
    assert float(nps.detach()) == pytest.approx(0.0, abs=1e-3)
    nps.backward()
    assert torch.isfinite(colors.grad).all()          # no NaN from the square root at distance 0
    assert float(non_printability_score(colors.detach() + 0.1, palette)) > 0.1


def test_nps_is_the_distance_to_the_nearest_palette_colour():
    pal = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    colors = torch.tensor([0.1, 0.2, 0.2]).view(3, 1, 1).expand(3, 2, 2)
    assert float(non_printability_score(colors, pal)) == pytest.approx(0.3, abs=1e-5)
    mid = torch.full((3, 1, 1), 0.5)
    assert float(non_printability_score(mid, pal)) == pytest.approx(0.5 * 3 ** 0.5, abs=1e-5)


def test_nps_is_positive_off_the_palette_and_grows_with_distance(palette):
    noise = _noise()
    nps = float(non_printability_score(noise, palette))
    assert nps > 0.05
    on = palette[torch.arange(16 * 16) % 30].T.reshape(3, 16, 16)
    nudged = (on + 0.02).clamp(0, 1)
    assert 0 < float(non_printability_score(nudged, palette)) < nps


def test_nps_mask_weights_the_texels(palette):
    colors = palette[0].view(3, 1, 1).expand(3, 4, 4).clone()
    colors[:, :, 2:] = 0.5 + 0.5 * _noise(1, 4)[:, :, 2:]       # off-palette right half
    left = torch.zeros(1, 4, 4)
    left[:, :, :2] = 1
    assert float(non_printability_score(colors, palette, left)) == pytest.approx(0.0, abs=1e-5)
    assert float(non_printability_score(colors, palette, 1 - left)) > 0.0
    whole = float(non_printability_score(colors, palette))
    assert whole == pytest.approx(float(non_printability_score(colors, palette, 1 - left)) / 2, rel=1e-5)


def test_nps_gradient_pulls_colours_towards_the_palette():
    pal = torch.tensor([[0.2, 0.2, 0.2]])
    colors = torch.full((3, 2, 2), 0.6, requires_grad=True)
    non_printability_score(colors, pal).backward()
    assert torch.all(colors.grad > 0)                  # descending lowers the colour towards 0.2


# --------------------------------------------------------------------------- total variation


def test_tv_is_zero_for_a_constant_patch():
    assert float(total_variation(torch.full((3, 16, 16), 0.37))) == 0.0


def test_tv_is_larger_for_noise_than_for_smooth_patches():
    ramp = torch.linspace(0, 1, 16).view(1, 1, 16).expand(3, 16, 16)
    noise = _noise()
    assert 0 < float(total_variation(ramp)) < float(total_variation(noise))
    assert float(total_variation(noise)) == pytest.approx(1 / 3 * 2 * 15 / 16, rel=0.2)   # E|a-b| = 1/3


def test_tv_with_a_mask_ignores_texels_outside_it():
    mask = torch.zeros(1, 16, 16)
    mask[:, 4:12, 4:12] = 1
    noisy_outside = torch.where(mask > 0, torch.full((3, 16, 16), 0.6), _noise())
    smooth_inside = total_variation(noisy_outside, mask)
    noisy_inside = total_variation(torch.where(mask > 0, _noise(2), torch.full((3, 16, 16), 0.6)), mask)
    assert float(smooth_inside) < float(noisy_inside)


def test_tv_with_a_mask_is_zero_for_a_constant_sticker():
    mask = torch.zeros(1, 16, 16)
    mask[:, 4:12, 4:12] = 1
    colors = torch.full((3, 16, 16), 0.6, requires_grad=True)
    tv = total_variation(colors, mask)
    tv.backward()
    assert float(tv.detach()) == pytest.approx(0.0, abs=1e-6)
    assert float(colors.grad.abs().max()) == 0.0


def test_tv_with_a_rectangular_mask_is_the_tv_of_the_crop():
    mask = torch.zeros(1, 16, 16)
    mask[:, 4:12, 3:13] = 1
    x = _noise(3)
    torch.testing.assert_close(total_variation(x, mask), total_variation(x[:, 4:12, 3:13]))
