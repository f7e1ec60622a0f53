"""Scenes: UV-mapped meshes, their textures and physical sizes."""

from physattack.scene.mesh import Material, Mesh, MeshError, load_obj, save_obj
from physattack.scene.scene import Scene, SceneError, available_scenes, load_scene

__all__ = ["Material", "Mesh", "MeshError", "Scene", "SceneError", "available_scenes", "load_obj",
           "load_scene", "save_obj"]
