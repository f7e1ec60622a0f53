"""Expectation over transformation: distributions of viewing conditions, evaluation grids, camera effects
(dashcam drives and their EOT sampler are ``physattack.drive``)."""

from physattack.eot.backgrounds import BackgroundBank, folder_backgrounds, procedural_backgrounds
from physattack.eot.effects import apply_camera_effects
from physattack.eot.grid import LIGHTING_PRESETS, EvalGrid
from physattack.eot.params import SceneParams, color_temperature_rgb
from physattack.eot.pipeline import ViewPipeline
from physattack.eot.sampler import ViewSampler

__all__ = ["BackgroundBank", "EvalGrid", "LIGHTING_PRESETS", "SceneParams", "ViewPipeline", "ViewSampler",
           "apply_camera_effects", "color_temperature_rgb", "folder_backgrounds", "procedural_backgrounds"]
