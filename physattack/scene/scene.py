"""A scene: one UV-mapped object, its texture, the texels a patch may cover and its physical size.

A scene lives in a folder with a ``scene.yaml``::

    name: stop_sign
    class_name: stop              # the label a victim should give the clean object
    mesh: sign.obj                # OBJ + MTL; the MTL's one map_Kd is the patchable texture
    face_mask: face_mask.png      # white where a patch may go, in texture space
    texture_size_m: [0.75, 0.75]  # physical width and height that texture u, v in [0, 1] span
    support_materials: [post]     # parts drawn but not counted in the object's box
    regions:                      # optional named boxes in texture space, (x0, y0, x1, y1) as
      window: [0.2, 0.3, 0.8, 0.7]  #   shares of the texture's width and height from its top-left
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import torch
import yaml
from torch import Tensor

from physattack.errors import InputError
from physattack.imageio import MAX_TEXTURE_SIDE, read_grey, read_rgb
from physattack.scene.mesh import Mesh, MeshError, load_obj


class SceneError(InputError):
    """A scene that cannot be loaded; the message says what to do."""


@dataclass(frozen=True)
class Scene:
    """Everything the renderer and the patch need to know about the object.

    Shape:
        texture: 3×Ht×Wt float in [0, 1] (row 0 is the top of the face, v = 1).
        face_mask: 1×Ht×Wt float in {0, 1}.
    """

    name: str
    class_name: str
    mesh: Mesh
    texture: Tensor
    face_mask: Tensor
    texture_size_m: tuple[float, float]
    support_materials: tuple[str, ...] = ()
    regions: dict = field(default_factory=dict)

    @property
    def object_faces(self) -> Tensor:
        """Boolean F mask of the faces that belong to the object proper (not its supports)."""
        return ~self.mesh.faces_of(set(self.support_materials))

    def to(self, device: torch.device | str) -> "Scene":
        return Scene(self.name, self.class_name, self.mesh.to(device), self.texture.to(device),
                     self.face_mask.to(device), self.texture_size_m, self.support_materials, self.regions)


def bundled_scenes_dir() -> Path:
    """The folder of scenes shipped with physattack (``scenes/`` in a checkout)."""
    return Path(str(resources.files("physattack.scenes")))


def available_scenes() -> list[str]:
    return sorted(p.parent.name for p in bundled_scenes_dir().glob("*/scene.yaml"))


def load_scene(name_or_path: str | Path) -> Scene:
    """Load a bundled scene by name (``stop_sign``) or any scene folder by path."""
    folder = Path(name_or_path)
    if not (folder / "scene.yaml").is_file():
        folder = bundled_scenes_dir() / str(name_or_path)
    desc_path = folder / "scene.yaml"
    if not desc_path.is_file():
        raise SceneError(f"No scene '{name_or_path}': give a folder holding a scene.yaml or one of the "
                         f"bundled scenes: {', '.join(available_scenes())}.")
    try:
        desc = yaml.safe_load(desc_path.read_text())
    except yaml.YAMLError as exc:
        raise SceneError(f"{desc_path} is not valid YAML ({str(exc).splitlines()[0]}); fix it.") from None
    if not isinstance(desc, dict):
        raise SceneError(f"{desc_path} must be a mapping of keys (name, class_name, mesh, ...); fix it.")
    for key in ("name", "class_name", "mesh", "texture_size_m"):
        if key not in desc:
            raise SceneError(f"{desc_path} has no '{key}' entry; add it (see physattack/scene/scene.py).")
    try:
        mesh = load_obj(folder / desc["mesh"])
    except MeshError as e:
        raise SceneError(str(e)) from None
    tex_id = mesh.textured_material
    if tex_id is None:
        raise SceneError(f"{folder / desc['mesh']} has no material with a texture map (map_Kd), so there "
                         "is nothing a patch can cover; give its MTL a 'map_Kd texture.png' line.")
    texture_path = folder / mesh.materials[tex_id].texture
    texture = read_rgb(texture_path, "texture", error=SceneError, max_side=MAX_TEXTURE_SIDE)      # grey and 16-bit become 8-bit RGB
    if (texture == texture[..., :1]).all():
        warnings.warn(f"The texture {texture_path} has no colour (it is grey), so the object is rendered grey; "
                      "a victim trained on coloured objects may not recognise it.", stacklevel=2)
    texture_t = torch.from_numpy(texture).permute(2, 0, 1).float() / 255.0
    if "face_mask" in desc:
        mask = read_grey(folder / desc["face_mask"], "face mask", error=SceneError, max_side=MAX_TEXTURE_SIDE)
        if mask.shape != texture.shape[:2]:
            raise SceneError(f"The face mask {desc['face_mask']} is {mask.shape[1]}×{mask.shape[0]} but the "
                             f"texture is {texture.shape[1]}×{texture.shape[0]}; they must match.")
        mask_t = torch.from_numpy(mask > 127).float()[None]
    else:
        mask_t = torch.ones(1, *texture.shape[:2])
    w, h = _texture_size(desc_path, desc["texture_size_m"])
    return Scene(name=desc["name"], class_name=desc["class_name"], mesh=mesh, texture=texture_t,
                 face_mask=mask_t, texture_size_m=(float(w), float(h)),
                 support_materials=tuple(desc.get("support_materials", ())),
                 regions=_regions(desc_path, desc.get("regions") or {}))


def _texture_size(desc_path: Path, size) -> tuple[float, float]:
    name = f"{desc_path}: texture_size_m"
    if not isinstance(size, (list, tuple)) or len(size) != 2:
        raise SceneError(f"{name} must be [width, height] in metres; got {size!r}.")
    w, h = SceneError.check_values(name, size, 0.0, lo_open=True,
                                   why="the width and height in metres that the texture spans")
    return float(w), float(h)


def _regions(desc_path: Path, regions) -> dict[str, tuple[float, ...]]:
    if not isinstance(regions, dict):
        raise SceneError(f"{desc_path}: regions must map names to [x0, y0, x1, y1]; got {regions!r}.")
    out = {}
    for name, box in regions.items():
        box = SceneError.check_values(f"{desc_path}: regions.{name}", box, 0.0, 1.0,
                                      why="x0, y0, x1, y1 as shares of the texture's width and height")
        if len(box) != 4 or not (box[0] < box[2] and box[1] < box[3]):
            raise SceneError(f"{desc_path}: regions.{name} must be [x0, y0, x1, y1] with x0 < x1 and y0 < y1, "
                             f"as shares of the texture's width and height; got {box}.")
        out[name] = tuple(float(x) for x in box)
    return out
