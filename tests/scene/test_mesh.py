"""OBJ/MTL reading and writing, and the mesh's own queries (physattack/scene/mesh.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from physattack.errors import InputError
from physattack.scene import Material, Mesh, MeshError, load_obj, save_obj
from physattack.scene.scene import bundled_scenes_dir


def _interleaved_mesh() -> Mesh:
    """Two quads (four triangles) whose materials alternate face by face, one of them textured."""
    verts = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [0.0, 1.0, 0.0],
                          [2.0, 0.0, 0.5], [3.0, 0.0, 0.5], [3.0, 1.0, 0.5], [2.0, 1.0, 0.5]])
    faces = torch.tensor([[0, 1, 2], [4, 5, 6], [0, 2, 3], [4, 6, 7]])
    uvs = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0], [0.25, 0.75]])
    face_uvs = torch.tensor([[0, 1, 2], [4, 4, 4], [0, 2, 3], [4, 4, 4]])
    normals = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.6, 0.8]])
    face_normals = torch.tensor([[0, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1]])
    materials = (Material("skin", (1.0, 1.0, 1.0), specular=0.1, shininess=12.0, texture="skin.png"),
                 Material("paint", (0.25, 0.5, 0.75), specular=0.3, shininess=40.0))
    return Mesh(verts=verts, faces=faces, uvs=uvs, face_uvs=face_uvs, normals=normals,
                face_normals=face_normals, face_materials=torch.tensor([0, 1, 0, 1]), materials=materials)


def _corner_set(mesh: Mesh) -> set:
    """Each triangle as (positions, uvs, normals, material name), rounded; order-free."""
    out = set()
    for f in range(len(mesh.faces)):
        pos = tuple(tuple(round(c, 5) for c in mesh.verts[i].tolist()) for i in mesh.faces[f].tolist())
        uv = tuple(tuple(round(c, 5) for c in mesh.uvs[i].tolist()) for i in mesh.face_uvs[f].tolist())
        nrm = tuple(tuple(round(c, 5) for c in mesh.normals[i].tolist()) for i in mesh.face_normals[f].tolist())
        out.add((pos, uv, nrm, mesh.materials[int(mesh.face_materials[f])].name))
    return out


def _write(tmp_path: Path, obj: str, mtl: str | None = None, name: str = "m.obj") -> Path:
    path = tmp_path / name
    path.write_text(obj)
    if mtl is not None:
        (tmp_path / "m.mtl").write_text(mtl)
    return path


TRIANGLE_OBJ_HEAD = "v 0 0 0\nv 1 0 0\nv 0 1 0\n"


def test_bundled_stop_sign_round_trip_preserves_everything(tmp_path):
    mesh = load_obj(bundled_scenes_dir() / "stop_sign" / "sign.obj")
    save_obj(mesh, tmp_path / "copy.obj")
    assert (tmp_path / "copy.mtl").is_file()
    back = load_obj(tmp_path / "copy.obj")
    # The bundled mesh lists its faces grouped by material, so even the face order survives.
    torch.testing.assert_close(back.verts, mesh.verts, atol=1e-6, rtol=0)
    torch.testing.assert_close(back.uvs, mesh.uvs, atol=1e-6, rtol=0)
    torch.testing.assert_close(back.normals, mesh.normals, atol=1e-6, rtol=0)
    assert torch.equal(back.faces, mesh.faces)
    assert torch.equal(back.face_uvs, mesh.face_uvs)
    assert torch.equal(back.face_normals, mesh.face_normals)
    assert torch.equal(back.face_materials, mesh.face_materials)
    assert [m.name for m in back.materials] == [m.name for m in mesh.materials]
    for a, b in zip(back.materials, mesh.materials):
        assert a.diffuse == pytest.approx(b.diffuse, abs=1e-4)
        assert a.specular == pytest.approx(b.specular, abs=1e-4)
        assert a.shininess == pytest.approx(b.shininess, abs=1e-2)
        assert a.texture == b.texture


def test_round_trip_of_interleaved_materials_keeps_every_triangle(tmp_path):
    mesh = _interleaved_mesh()
    save_obj(mesh, tmp_path / "mesh.obj")
    back = load_obj(tmp_path / "mesh.obj")
    assert len(back.faces) == len(mesh.faces)
    assert _corner_set(back) == _corner_set(mesh)
    assert back.textured_material is not None
    assert back.materials[back.textured_material].texture == "skin.png"
    paint = back.materials[[m.name for m in back.materials].index("paint")]
    assert paint.diffuse == pytest.approx((0.25, 0.5, 0.75), abs=1e-4)
    assert paint.texture is None


def test_polygons_are_fanned_and_negative_indices_count_from_the_end(tmp_path):
    obj = ("v 0 0 0\nv 1 0 0\nv 1 1 0\nv 0 1 0\n"
           "vt 0 0\nvt 1 0\nvt 1 1\nvt 0 1\n"
           "f -4/-4 -3/-3 -2/-2 -1/-1\n")
    mesh = load_obj(_write(tmp_path, obj))
    assert mesh.faces.tolist() == [[0, 1, 2], [0, 2, 3]]
    assert mesh.face_uvs.tolist() == [[0, 1, 2], [0, 2, 3]]
    # No 'vn' lines: flat normals from the winding (counter-clockwise seen from +z).
    n = mesh.normals[mesh.face_normals[:, 0]]
    torch.testing.assert_close(n, torch.tensor([[0.0, 0.0, 1.0]] * 2))
    assert mesh.materials[0].name == "default"
    assert mesh.textured_material is None


def test_obj_without_vt_lines_names_the_missing_uvs(tmp_path):
    path = _write(tmp_path, TRIANGLE_OBJ_HEAD + "f 1/1 2/2 3/3\n")
    with pytest.raises(MeshError, match="UV"):
        load_obj(path)


@pytest.mark.parametrize("face_line", ["f 1 2 3", "f 1//1 2//1 3//1"])
def test_faces_without_uv_indices_raise_with_line_number(tmp_path, face_line):
    obj = TRIANGLE_OBJ_HEAD + "vt 0 0\nvn 0 0 1\n" + face_line + "\n"
    path = _write(tmp_path, obj)
    with pytest.raises(MeshError, match="UV") as info:
        load_obj(path)
    assert f"{path}:6" in str(info.value)


def test_missing_mesh_file_raises_mesh_error(tmp_path):
    with pytest.raises(MeshError, match="does not exist"):
        load_obj(tmp_path / "absent.obj")


def test_mesh_error_is_an_input_error():
    assert issubclass(MeshError, InputError)


def test_missing_material_library_raises(tmp_path):
    obj = "mtllib nowhere.mtl\n" + TRIANGLE_OBJ_HEAD + "vt 0 0\nf 1/1 2/1 3/1\n"
    with pytest.raises(MeshError, match="nowhere.mtl"):
        load_obj(_write(tmp_path, obj))


def test_mesh_without_faces_raises(tmp_path):
    with pytest.raises(MeshError, match="no faces"):
        load_obj(_write(tmp_path, TRIANGLE_OBJ_HEAD + "vt 0 0\n"))


def test_two_texture_maps_are_refused(tmp_path):
    mtl = "newmtl a\nmap_Kd a.png\nnewmtl b\nmap_Kd b.png\n"
    obj = ("mtllib m.mtl\n" + TRIANGLE_OBJ_HEAD + "v 1 1 0\nvt 0 0\n"
           "usemtl a\nf 1/1 2/1 3/1\nusemtl b\nf 2/1 4/1 3/1\n")
    with pytest.raises(MeshError, match="more than one texture"):
        load_obj(_write(tmp_path, obj, mtl))


def test_mtl_values_are_parsed(tmp_path):
    mtl = "# comment\nnewmtl shiny\nKd 0.1 0.2 0.3\nKs 0.3 0.6 0.9\nNs 55\nmap_Kd -bm 1 tex.png\n"
    obj = "mtllib m.mtl\n" + TRIANGLE_OBJ_HEAD + "vt 0 0\nusemtl shiny\nf 1/1 2/1 3/1\n"
    mesh = load_obj(_write(tmp_path, obj, mtl))
    (mat,) = mesh.materials
    assert mat.diffuse == pytest.approx((0.1, 0.2, 0.3))
    assert mat.specular == pytest.approx(0.6)
    assert mat.shininess == pytest.approx(55.0)
    assert mat.texture == "tex.png"        # the file name is the last argument of map_Kd
    assert mesh.textured_material == 0


def test_faces_of_selects_by_material_name():
    mesh = _interleaved_mesh()
    assert mesh.faces_of({"paint"}).tolist() == [False, True, False, True]
    assert mesh.faces_of(["skin", "paint"]).all()
    assert not mesh.faces_of(set()).any()
    assert not mesh.faces_of({"no_such_material"}).any()


def test_stop_sign_mesh_geometry():
    mesh = load_obj(bundled_scenes_dir() / "stop_sign" / "sign.obj")
    face = mesh.faces_of({"face"})
    front = mesh.verts[mesh.faces[face].unique()]
    # The front is the z = 0 plane, a regular octagon 0.75 m across its flats.
    assert torch.all(front[:, 2] == 0)
    assert float(front[:, 0].max() - front[:, 0].min()) == pytest.approx(0.75, abs=1e-5)
    assert float(front[:, 1].max() - front[:, 1].min()) == pytest.approx(0.75, abs=1e-5)
    radius = front[:, :2].norm(dim=-1)
    assert torch.allclose(radius, torch.full_like(radius, 0.375 / math.cos(math.pi / 8)), atol=1e-5)
    # Front normals point at a viewer on +z; UVs span the face's bounding box with v up.
    assert torch.allclose(mesh.normals[mesh.face_normals[face]], torch.tensor([0.0, 0.0, 1.0]))
    for f in torch.nonzero(face).flatten().tolist():
        xy = mesh.verts[mesh.faces[f], :2]
        uv = mesh.uvs[mesh.face_uvs[f]]
        torch.testing.assert_close(uv, (xy + 0.375) / 0.75, atol=1e-5, rtol=0)
    # The post reaches the ground 2.1 m below the face centre.
    post = mesh.verts[mesh.faces[mesh.faces_of({"post"})].unique()]
    assert float(post[:, 1].min()) == pytest.approx(-2.1, abs=1e-6)
    assert float(post[:, 2].max()) < 0.0


def test_mesh_to_keeps_values_and_materials():
    mesh = _interleaved_mesh()
    moved = mesh.to("cpu")
    assert moved.materials == mesh.materials
    for name in ("verts", "faces", "uvs", "face_uvs", "normals", "face_normals", "face_materials"):
        assert torch.equal(getattr(moved, name), getattr(mesh, name))
