"""Scene folders: loading, their errors, the bundled stop sign, and the deterministic generator."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch
import yaml

from physattack.errors import InputError
from physattack.scene import SceneError, available_scenes, load_scene
from physattack.scene.boards import write_board_scene
from physattack.scene.generate import write_sign_scene
from physattack.scene.scene import bundled_scenes_dir
from physattack.scene.signs import SIGNS, draw_texture

OCTAGON_SHARE = 2 * (math.sqrt(2) - 1)   # regular octagon area / its bounding square, 0.8284


@pytest.fixture(scope="module")
def stop():
    return load_scene("stop_sign")


def test_stop_sign_scene_facts(stop):
    assert stop.name == "stop_sign"
    assert stop.class_name == "stop"
    assert stop.texture_size_m == (0.75, 0.75)
    assert stop.support_materials == ("post",)
    assert stop.texture.shape == (3, 512, 512)
    assert stop.texture.dtype == torch.float32
    assert 0.0 <= float(stop.texture.min()) and float(stop.texture.max()) <= 1.0
    assert stop.face_mask.shape == (1, 512, 512)
    assert set(stop.face_mask.unique().tolist()) == {0.0, 1.0}
    assert float(stop.face_mask.mean()) == pytest.approx(OCTAGON_SHARE, abs=0.01)


def test_stop_sign_face_mask_is_the_octagon(stop):
    m = stop.face_mask[0]
    # Centre and mid-edges are on the face; the texture's corners (cut off by the octagon) are not.
    assert m[256, 256] == 1 and m[256, 2] == 1 and m[2, 256] == 1 and m[509, 256] == 1
    for y, x in [(3, 3), (3, 508), (508, 3), (508, 508)]:
        assert m[y, x] == 0
    # Symmetric under left-right and up-down flips (up to anti-aliasing on the rim).
    assert float((m - m.flip(-1)).abs().mean()) < 0.005
    assert float((m - m.flip(-2)).abs().mean()) < 0.005


def test_stop_sign_texture_is_mostly_red_inside_and_bleeds_face_colours_outside(stop):
    tex, m = stop.texture, stop.face_mask[0] > 0.5
    r, g, b = tex
    red = (r > 0.6) & (g < 0.3) & (b < 0.3)
    assert float(red[m].float().mean()) > 0.6
    # Off the face the texels repeat the nearest face colour (border white/red), never black.
    assert float(tex[:, ~m].max(0).values.min()) > 0.5


def test_object_faces_exclude_only_the_post(stop):
    mesh = stop.mesh
    names = [mesh.materials[i].name for i in mesh.face_materials.tolist()]
    expected = torch.tensor([n != "post" for n in names])
    assert torch.equal(stop.object_faces, expected)
    assert (~stop.object_faces).sum() == names.count("post") > 0


def test_every_bundled_scene_loads_with_a_matching_mask():
    names = available_scenes()
    assert {"stop_sign", "yield_sign"} <= set(names)
    for name in names:
        scene = load_scene(name)
        assert scene.name == name
        assert scene.mesh.textured_material is not None
        assert scene.face_mask.shape[1:] == scene.texture.shape[1:]
        assert 0.3 < float(scene.face_mask.mean()) <= 1.0


def test_yield_texture_rows_run_top_down():
    # Row 0 of a scene texture is the top of the face; the yield triangle points down.
    m = load_scene("yield_sign").face_mask[0]
    assert m[5].sum() > 0.9 * m.shape[1]
    assert m[-5].sum() < 0.1 * m.shape[1]


def test_load_scene_by_path(stop_copy):
    scene = load_scene(stop_copy)
    assert scene.class_name == "stop"
    assert torch.equal(scene.face_mask, load_scene("stop_sign").face_mask)


def test_unknown_scene_lists_the_bundled_ones():
    with pytest.raises(SceneError) as info:
        load_scene("nope")
    msg = str(info.value)
    assert "nope" in msg
    for name in available_scenes():
        assert name in msg
    assert isinstance(info.value, InputError)


def test_missing_yaml_key_is_named(stop_copy):
    desc = yaml.safe_load((stop_copy / "scene.yaml").read_text())
    del desc["class_name"]
    (stop_copy / "scene.yaml").write_text(yaml.safe_dump(desc))
    with pytest.raises(SceneError, match="class_name"):
        load_scene(stop_copy)


def test_mesh_problems_become_scene_errors(stop_copy):
    (stop_copy / "sign.obj").unlink()
    with pytest.raises(SceneError, match="sign.obj"):
        load_scene(stop_copy)


def test_missing_texture_is_reported(stop_copy):
    (stop_copy / "texture.png").unlink()
    with pytest.raises(SceneError, match="texture.png"):
        load_scene(stop_copy)


def test_mesh_without_texture_map_is_refused(stop_copy):
    mtl = stop_copy / "sign.mtl"
    mtl.write_text("\n".join(l for l in mtl.read_text().splitlines() if not l.startswith("map_Kd")))
    with pytest.raises(SceneError, match="map_Kd"):
        load_scene(stop_copy)


def test_face_mask_of_the_wrong_size_is_refused(stop_copy):
    cv2.imwrite(str(stop_copy / "face_mask.png"), np.full((64, 64), 255, np.uint8))
    with pytest.raises(SceneError, match="must match"):
        load_scene(stop_copy)


def test_scene_without_face_mask_may_be_patched_everywhere(stop_copy):
    desc = yaml.safe_load((stop_copy / "scene.yaml").read_text())
    del desc["face_mask"]
    (stop_copy / "scene.yaml").write_text(yaml.safe_dump(desc))
    scene = load_scene(stop_copy)
    assert torch.equal(scene.face_mask, torch.ones(1, 512, 512))


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """Every bundled scene written afresh by the generator, into a temporary folder."""
    out = tmp_path_factory.mktemp("scenes")
    for design in SIGNS.values():
        assert write_sign_scene(design, out) == out / design.name
    write_board_scene(out)
    return out


@pytest.mark.parametrize("name", [*SIGNS, "reprogram_board"])
def test_regenerating_a_bundled_scene_reproduces_its_texels_and_mesh_text(regenerated, name):
    # Texels, not PNG bytes: another PNG encoder may compress the same texels differently.
    folder, bundled = regenerated / name, bundled_scenes_dir() / name
    for image in ("texture.png", "face_mask.png"):
        fresh = cv2.imread(str(folder / image), cv2.IMREAD_UNCHANGED)
        kept = cv2.imread(str(bundled / image), cv2.IMREAD_UNCHANGED)
        assert fresh.dtype == kept.dtype and fresh.shape == kept.shape, image
        differ = (fresh != kept).reshape(fresh.shape[0], fresh.shape[1], -1).any(-1)
        assert not differ.any(), f"{image}: {int(differ.sum())} texels differ"
    for text in ("sign.obj", "sign.mtl"):
        assert (folder / text).read_text() == (bundled / text).read_text(), text
    assert yaml.safe_load((folder / "scene.yaml").read_text()) == yaml.safe_load((bundled / "scene.yaml").read_text())


def test_draw_texture_sizes_follow_the_outline():
    tex, mask, size_m = draw_texture(SIGNS["one_way"])        # 900 × 300 mm
    assert size_m == pytest.approx((0.9, 0.3))
    assert tex.shape == (171, 512, 3) and mask.shape == (171, 512)
    assert tex.dtype == np.uint8
    assert mask[85, 256] == 255 and float((mask > 127).mean()) > 0.95
