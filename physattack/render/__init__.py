"""Rendering: cameras, rasterization, shading and compositing, in plain PyTorch."""

from physattack.render.camera import Cameras, fov_for_width, look_at_cameras
from physattack.render.raster import Fragments, MeshRasterizer
from physattack.render.renderer import RenderedViews, Renderer, mask_boxes
from physattack.render.shade import Lights, PhongShader

__all__ = ["Cameras", "Fragments", "Lights", "MeshRasterizer", "PhongShader", "RenderedViews", "Renderer",
           "fov_for_width", "look_at_cameras", "mask_boxes"]
