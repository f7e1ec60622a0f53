"""Triangle meshes with UVs and materials, and a Wavefront OBJ/MTL reader and writer.

A mesh carries at most one texture map: the one a patch may cover. Every other material is drawn
with its flat diffuse colour. Coordinates are metres; UVs follow OBJ (u to the right, v up).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

from physattack.atomic import save_text
from physattack.errors import InputError


class MeshError(InputError):
    """A mesh file that cannot be used; the message says what is wrong and what to do."""


@dataclass(frozen=True)
class Material:
    """Shading constants of one material.

    Args:
        name: the material's name in the MTL file.
        diffuse: RGB albedo in [0, 1], used where the material has no texture.
        specular: strength of the specular highlight in [0, 1].
        shininess: Phong exponent.
        texture: file name of the diffuse texture map, or ``None`` for a flat colour.
    """

    name: str
    diffuse: tuple[float, float, float] = (0.8, 0.8, 0.8)
    specular: float = 0.0
    shininess: float = 10.0
    texture: str | None = None


@dataclass(frozen=True)
class Mesh:
    """A triangle mesh whose faces index positions, UVs and normals separately (as OBJ does).

    Shape:
        verts: V×3 metres. faces: F×3 indices into ``verts``.
        uvs: T×2 in [0, 1]. face_uvs: F×3 indices into ``uvs``.
        normals: N×3 unit vectors. face_normals: F×3 indices into ``normals``.
        face_materials: F indices into ``materials``.
    """

    verts: Tensor
    faces: Tensor
    uvs: Tensor
    face_uvs: Tensor
    normals: Tensor
    face_normals: Tensor
    face_materials: Tensor
    materials: tuple[Material, ...] = field(default_factory=tuple)

    @property
    def textured_material(self) -> int | None:
        """Index of the one material with a texture map, or ``None``."""
        found = [i for i, m in enumerate(self.materials) if m.texture is not None]
        return found[0] if found else None

    def faces_of(self, names: set[str] | list[str]) -> Tensor:
        """Boolean F mask of the faces whose material name is in ``names``."""
        ids = [i for i, m in enumerate(self.materials) if m.name in set(names)]
        return torch.isin(self.face_materials, torch.tensor(ids, dtype=torch.long, device=self.face_materials.device))

    def to(self, device: torch.device | str) -> "Mesh":
        tensors = {k: getattr(self, k).to(device) for k in
                   ("verts", "faces", "uvs", "face_uvs", "normals", "face_normals", "face_materials")}
        return Mesh(**tensors, materials=self.materials)


def _numbers(path: Path, lineno: int, line: str, args: list[str], count: int, what: str) -> list[float]:
    """The first ``count`` numbers of an OBJ/MTL line, each finite, or a MeshError naming the line."""
    try:
        values = [float(a) for a in args[:count]]
    except ValueError:
        values = []
    if len(values) < count or not all(math.isfinite(v) for v in values):
        raise MeshError(f"{path}:{lineno}: {what} needs {count} finite numbers but the line reads "
                        f"'{line.strip()}'; fix or remove that line.")
    return values


def _parse_mtl(path: Path) -> dict[str, Material]:
    if not path.is_file():
        raise MeshError(f"The material library {path} named by the OBJ file does not exist; "
                        "put it beside the OBJ file or remove the 'mtllib' line.")
    materials: dict[str, dict] = {}
    current: dict | None = None
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        key, args = parts[0], parts[1:]
        if key == "newmtl":
            if not args:
                raise MeshError(f"{path}:{lineno}: 'newmtl' has no material name; name the material.")
            current = {"name": args[0]}
            materials[args[0]] = current
        elif current is None:
            continue
        elif key == "Kd":
            current["diffuse"] = tuple(_numbers(path, lineno, line, args, 3, "a diffuse colour (Kd)"))
        elif key == "Ks":
            current["specular"] = float(sum(_numbers(path, lineno, line, args, 3, "a specular colour (Ks)")) / 3.0)
        elif key == "Ns":
            current["shininess"] = _numbers(path, lineno, line, args, 1, "a shininess (Ns)")[0]
        elif key == "map_Kd":
            if not args:
                raise MeshError(f"{path}:{lineno}: 'map_Kd' names no texture file; name one or remove the line.")
            current["texture"] = args[-1]
    return {name: Material(**m) for name, m in materials.items()}


_PLURAL = {"vertex": "vertices", "UV": "UVs", "normal": "normals"}


def _corner(path: Path, lineno: int, line: str, corner: str, counts: tuple[int, int, int]) -> list[int]:
    """One face corner ``v/vt[/vn]`` as 0-based indices (-1: no normal). OBJ indices are 1-based;
    a negative one counts back from the last element defined so far."""
    fields = (corner.split("/") + ["", ""])[:3]
    out = []
    for field_, count, kind in zip(fields, counts, ("vertex", "UV", "normal")):
        if not field_:
            out.append(-1)
            continue
        try:
            i = int(field_)
        except ValueError:
            raise MeshError(f"{path}:{lineno}: the face corner '{corner}' is not v/vt/vn indices; "
                            "fix that line.") from None
        if i == 0 or (i < 0 and count + i < 0):
            raise MeshError(f"{path}:{lineno}: the face refers to {kind} {i}, but only {count} {_PLURAL[kind]} "
                            "are defined before it; fix the face's indices.")
        out.append(i - 1 if i > 0 else count + i)
    return out


def load_obj(path: str | Path) -> Mesh:
    """Read a UV-mapped triangle or polygon mesh (polygons are fanned into triangles).

    Raises:
        MeshError: the file is missing, has no faces, has no UVs on its textured faces, names more
            than one texture map, or has a line that cannot be used (a vertex that is not finite, a
            face index past its list); a line's message names the file and line number.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"The mesh file {path} does not exist; check the scene's 'mesh' entry.")
    verts, uvs, normals = [], [], []
    faces, face_uvs, face_normals, face_materials, face_lines = [], [], [], [], []
    materials: dict[str, Material] = {}
    names: list[str] = []
    current = -1
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        key, args = parts[0], parts[1:]
        if key == "v":
            verts.append(_numbers(path, lineno, line, args, 3, "a vertex"))
        elif key == "vt":
            uvs.append(_numbers(path, lineno, line, args, 2, "a UV coordinate"))
        elif key == "vn":
            normals.append(_numbers(path, lineno, line, args, 3, "a normal"))
        elif key == "mtllib":
            materials.update(_parse_mtl(path.parent / " ".join(args)))
        elif key == "usemtl":
            if not args:
                raise MeshError(f"{path}:{lineno}: 'usemtl' names no material; name one or remove the line.")
            if args[0] not in names:
                names.append(args[0])
            current = names.index(args[0])
        elif key == "f":
            if len(args) < 3:
                raise MeshError(f"{path}:{lineno}: a face needs at least 3 corners but the line reads "
                                f"'{line.strip()}'; fix or remove that line.")
            corners = [c.split("/") for c in args]
            if any(len(c) < 2 or not c[1] for c in corners):
                raise MeshError(f"{path}:{lineno}: the face has no UV index; the mesh has no UV "
                                "coordinates, so a texture cannot be mapped onto it. Export it with "
                                "UVs (e.g. 'Include UVs' in Blender's OBJ exporter).")
            idx = [_corner(path, lineno, line, c, (len(verts), len(uvs), len(normals))) for c in args]
            for k in range(1, len(idx) - 1):
                tri = (idx[0], idx[k], idx[k + 1])
                faces.append([t[0] for t in tri])
                face_uvs.append([t[1] for t in tri])
                face_normals.append([t[2] for t in tri])
                face_materials.append(max(current, 0))
                face_lines.append(lineno)
    if not faces:
        raise MeshError(f"The mesh file {path} has no faces; export the mesh as triangles or polygons.")
    if not uvs:
        raise MeshError(f"The mesh file {path} has no UV coordinates ('vt' lines); export it with UVs "
                        "so a texture can be mapped onto it.")
    for index, count, kind in ((faces, len(verts), "vertex"), (face_uvs, len(uvs), "UV"),
                               (face_normals, len(normals), "normal")):
        bad = next((f for f, tri in enumerate(index) if max(tri) >= count), None)
        if bad is not None:
            raise MeshError(f"{path}:{face_lines[bad]}: the face refers to {kind} {max(index[bad]) + 1}, but the "
                            f"file defines only {count} {_PLURAL[kind]}; fix the face's indices.")

    verts_t = torch.tensor(verts, dtype=torch.float32)
    faces_t = torch.tensor(faces, dtype=torch.long)
    if not normals or any(-1 in n for n in face_normals):
        normals_t, face_normals_t = _flat_normals(verts_t, faces_t)
    else:
        normals_t = torch.nn.functional.normalize(torch.tensor(normals, dtype=torch.float32), dim=-1)
        face_normals_t = torch.tensor(face_normals, dtype=torch.long)
    mats = tuple(materials.get(n, Material(name=n)) for n in names) or (Material(name="default"),)
    if sum(m.texture is not None for m in mats) > 1:
        raise MeshError(f"{path} uses more than one texture map; physattack patches one texture, so "
                        "bake the materials into a single texture atlas.")
    return Mesh(verts=verts_t, faces=faces_t, uvs=torch.tensor(uvs, dtype=torch.float32),
                face_uvs=torch.tensor(face_uvs, dtype=torch.long), normals=normals_t, face_normals=face_normals_t,
                face_materials=torch.tensor(face_materials, dtype=torch.long), materials=mats)


