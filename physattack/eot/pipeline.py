"""ViewPipeline: apply a SceneParams draw to a scene and texture — render, composite, camera effects."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import Tensor

from physattack.eot.backgrounds import BackgroundBank
from physattack.eot.effects import apply_camera_effects
from physattack.eot.fog import BACKDROP_DEPTH_M, Fog, airlight
from physattack.eot.night import NIGHT_BACKDROP, Headlights, headlit
from physattack.eot.params import SceneParams
from physattack.errors import InputError, check_range
from physattack.render.camera import Cameras
from physattack.render.renderer import RenderedViews, Renderer
from physattack.scene.scene import Scene


class ViewPipeline:
    """Turns (scene, texture, params) into the images a camera would take; differentiable in texture.

    Args:
        renderer: the rasterizer + shader pair.
        backgrounds: the bank that ``params.background_index`` points into.
        image_size: (H, W) of the output views.
        object_width_m: the width the camera frames (defaults to the scene's texture width).
        print_retroreflects: at night, the patch's print retroreflects as the sheeting does (``printer.material``:
            retroreflective film); False: it is matte (``physattack.eot.night``).
    """

    def __init__(self, renderer: Renderer, backgrounds: BackgroundBank, image_size: tuple[int, int] = (96, 96),
                 object_width_m: float | None = None, print_retroreflects: bool = False):
        self.renderer = renderer
        self.print_retroreflects = bool(print_retroreflects)
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
        """The views of ``params``: rendered over their backgrounds, lit at night by the car's headlamps where
        ``params.headlights`` says so, seen through fog of ``params.fog_beta``, then the camera's effects."""
        params = params.to(texture.device)
        width = self.object_width_m or max(scene.texture_size_m)
        cameras = params.cameras(width, self.image_size)
        bg = self.backgrounds.crops(params.background_index, params.bg_x, params.bg_y, params.bg_scale,
                                    self.image_size)
        night = params.headlights > 0
        if bool(night.any()):                       # a bank image is a daylight photograph: dark at night
            bg = torch.where(night.view(-1, 1, 1, 1), bg * NIGHT_BACKDROP, bg)
        views = self.renderer.render(scene, texture, cameras, params.lights(), bg)
        if bool(night.any()):
            views = replace(views, images=self._headlit(scene, texture, cameras, views, night))
        if bool((params.fog_beta > 0).any()):
            beta = params.fog_beta.float()
            fog = Fog(beta=beta, background_m=torch.full_like(beta, BACKDROP_DEPTH_M),
                      air=airlight(params.ambient.float(), params.diffuse.float(), params.lights().color.float()))
            views = replace(views, images=fog.view(views.images, views.alpha, params.distance_m.float()))
        if not effects:
            return views
        return replace(views, images=apply_camera_effects(views.images, params))

    def _headlit(self, scene: Scene, texture: Tensor, cameras: Cameras, views: RenderedViews,
                 night: Tensor) -> Tensor:
        """``views.images`` with what the car's headlamps (``physattack.eot.night.Headlights``' defaults, the drives')
        add to the views ``night`` marks, seen by their ``cameras`` (the lamps sit by each camera's place)."""
        idx = torch.nonzero(night).flatten()
        cams = cameras[idx]
        lit = headlit(self.renderer, scene, texture, cams, views.alpha[idx], Headlights(), cams.centers.float(),
                      self.print_retroreflects)
        return views.images.index_add(0, idx, lit)
