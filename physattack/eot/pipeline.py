"""ViewPipeline: apply a SceneParams draw to a scene and texture — render, composite, camera effects."""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor

from physattack.eot.backgrounds import BackgroundBank
from physattack.eot.effects import apply_camera_effects
from physattack.eot.params import SceneParams
from physattack.errors import InputError, check_range
from physattack.render.renderer import RenderedViews, Renderer
from physattack.scene.scene import Scene


class ViewPipeline:
    """Turns (scene, texture, params) into the images a camera would take; differentiable in texture.

    Args:
        renderer: the rasterizer + shader pair.
        backgrounds: the bank that ``params.background_index`` points into.
        image_size: (H, W) of the output views.
        object_width_m: the width the camera frames (defaults to the scene's texture width).
    """

    def __init__(self, renderer: Renderer, backgrounds: BackgroundBank, image_size: tuple[int, int] = (96, 96),
                 object_width_m: float | None = None):
        self.renderer = renderer
        self.backgrounds = backgrounds
        if isinstance(image_size, int) or len(image_size) != 2:
            raise InputError(f"ViewPipeline's image_size must be (height, width) in pixels; got {image_size!r}.")
        self.image_size = tuple(check_range("image_size", side, 8, integer=True,
                                            why="the side of the rendered views in pixels") for side in image_size)
        if object_width_m is not None:
            check_range("ViewPipeline.object_width_m", object_width_m, 0.0, lo_open=True,
                        why="the width the camera frames, metres")
        self.object_width_m = object_width_m

    def __call__(self, scene: Scene, texture: Tensor, params: SceneParams, effects: bool = True) -> RenderedViews:
        params = params.to(texture.device)
        width = self.object_width_m or max(scene.texture_size_m)
        cameras = params.cameras(width, self.image_size)
        bg = self.backgrounds.crops(params.background_index, params.bg_x, params.bg_y, params.bg_scale,
                                    self.image_size)
        views = self.renderer.render(scene, texture, cameras, params.lights(), bg)
        if not effects:
            return views
        return replace(views, images=apply_camera_effects(views.images, params))