def _flat_normals(verts: Tensor, faces: Tensor) -> tuple[Tensor, Tensor]:
    tri = verts[faces]
    n = torch.nn.functional.normalize(torch.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0], dim=-1), dim=-1)
    return n, torch.arange(len(faces)).unsqueeze(1).expand(-1, 3).contiguous()


def save_obj(mesh: Mesh, path: str | Path) -> None:
    """Write ``mesh`` as OBJ with an MTL beside it (same stem)."""
    path = Path(path)
    mtl = path.with_suffix(".mtl")
    lines = [f"# physattack mesh: {len(mesh.verts)} vertices, {len(mesh.faces)} triangles",
             f"mtllib {mtl.name}"]
    lines += [f"v {x:.6f} {y:.6f} {z:.6f}" for x, y, z in mesh.verts.tolist()]
    lines += [f"vt {u:.6f} {v:.6f}" for u, v in mesh.uvs.tolist()]
    lines += [f"vn {x:.6f} {y:.6f} {z:.6f}" for x, y, z in mesh.normals.tolist()]
    for m_id, mat in enumerate(mesh.materials):
        lines.append(f"usemtl {mat.name}")
        for f in torch.nonzero(mesh.face_materials == m_id).flatten().tolist():
            corners = zip(mesh.faces[f].tolist(), mesh.face_uvs[f].tolist(), mesh.face_normals[f].tolist())
            lines.append("f " + " ".join(f"{v + 1}/{t + 1}/{n + 1}" for v, t, n in corners))
    save_text(path, "\n".join(lines) + "\n")
    mtl_lines = []
    for mat in mesh.materials:
        mtl_lines += [f"newmtl {mat.name}", "Kd {:.4f} {:.4f} {:.4f}".format(*mat.diffuse),
                      f"Ks {mat.specular:.4f} {mat.specular:.4f} {mat.specular:.4f}",
                      f"Ns {mat.shininess:.2f}"]
        if mat.texture:
            mtl_lines.append(f"map_Kd {mat.texture}")
        mtl_lines.append("")
    save_text(mtl, "\n".join(mtl_lines))
