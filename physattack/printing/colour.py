"""The printer/camera colour model: what a texel's colour becomes on paper, and in a photograph.

A model has up to three differentiable stages, each a plain function of tensors:

1. **printer**: a polynomial map (degree 1 = affine, 2, 3) in linear RGB from the colour sent to the
   printer to the colour of the print (``calibrate fit`` measures it from a photo of a chart);
2. **gamut**: a soft clamp, in sRGB, into the box of colours the print can reach (paper white and the
   printer's black for the default model; the range seen on the chart for a fitted one). Inside the
   box it is the identity to within 1/255; outside, the gradient shrinks but never vanishes at once;
3. **camera** (optional): a polynomial map in linear RGB applied to whole rendered images, for a
   camera's colour response.

``print_patch`` puts stages 1–2 between the patch and the renderer for the patch's texels only (the
rest of the object is not printed); ``PhotographedPipeline`` applies stage 3 after the renderer.

Model files are JSON (``format: physattack-colour-model``); the default, shipped in
``assets/colour_model_default.json``, is the identity plus the palette's gamut.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from importlib import resources
from pathlib import Path

import kornia
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from physattack.errors import InputError

FORMAT = "physattack-colour-model"


class ColourModelError(InputError):
    """A colour model file that cannot be used; the message says what to do."""


def default_colour_model_path() -> Path:
    return Path(str(resources.files("physattack.assets"))) / "colour_model_default.json"


def polynomial_terms(degree: int) -> list[tuple[int, ...]]:
    """Monomials of linear RGB up to ``degree``, as tuples of channel indices: () is the constant."""
    if degree not in (1, 2, 3):
        raise ColourModelError(f"A colour model's degree must be 1 (affine), 2 or 3, not {degree}.")
    return [()] + [t for d in range(1, degree + 1) for t in itertools.combinations_with_replacement(range(3), d)]


def polynomial_features(rgb: Tensor, degree: int) -> Tensor:
    """``...×3`` colours to ``...×F`` monomials (``F`` = 4, 10, 20 for degree 1, 2, 3)."""
    ones = torch.ones_like(rgb[..., :1])
    cols = [ones if not t else torch.stack([rgb[..., c] for c in t], -1).prod(-1, keepdim=True)
            for t in polynomial_terms(degree)]
    return torch.cat(cols, -1)


def identity_coefficients(degree: int) -> np.ndarray:
    """3×F coefficients of the identity map."""
    terms = polynomial_terms(degree)
    coeffs = np.zeros((3, len(terms)))
    for c in range(3):
        coeffs[c, terms.index((c,))] = 1.0
    return coeffs


def soft_clamp(x: Tensor, low: Tensor, high: Tensor, softness: float) -> Tensor:
    """``low + s·softplus((x−low)/s) − s·softplus((x−high)/s)``: the identity well inside [low, high]."""
    s = softness
    return low + s * F.softplus((x - low) / s) - s * F.softplus((x - high) / s)


def _apply_polynomial(srgb: Tensor, coeffs: Tensor, degree: int) -> Tensor:
    """Apply a 3×F polynomial in linear RGB to ``B×3×H×W`` or ``3×H×W`` sRGB; returns sRGB (unclamped)."""
    lin = kornia.color.rgb_to_linear_rgb(srgb.clamp(0, 1))
    channels_last = lin.movedim(-3, -1)
    out = polynomial_features(channels_last, degree) @ coeffs.T.to(lin)
    return _linear_to_srgb(out.movedim(-1, -3))


def _linear_to_srgb(lin: Tensor) -> Tensor:
    """sRGB encoding that stays finite (and odd-symmetric) for the small negatives a fitted map can give."""
    a = lin.abs()
    enc = torch.where(a > 0.0031308, 1.055 * a.clamp(min=0.0031308) ** (1 / 2.4) - 0.055, 12.92 * a)
    return torch.sign(lin) * enc


class ColourModel(nn.Module):
    """Printer (polynomial + gamut) and optional camera stage; every stage is differentiable.

    Args:
        printer: 3×F coefficients of the printer polynomial in linear RGB.
        degree: the printer polynomial's degree.
        gamut_low, gamut_high: per-channel sRGB bounds of what the print can show.
        softness: width of the gamut's soft knee, in sRGB units (0: a hard clamp).
        camera: 3×F coefficients of the camera polynomial (``camera_degree``), or None.
        info: whatever the file said about where the model came from (kept for the export manifest).

    Shape:
        print_colours: 3×H×W or B×3×H×W sRGB in [0, 1] -> the same shape, as printed.
        photograph: B×3×H×W images -> B×3×H×W.
    """

    def __init__(self, printer: Tensor | np.ndarray, degree: int = 1, gamut_low=(0.0, 0.0, 0.0),
                 gamut_high=(1.0, 1.0, 1.0), softness: float = 1 / 255, camera: Tensor | np.ndarray | None = None,
                 camera_degree: int = 1, info: dict | None = None):
        super().__init__()
        printer = torch.as_tensor(np.asarray(printer, dtype=np.float32))
        terms = len(polynomial_terms(degree))
        if printer.shape != (3, terms):
            raise ColourModelError(f"A degree-{degree} colour model needs 3×{terms} printer coefficients, got "
                                   f"{tuple(printer.shape)}; fit one with 'python -m physattack.calibrate fit'.")
        self.degree, self.camera_degree, self.softness = degree, camera_degree, float(softness)
        self.register_buffer("printer", printer)
        self.register_buffer("gamut_low", torch.tensor(gamut_low, dtype=torch.float32).view(3, 1, 1))
        self.register_buffer("gamut_high", torch.tensor(gamut_high, dtype=torch.float32).view(3, 1, 1))
        if camera is not None:
            camera = torch.as_tensor(np.asarray(camera, dtype=np.float32))
            if camera.shape != (3, len(polynomial_terms(camera_degree))):
                raise ColourModelError(f"The camera stage needs 3×{len(polynomial_terms(camera_degree))} "
                                       f"coefficients for degree {camera_degree}, got {tuple(camera.shape)}.")
        self.register_buffer("camera", camera)
        self.info = dict(info or {})

    @classmethod
    def identity(cls) -> "ColourModel":
        """No change at all: the screen's colours are the print's (for ablations)."""
        return cls(identity_coefficients(1), 1, softness=0.0, info={"name": "identity"})

    @property
    def has_camera(self) -> bool:
        return self.camera is not None

    def print_colours(self, colours: Tensor) -> Tensor:
        """Colours sent to the printer -> colours of the print (sRGB)."""
        out = _apply_polynomial(colours, self.printer, self.degree)
        if self.softness <= 0:
            return torch.maximum(torch.minimum(out, self.gamut_high), self.gamut_low)
        return soft_clamp(out, self.gamut_low, self.gamut_high, self.softness)

    def print_patch(self, texture: Tensor, mask: Tensor) -> Tensor:
        """The texture (3×H×W) with the texels where ``mask`` (1×H×W) is 1 replaced by their printed
        colours (blended by the mask's weight where it is fractional). A batch of textures
        (B×3×H×W, e.g. a task input per view) is printed in one call."""
        on = mask[0] > 0
        if texture.dim() == 4:
            b, weight = len(texture), mask[:, on]
            texels = texture[:, :, on]                                # B×3×N
            if torch.equal(texels, texels[:1].expand_as(texels)):    # one patch on every texture: print it once
                printed = self.print_colours(texels[0].unsqueeze(-1))[..., 0].expand_as(texels)
            else:
                flat = texels.transpose(0, 1).reshape(3, -1, 1)
                printed = self.print_colours(flat).reshape(3, b, -1).transpose(0, 1)
            out = texture.clone()
            out[:, :, on] = texels * (1 - weight) + printed * weight
            return out
        weight = mask[:, on]                                          # 1×N: only the patch's texels
        printed = self.print_colours(texture[:, on].unsqueeze(-1))[..., 0]
        out = texture.clone()
        out[:, on] = texture[:, on] * (1 - weight) + printed * weight
        return out

    def photograph(self, images: Tensor) -> Tensor:
        """The camera stage on rendered images (the identity when the model has none)."""
        if self.camera is None:
            return images
        return _apply_polynomial(images, self.camera, self.camera_degree).clamp(0, 1)

    def to_dict(self) -> dict:
        """The model as its JSON file holds it."""
        out = {"format": FORMAT, "version": 1, "space": "linear_rgb",
               "printer": {"degree": self.degree, "coefficients": self.printer.cpu().tolist()},
               "gamut": {"space": "srgb", "low": self.gamut_low.flatten().cpu().tolist(),
                         "high": self.gamut_high.flatten().cpu().tolist(), "softness": self.softness},
               "camera": None if self.camera is None else
               {"degree": self.camera_degree, "coefficients": self.camera.cpu().tolist()}}
        return {**out, **{k: v for k, v in self.info.items() if k not in out}}


class PhotographedPipeline:
    """A view pipeline whose images pass through the colour model's camera stage.

    Wraps anything called as ``pipeline(scene, texture, params, ...) -> RenderedViews``.
    """

    def __init__(self, pipeline, model: ColourModel):
        self.pipeline, self.model = pipeline, model

    def __getattr__(self, name):          # image_size, backgrounds, ... of the wrapped pipeline
        return getattr(self.pipeline, name)

    def __call__(self, scene, texture: Tensor, params, *args, **kwargs):
        views = self.pipeline(scene, texture, params, *args, **kwargs)
        return replace(views, images=self.model.photograph(views.images))


def model_from_dict(data: dict, source: str = "the colour model") -> ColourModel:
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ColourModelError(f"{source} is not a physattack colour model (no 'format: {FORMAT}'); make one "
                               "with 'python -m physattack.calibrate fit photo.jpg'.")
    try:
        printer, gamut, camera = data["printer"], data.get("gamut") or {}, data.get("camera")
        info = {k: v for k, v in data.items() if k not in {"printer", "gamut", "camera", "format", "version", "space"}}
        return ColourModel(printer["coefficients"], int(printer["degree"]), gamut.get("low", (0, 0, 0)),
                           gamut.get("high", (1, 1, 1)), float(gamut.get("softness", 1 / 255)),
                           None if camera is None else camera["coefficients"],
                           1 if camera is None else int(camera["degree"]), info=info)
    except (KeyError, TypeError, ValueError) as e:
        if isinstance(e, ColourModelError):
            raise
        raise ColourModelError(f"{source} is missing or garbles an entry ({e!r}); re-create it with "
                               "'python -m physattack.calibrate fit photo.jpg'.") from None


def load_colour_model(path: str | Path | None = None) -> ColourModel:
    """A model file (JSON), ``identity``, or None for the bundled identity-plus-gamut model."""
    if path is not None and str(path) == "identity":
        return ColourModel.identity()
    path = Path(path) if path else default_colour_model_path()
    if not path.is_file():
        raise ColourModelError(f"The colour model {path} does not exist; give printer.model a file written by "
                               "'python -m physattack.calibrate fit', 'identity', or null for the bundled model.")
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise ColourModelError(f"The colour model {path} is not JSON; give a file written by "
                               "'python -m physattack.calibrate fit'.") from None
    model = model_from_dict(data, str(path))
    model.info.setdefault("source", str(path))
    return model


def identity_plus_gamut(palette: Tensor, softness: float = 1 / 255) -> ColourModel:
    """The default model: colours unchanged, softly kept within the palette's darkest and lightest
    values per channel (the printer's black and the paper's white)."""
    return ColourModel(identity_coefficients(1), 1, palette.amin(0).tolist(), palette.amax(0).tolist(), softness,
                       info={"name": "identity plus gamut",
                             "description": "identity in linear RGB, soft-clamped per channel into the bundled "
                                            "palette's range (paper white and the printer's black)"})


__all__ = ["ColourModel", "ColourModelError", "PhotographedPipeline", "default_colour_model_path",
           "identity_plus_gamut", "load_colour_model", "model_from_dict", "polynomial_features",
           "polynomial_terms", "soft_clamp"]
