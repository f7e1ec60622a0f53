"""Sign faces: the fill beyond the outline is the exact nearest face texel, and faces keep their ground
colour up to the rim."""

from __future__ import annotations

import numpy as np
import pytest

from physattack.scene.signs import BLACK, RED, SIGNS, WHITE, draw_texture, nearest_face_colours


def _nearest_by_search(img, inside):
    """Every off-face texel takes the face texel at the least squared distance, the first in row-major order on ties."""
    fy, fx = np.nonzero(inside)
    out = img.copy()
    for y, x in zip(*np.nonzero(~inside)):
        d = (fy - y) ** 2 + (fx - x) ** 2
        k = int(np.argmin(d))
        out[y, x] = img[fy[k], fx[k]]
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_nearest_face_colours_is_the_exact_nearest_texel(seed):
    rng = np.random.default_rng(seed)
    h, w = 23, 31
    yy, xx = np.mgrid[:h, :w]
    inside = ((yy - 11) ** 2 / 60 + (xx - 14) ** 2 / 90 <= 1) | (rng.random((h, w)) < 0.03)
    img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
    np.testing.assert_array_equal(nearest_face_colours(img, inside, chunk=17), _nearest_by_search(img, inside))


def test_nearest_face_colours_breaks_ties_by_the_first_texel():
    inside = np.zeros((3, 3), bool)
    inside[0, 1] = inside[1, 0] = True                  # both 1 away from (1, 1) and from (0, 0)
    img = np.zeros((3, 3, 1), np.uint8)
    img[0, 1], img[1, 0] = 7, 9
    out = nearest_face_colours(img, inside)
    assert out[1, 1, 0] == out[0, 0, 0] == out[2, 2, 0] == 7


def test_nearest_face_colours_leaves_a_full_face_alone_and_refuses_an_empty_one():
    img = np.arange(12, dtype=np.uint8).reshape(2, 2, 3)
    np.testing.assert_array_equal(nearest_face_colours(img, np.ones((2, 2), bool)), img)
    with pytest.raises(ValueError, match="no texel"):
        nearest_face_colours(img, np.zeros((2, 2), bool))


@pytest.mark.parametrize("name, ground", [("stop_sign", WHITE), ("yield_sign", RED),
                                          ("pedestrian_crossing", BLACK), ("railroad_crossing", BLACK)])
def test_off_face_texels_hold_the_ground_colour_of_the_rim(name, ground):
    # The ground colour covers the texture before the artwork, so the rim never mixes with black.
    tex, mask, _ = draw_texture(SIGNS[name])
    off = tex[mask == 0]
    assert len(off) and (off == ground).all()
