"""Meshes and scene folders that cannot be used: one sentence naming the file and, for a mesh, the
line (physattack/scene/mesh.py, physattack/scene/scene.py)."""

from __future__ import annotations

import warnings

import cv2
import numpy as np
import pytest
import yaml
from PIL import Image

from physattack.scene import MeshError, SceneError, load_obj, load_scene

HEAD = "v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nvt 1 0\nvt 0 1\n"       # lines 1-6


def _write(tmp_path, obj: str, mtl: str | None = None):
    path = tmp_path / "m.obj"
    path.write_text(obj)
    if mtl is not None:
        (tmp_path / "m.mtl").write_text(mtl)
    return path


@pytest.mark.parametrize("obj, line, words", [
    ("v 0 0 0\nv nan 0 0\nv 0 1 0\nvt 0 0\nf 1/1 2/1 3/1\n", 2, "vertex needs 3 finite numbers"),
    ("v 0 0 0\nv 1 0 inf\nv 0 1 0\nvt 0 0\nf 1/1 2/1 3/1\n", 2, "vertex needs 3 finite numbers"),
    ("v 0 0 0\nv 1 0\nv 0 1 0\nvt 0 0\nf 1/1 2/1 3/1\n", 2, "vertex needs 3 finite numbers"),
    ("v 0 0 0\nv 1 0 x\nv 0 1 0\nvt 0 0\nf 1/1 2/1 3/1\n", 2, "vertex needs 3 finite numbers"),
    (HEAD + "vt nan 0\nf 1/1 2/2 3/3\n", 7, "UV coordinate needs 2 finite numbers"),
    (HEAD + "vn 0 0 nan\nf 1/1/1 2/2/1 3/3/1\n", 7, "normal needs 3 finite numbers"),
    (HEAD + "f 1/1 2/2 9/3\n", 7, "vertex 9, but the file defines only 3 vertices"),
    (HEAD + "f 1/1 2/2 3/3\nf 1/1 2/2 4/3\n", 8, "vertex 4"),
    (HEAD + "f 1/1 2/2 3/7\n", 7, "UV 7"),
    (HEAD + "vn 0 0 1\nf 1/1/1 2/2/1 3/3/2\n", 8, "normal 2"),
    (HEAD + "f 0/1 2/2 3/3\n", 7, "vertex 0"),
    (HEAD + "f -4/1 2/2 3/3\n", 7, "vertex -4, but only 3"),
    (HEAD + "f 1/1 2/2\n", 7, "at least 3 corners"),
    (HEAD + "f 1/a 2/2 3/3\n", 7, "not v/vt/vn indices"),
    (HEAD + "usemtl\nf 1/1 2/2 3/3\n", 7, "names no material"),
])
def test_a_bad_obj_line_is_named_by_file_and_line(tmp_path, obj, line, words):
    path = _write(tmp_path, obj)
    with pytest.raises(MeshError) as err:
        load_obj(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: ") and words in message
    assert message.endswith(".") and "\n" not in message


def test_a_bad_mtl_line_is_named_by_file_and_line(tmp_path):
    path = _write(tmp_path, "mtllib m.mtl\n" + HEAD + "usemtl a\nf 1/1 2/2 3/3\n", "newmtl a\nKd 0.5 nan 0.5\n")
    with pytest.raises(MeshError, match=r"m\.mtl:2: a diffuse colour \(Kd\) needs 3 finite numbers"):
        load_obj(path)


def test_negative_indices_count_back_from_what_is_defined_so_far(tmp_path):
    obj = HEAD + "f -3/-3 -2/-2 -1/-1\nv 5 5 5\nf 1/1 2/2 -1/-1\n"
    mesh = load_obj(_write(tmp_path, obj))
    assert mesh.faces.tolist() == [[0, 1, 2], [0, 1, 3]]
    assert mesh.face_uvs.tolist() == [[0, 1, 2], [0, 1, 2]]


def test_a_nan_vertex_in_a_scene_is_a_scene_error_naming_the_line(stop_copy):
    obj = stop_copy / "sign.obj"
    lines = obj.read_text().splitlines()
    i = next(k for k, line in enumerate(lines) if line.startswith("v "))
    lines[i] = "v nan 0 0"
    obj.write_text("\n".join(lines) + "\n")
    with pytest.raises(SceneError, match=rf"sign\.obj:{i + 1}: a vertex needs 3 finite numbers"):
        load_scene(stop_copy)


def test_a_grey_texture_loads_as_rgb_with_a_warning(stop_copy):
    grey = cv2.imread(str(stop_copy / "texture.png"), cv2.IMREAD_GRAYSCALE)
    cv2.imwrite(str(stop_copy / "texture.png"), grey)
    with pytest.warns(UserWarning, match=r"texture .*texture\.png has no colour"):
        scene = load_scene(stop_copy)
    assert scene.texture.shape == (3, 512, 512)
    assert np.allclose(scene.texture[0].numpy() * 255, grey, atol=0.5)


def test_a_16_bit_texture_loads_as_8_bit_rgb(stop_copy):
    bgr = cv2.imread(str(stop_copy / "texture.png"))
    cv2.imwrite(str(stop_copy / "texture.png"), bgr.astype(np.uint16) * 257)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scene = load_scene(stop_copy)
    expected = np.moveaxis(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB), 2, 0)
    assert np.array_equal((scene.texture.numpy() * 255).round().astype(np.uint8), expected)


