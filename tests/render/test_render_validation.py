"""Renderer numbers are checked where the renderer is built, naming the config key."""

from __future__ import annotations

import pytest

from physattack.errors import InputError
from physattack.render import MeshRasterizer, PhongShader, Renderer


@pytest.mark.parametrize("build, key", [
    (lambda: Renderer(supersample=0), "renderer.supersample must be an integer >= 1"),
    (lambda: MeshRasterizer(near_m=0.0), "renderer.rasterizer.near_m must be > 0"),
    (lambda: MeshRasterizer(max_chunk_elems=0), "renderer.rasterizer.max_chunk_elems must be an integer >= 1"),
    (lambda: PhongShader(mip_levels=0), "renderer.shader.mip_levels must be an integer >= 1"),
])
def test_bad_renderer_numbers_name_their_key(build, key):
    with pytest.raises(InputError) as err:
        build()
    assert str(err.value).startswith(key) and str(err.value).endswith(".")


def test_defaults_build():
    r = Renderer()
    assert r.supersample == 1 and r.rasterizer.near_m == 0.05 and r.shader.mip_levels == 6
