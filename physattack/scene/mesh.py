"""Triangle meshes with UVs and materials, and a Wavefront OBJ/MTL reader and writer.

A mesh carries at most one texture map: the one a patch may cover. Every other material is drawn
with its flat diffuse colour. Coordinates are metres; UVs follow OBJ (u to the right, v up).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor

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


def _parse_mtl(path: Path) -> dict[str, Material]:
    if not path.is_file():
        raise MeshError(f"The material library {path} named by the OBJ file does not exist; "
                        "put it beside the OBJ file or remove the 'mtllib' line.")
    materials: dict[str, dict] = {}
    current: dict | None = None
    for line in path.read_text().splitlines():
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        key, args = parts[0], parts[1:]
        if key == "newmtl":
            current = {"name": args[0]}
            materials[args[0]] = current
        elif current is None:
            continue
        elif key == "Kd":
            current["diffuse"] = tuple(float(a) for a in args[:3])
        elif key == "Ks":
            current["specular"] = float(sum(float(a) for a in args[:3]) / 3.0)
        elif key == "Ns":
            current["shininess"] = float(args[0])
        elif key == "map_Kd":
            current["texture"] = args[-1]
    return {name: Material(**m) for name, m in materials.items()}


def load_obj(path: str | Path) -> Mesh:
    """Read a UV-mapped triangle or polygon mesh (polygons are fanned into triangles).

    Raises:
        MeshError: the file is missing, has no faces, has no UVs on its textured faces, or names
            more than one texture map.
    """
    path = Path(path)
    if not path.is_file():
        raise MeshError(f"The mesh file {path} does not exist; check the scene's 'mesh' entry.")
    verts, uvs, normals = [], [], []
    faces, face_uvs, face_normals, face_materials = [], [], [], []
    materials: dict[str, Material] = {}
    names: list[str] = []
    current = -1
    for lineno, line in enumerate(path.read_text().splitlines(), start=1):
        parts = line.split()
        if not parts or parts[0].startswith("#"):
            continue
        key, args = parts[0], parts[1:]
        if key == "v":
            verts.append([float(a) for a in args[:3]])
        elif key == "vt":
            uvs.append([float(a) for a in args[:2]])
        elif key == "vn":
            normals.append([float(a) for a in args[:3]])
        elif key == "mtllib":
            materials.update(_parse_mtl(path.parent / " ".join(args)))
        elif key == "usemtl":
            if args[0] not in names:
                names.append(args[0])
            current = names.index(args[0])
        elif key == "f":
            corners = [c.split("/") for c in args]
            if any(len(c) < 2 or not c[1] for c in corners):
                raise MeshError(f"{path}:{lineno}: the face has no UV index; the mesh has no UV "
                                "coordinates, so a texture cannot be mapped onto it. Export it with "
                                "UVs (e.g. 'Include UVs' in Blender's OBJ exporter).")
            idx = [[int(x) if x else 0 for x in (c + ["", ""])[:3]] for c in corners]
            for k in range(1, len(idx) - 1):
                tri = (idx[0], idx[k], idx[k + 1])
                faces.append([t[0] for t in tri])
                face_uvs.append([t[1] for t in tri])
                face_normals.append([t[2] for t in tri])
                face_materials.append(max(current, 0))
    if not faces:
        raise MeshError(f"The mesh file {path} has no faces; export the mesh as triangles or polygons.")
    if not uvs:
        raise MeshError(f"The mesh file {path} has no UV coordinates ('vt' lines); export it with UVs "
                        "so a texture can be mapped onto it.")

    def fix(index: list[list[int]], count: int) -> Tensor:
        t = torch.tensor(index, dtype=torch.long)
        return torch.where(t < 0, t + count, t - 1)   # OBJ is 1-based; negatives count from the end

    verts_t = torch.tensor(verts, dtype=torch.float32)
    faces_t = fix(faces, len(verts))
    if not normals or any(0 in n for n in face_normals):
        normals_t, face_normals_t = _flat_normals(verts_t, faces_t)
    else:
        normals_t = torch.nn.functional.normalize(torch.tensor(normals, dtype=torch.float32), dim=-1)
        face_normals_t = fix(face_normals, len(normals))
    mats = tuple(materials.get(n, Material(name=n)) for n in names) or (Material(name="default"),)
    if sum(m.texture is not None for m in mats) > 1:
        raise MeshError(f"{path} uses more than one texture map; physattack patches one texture, so "
                        "bake the materials into a single texture atlas.")
    return Mesh(verts=verts_t, faces=faces_t, uvs=torch.tensor(uvs, dtype=torch.float32),
                face_uvs=fix(face_uvs, len(uvs)), normals=normals_t, face_normals=face_normals_t,
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
    path.write_text("\n".join(lines) + "\n")
    mtl_lines = []
    for mat in mesh.materials:
        mtl_lines += [f"newmtl {mat.name}", "Kd {:.4f} {:.4f} {:.4f}".format(*mat.diffuse),
                      f"Ks {mat.specular:.4f} {mat.specular:.4f} {mat.specular:.4f}",
                      f"Ns {mat.shininess:.2f}"]
        if mat.texture:
            mtl_lines.append(f"map_Kd {mat.texture}")
        mtl_lines.append("")
    mtl.write_text("\n".join(mtl_lines))