def test_rgba_texture_opaque_is_used_transparent_is_refused(stop_copy):
    rgb = cv2.cvtColor(cv2.imread(str(stop_copy / "texture.png")), cv2.COLOR_BGR2RGB)
    rgba = np.concatenate([rgb, np.full((*rgb.shape[:2], 1), 255, np.uint8)], 2)
    Image.fromarray(rgba).save(stop_copy / "texture.png")
    scene = load_scene(stop_copy)
    assert np.array_equal((scene.texture.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8), rgb)
    rgba[:10, :10, 3] = 0
    Image.fromarray(rgba).save(stop_copy / "texture.png")
    with pytest.raises(SceneError, match=r"texture .*texture\.png has transparent pixels"):
        load_scene(stop_copy)


def test_truncated_texture_or_mask_is_a_scene_error(stop_copy):
    data = (stop_copy / "face_mask.png").read_bytes()
    (stop_copy / "face_mask.png").write_bytes(data[:len(data) // 2])
    with pytest.raises(SceneError, match=r"face mask .*face_mask\.png is truncated"):
        load_scene(stop_copy)


@pytest.mark.parametrize("key, value, words", [
    ("texture_size_m", [0.75, 0.0], "texture_size_m must be a non-empty list of numbers > 0"),
    ("texture_size_m", [0.75], "texture_size_m must be [width, height]"),
    ("regions", {"window": [0.8, 0.3, 0.2, 0.7]}, "regions.window must be [x0, y0, x1, y1] with x0 < x1"),
    ("regions", {"window": [0.2, 0.3, 1.8, 0.7]}, "regions.window must be a non-empty list of numbers in [0, 1]"),
])
def test_scene_yaml_numbers_are_checked(stop_copy, key, value, words):
    desc = yaml.safe_load((stop_copy / "scene.yaml").read_text())
    desc[key] = value
    (stop_copy / "scene.yaml").write_text(yaml.safe_dump(desc))
    with pytest.raises(SceneError) as err:
        load_scene(stop_copy)
    assert str(err.value).startswith(str(stop_copy / "scene.yaml")) and words in str(err.value)


def test_scene_yaml_that_is_not_yaml_is_a_scene_error(stop_copy):
    (stop_copy / "scene.yaml").write_text("name: [unclosed\n")
    with pytest.raises(SceneError, match="not valid YAML"):
        load_scene(stop_copy)
