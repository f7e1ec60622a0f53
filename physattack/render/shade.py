"""Shading: texture lookup (the only gradient path to the patch) and Blinn-Phong lighting."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.render.camera import Cameras
from physattack.render.raster import Fragments
from physattack.scene.mesh import Mesh


@dataclass(frozen=True)
class Lights:
    """A batch of B directional lights with an ambient term.

    Shape:
        ambient, diffuse: B intensities. direction: B×3 unit vectors from the surface towards the
        light, in world coordinates. color: B×3 RGB multipliers (1 = white).
    """

    ambient: Tensor
    diffuse: Tensor
    direction: Tensor
    color: Tensor


def mip_pyramid(texture: Tensor, levels: int) -> list[Tensor]:
    """Box-filtered pyramid of a C×H×W (or B×C×H×W) texture, finest first; differentiable."""
    tex = texture if texture.dim() == 4 else texture.unsqueeze(0)
    out = [tex]
    for _ in range(levels - 1):
        h, w = out[-1].shape[-2:]
        if min(h, w) < 4:
            break
        out.append(F.adaptive_avg_pool2d(out[-1], (math.ceil(h / 2), math.ceil(w / 2))))
    return out


class PhongShader:
    """Samples the texture with per-view mip level and shades with ambient + Lambert + Blinn-Phong."""

    def __init__(self, mip_levels: int = 6):
        self.mip_levels = mip_levels

    def __call__(self, fragments: Fragments, mesh: Mesh, texture: Tensor, cameras: Cameras,
                 lights: Lights) -> tuple[Tensor, Tensor]:
        """Shade every covered pixel.

        Args:
            texture: 3×Ht×Wt or B×3×Ht×Wt in [0, 1]; may require grad.

        Returns:
            rgb: B×3×H×W premultiplied by coverage, and coverage B×1×H×W in [0, 1].
        """
        p2f = fragments.pix_to_face
        hit = p2f >= 0
        face = p2f.clamp(min=0)
        w = fragments.bary.unsqueeze(-1)                               # B×H×W×3×1

        def interp(values: Tensor, index: Tensor) -> Tensor:
            return (values[index[face]] * w).sum(-2)

        uv = interp(mesh.uvs, mesh.face_uvs)                           # B×H×W×2
        pos = interp(mesh.verts, mesh.faces)
        normal = F.normalize(interp(mesh.normals, mesh.face_normals), dim=-1)
        mat = mesh.face_materials[face]                                # B×H×W

        diffuse_kd = torch.tensor([m.diffuse for m in mesh.materials], device=uv.device, dtype=uv.dtype)
        ks = torch.tensor([m.specular for m in mesh.materials], device=uv.device, dtype=uv.dtype)[mat]
        shin = torch.tensor([m.shininess for m in mesh.materials], device=uv.device, dtype=uv.dtype)[mat]
        albedo = diffuse_kd[mat].permute(0, 3, 1, 2)                   # B×3×H×W
        tex_id = mesh.textured_material
        if tex_id is not None:
            textured = (hit & (mat == tex_id)).unsqueeze(1)
            albedo = torch.where(textured, self._sample(texture, uv, textured), albedo)

        view = F.normalize(cameras.centers[:, None, None, :] - pos, dim=-1)
        normal = torch.where(((normal * view).sum(-1, keepdim=True) < 0), -normal, normal)
        light_dir = lights.direction[:, None, None, :]
        n_dot_l = (normal * light_dir).sum(-1).clamp(min=0)
        half = F.normalize(light_dir + view, dim=-1)
        spec = ks * (normal * half).sum(-1).clamp(min=0).pow(shin) * (n_dot_l > 0)
        color = lights.color[:, :, None, None]
        intensity = lights.ambient[:, None, None] + lights.diffuse[:, None, None] * n_dot_l
        rgb = albedo * color * intensity.unsqueeze(1) + color * (lights.diffuse[:, None, None] * spec).unsqueeze(1)
        cover = fragments.coverage.unsqueeze(1).to(rgb.dtype)
        return rgb * cover, cover

    def _sample(self, texture: Tensor, uv: Tensor, textured: Tensor) -> Tensor:
        """Bilinear lookup at UV, from the mip level that matches each view's texel density."""
        b = uv.shape[0]
        pyramid = mip_pyramid(texture, self.mip_levels)
        th, tw = pyramid[0].shape[-2:]
        # Texels per pixel, from neighbouring pixels that both see the texture.
        m = textured[:, 0]
        du = (uv[:, :, 1:] - uv[:, :, :-1]).abs() * torch.tensor([tw, th], device=uv.device)
        dv = (uv[:, 1:] - uv[:, :-1]).abs() * torch.tensor([tw, th], device=uv.device)
        mu, mv = m[:, :, 1:] & m[:, :, :-1], m[:, 1:] & m[:, :-1]
        rate_u = (du.amax(-1) * mu).flatten(1).sum(1) / mu.flatten(1).sum(1).clamp(min=1)
        rate_v = (dv.amax(-1) * mv).flatten(1).sum(1) / mv.flatten(1).sum(1).clamp(min=1)
        rate = torch.maximum(rate_u, rate_v)
        level = torch.log2(rate.clamp(min=1.0)).round().long().clamp(max=len(pyramid) - 1)
        grid = torch.stack([uv[..., 0] * 2 - 1, 1 - uv[..., 1] * 2], dim=-1)
        out = torch.zeros(b, 3, *uv.shape[1:3], device=uv.device, dtype=uv.dtype)
        for lv in level.unique().tolist():
            sel = torch.nonzero(level == lv).flatten()
            tex = pyramid[lv]
            tex = tex.expand(len(sel), -1, -1, -1) if tex.shape[0] == 1 else tex[sel]
            sampled = F.grid_sample(tex, grid[sel], mode="bilinear", padding_mode="border", align_corners=False)
            out = out.index_copy(0, sel, sampled)
        return out
