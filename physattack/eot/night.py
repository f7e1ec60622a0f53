"""Night in the car's own headlights (drives, and views with ``SceneParams.headlights``): the sign face is
retroreflective sheeting, a printed sticker is not.

A stop sign's face is retroreflective sheeting (ASTM D4956): glass beads or prisms send the headlights' light
back towards its source, so the driver — a little above the lamps — sees the face hundreds of times brighter
than a matte surface of the same colour. A printed vinyl sticker is matte. At night the sticker turns dark on a
glowing sign; in daylight, lit by the sun and sky, the two look alike.

**The model** (per frame, at the face's centre; the face is small against its distance):

- Two headlamps, ``below_m`` under the lens and ``half_spacing_m`` to either side, each of luminous intensity
  ``intensity_cd`` towards the sign (a low beam puts 5-10 kcd a few degrees right of and above its axis, where
  a roadside sign is), light the face with illuminance ``E = I cos(β) / d²`` (``β``: the entrance angle
  between the face's normal and the lamp, ``d``: the lamp's distance).
- Sheeting returns luminance ``L = R_A(α, β) · E · albedo`` towards the camera, ``α`` the observation angle
  between the lamp and the camera seen from the sign. ``R_A`` (cd·lx⁻¹·m⁻²) follows the minimum coefficients
  of ASTM D4956 for white sheeting — Type I (engineering grade) 70 at α = 0.2°, β = −4°, 30 at α = 0.5°;
  Type III (high intensity) 250 and 95 — as ``R_A(0.2°) · (α / 0.2°)^-0.92`` (the fall from 0.2° to 0.5°), and
  ``cos(β)^2.4`` (70 → 50 at β = 30°); a coloured face returns its albedo's share, as red sheeting's
  coefficient is about a fifth of white's. Below 0.2° it stays at its 0.2° value.
- Print (stickers, paint) and the post are Lambertian: ``L = E · albedo / π``.
- The camera's night exposure is fixed (``exposure``, pixel value per cd/m²: a white matte surface 20 m ahead in
  the beam reads about 0.24, the dark street stays dark); what exceeds 1 clips, as a dashcam's does on a sign at night.

Which texels are sheeting: the face's (``scene.face_mask``) where the texture is the clean sign's; a texel the
attack changed is print. The same rule holds for a clean texture (all sheeting) and any attacked one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from physattack.errors import InputError, check_range

#: a background image's share of its daylight brightness at night (a bank image is a daylight photograph; streets
#: are lit instead)
NIGHT_BACKDROP = 0.05
#: white sheeting's coefficient of retroreflection at α = 0.2°, β = -4° (ASTM D4956 minimum), cd·lx⁻¹·m⁻²
SHEETING_RA = {"type_i": 70.0, "type_iii": 250.0}
ALPHA_EXPONENT = 0.92        # R_A ∝ α^-0.92 between 0.2° and 0.5° (70 -> 30, 250 -> 95)
BETA_EXPONENT = 2.4          # R_A ∝ cos(β)^2.4 (70 -> 50 at 30°)


@dataclass(frozen=True)
class Headlights:
    """The car's headlamps and its camera's night exposure (see the module)."""

    intensity_cd: float = 7500.0
    below_m: float = 0.65
    half_spacing_m: float = 0.7
    sheeting: str = "type_i"
    exposure: float = 0.02
    color_temp_k: float = 4500.0

    def __post_init__(self) -> None:
        key = "drive.headlights."
        check_range(key + "intensity_cd", self.intensity_cd, 0.0, why="each lamp's luminous intensity, candela")
        check_range(key + "below_m", self.below_m, 0.0, why="metres below the lens")
        check_range(key + "half_spacing_m", self.half_spacing_m, 0.0, why="metres from the lens to each lamp")
        check_range(key + "exposure", self.exposure, 0.0, lo_open=True, why="pixel value per cd/m²")
        if self.sheeting not in SHEETING_RA:
            raise InputError(f"drive.headlights.sheeting must be one of {sorted(SHEETING_RA)}; got {self.sheeting!r}.")

    def lamps(self, camera_m: Tensor) -> Tensor:
        """T×2×3: the two lamps of cameras at ``camera_m`` (T×3, the sign's coordinates; the car faces -z)."""
        offsets = camera_m.new_tensor([[-self.half_spacing_m, -self.below_m, 0.0],
                                       [self.half_spacing_m, -self.below_m, 0.0]])
        return camera_m[:, None, :] + offsets

    def gains(self, camera_m: Tensor) -> tuple[Tensor, Tensor]:
        """(retro, matte): T luminance per unit albedo (cd/m²) of sheeting and of a matte print at the face's
        centre, seen from cameras at ``camera_m`` (T×3), summed over both lamps."""
        lamps = self.lamps(camera_m.double())
        d = lamps.norm(dim=-1)                                        # the sign is at the origin
        cos_beta = (lamps[..., 2] / d).clamp(min=0.0)                 # the face's normal is +z
        illuminance = self.intensity_cd * cos_beta / d ** 2
        cam = camera_m.double()[:, None, :].expand_as(lamps)
        cos_alpha = (lamps * cam).sum(-1) / (d * cam.norm(dim=-1))
        alpha_deg = torch.rad2deg(torch.acos(cos_alpha.clamp(-1.0, 1.0))).clamp(min=0.2)
        ra = SHEETING_RA[self.sheeting] * (alpha_deg / 0.2) ** -ALPHA_EXPONENT * cos_beta ** BETA_EXPONENT
        return (ra * illuminance).sum(1).float(), (illuminance / math.pi).sum(1).float()


def headlit(renderer, scene, texture: Tensor, cam, alpha: Tensor, headlights: Headlights, camera_m: Tensor,
            print_retroreflects: bool = False) -> Tensor:
    """B×3×h×w: what the car's ``headlights`` add to B rendered views of the sign (premultiplied; ``cam``: their
    cameras, ``alpha``: their cover B×1×h×w, ``camera_m``: B×3 the cameras' places): sheeting retroreflects, print
    and the post are matte (``print_retroreflects``: the print too, ``sheeting_texture``). Three flat renders
    (ambient 1, no sun): the albedo, and the sheeting's cover as the difference of the sheeting mask's and an
    all-zero texture's (the post, untextured, cancels)."""
    from physattack.eot.params import color_temperature_rgb
    from physattack.render.shade import Lights

    dev, b = texture.device, len(camera_m)
    flat = Lights(ambient=torch.ones(b, device=dev), diffuse=torch.zeros(b, device=dev),
                  direction=torch.tensor([[0.0, 0.0, 1.0]], device=dev).expand(b, 3),
                  color=torch.ones(b, 3, device=dev))
    albedo = renderer.render(scene, texture, cam, flat).images
    sheet = (renderer.render(scene, sheeting_texture(scene, texture, print_retroreflects), cam, flat).images
             - renderer.render(scene, torch.zeros_like(texture), cam, flat).images)[:, :1]
    share = (sheet / alpha.clamp(min=1e-6)).clamp(0, 1)              # of a pixel's cover, sheeting
    retro, matte = (g.to(dev)[:, None, None, None] for g in headlights.gains(camera_m.cpu()))
    tint = color_temperature_rgb(torch.tensor([headlights.color_temp_k])).to(dev)[:, :, None, None]
    return headlights.exposure * albedo * tint * (share * retro + (1 - share) * matte)


def printed_texels(scene, texture: Tensor) -> Tensor:
    """H×W: 1 on the face's texels the attack changed (print: stickers, paint), 0 elsewhere; a texel within half
    a level of the clean sign's is the sign's own surface. Night drives and footage compositing share this rule."""
    clean = scene.texture.to(texture.device)
    changed = ((texture.detach() - clean).abs().amax(0) > 0.5 / 255).float()
    return changed * scene.face_mask[0].to(texture.device).float()


def sheeting_texture(scene, texture: Tensor, print_retroreflects: bool = False) -> Tensor:
    """3×H×W: 1 on the texels of the face that are the clean sign's (sheeting), 0 elsewhere (print, outside).
    ``print_retroreflects``: the stickers and paint are printed on retroreflective film (``printer.material``), which
    returns the headlights as the sign's own sheeting does, its transparent inks colouring the return as the
    sheeting's pigment does: every texel of the face is sheeting."""
    face = scene.face_mask[0].to(texture.device).float()
    if print_retroreflects:
        return face.expand(3, -1, -1)
    return (face - printed_texels(scene, texture)).expand(3, -1, -1)


__all__ = ["NIGHT_BACKDROP", "Headlights", "SHEETING_RA", "headlit", "printed_texels", "sheeting_texture"]
