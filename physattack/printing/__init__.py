"""Printing: the printer palette and printability priors, the printer/camera colour model, export to
paper at true scale, and calibration from a photo of a printed chart."""

from physattack.printing.colour import ColourModel, load_colour_model
from physattack.printing.priors import default_palette_path, load_palette, non_printability_score, total_variation

__all__ = ["ColourModel", "default_palette_path", "load_colour_model", "load_palette", "non_printability_score",
           "total_variation"]
