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
    """Samples the texture with a per-view mip level and shades with ambient + Lambert + Blinn-Phong.

    Only covered pixels are shaded (gathered into one flat batch), and all views share one lookup
    per mip level into the texture: the work scales with the object's pixels, not the image's.
    """

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
        b, h, w = p2f.shape
        flat = p2f.flatten()
        sel = torch.nonzero(flat >= 0).flatten()                       # covered pixels, M
        view = torch.div(sel, h * w, rounding_mode="floor")            # their view
        face = flat[sel]
        wts = fragments.bary.reshape(-1, 3)[sel].unsqueeze(-1)         # M×3×1

        def interp(values: Tensor, index: Tensor) -> Tensor:
            return (values[index[face]] * wts).sum(1)

        uv = interp(mesh.uvs, mesh.face_uvs)                           # M×2
        pos = interp(mesh.verts, mesh.faces)
        normal = F.normalize(interp(mesh.normals, mesh.face_normals), dim=-1)
        mat = mesh.face_materials[face]
        dt, dev = uv.dtype, uv.device
        kd = torch.tensor([m.diffuse for m in mesh.materials], device=dev, dtype=dt)
        ks = torch.tensor([m.specular for m in mesh.materials], device=dev, dtype=dt)[mat]
        shin = torch.tensor([m.shininess for m in mesh.materials], device=dev, dtype=dt)[mat]
        albedo = kd[mat]                                               # M×3
        tex_id = mesh.textured_material
        if tex_id is not None:
            # Sampled even when no pixel sees the texture, so the image always depends on it.
            on_tex = torch.nonzero(mat == tex_id).flatten()
            level = self._mip_levels(mesh, texture, cameras, tex_id)
            albedo = albedo.index_copy(0, on_tex, self._sample(texture, uv[on_tex], view[on_tex], level))

        to_eye = F.normalize(cameras.centers[view] - pos, dim=-1)
        normal = torch.where((normal * to_eye).sum(-1, keepdim=True) < 0, -normal, normal)
        light_dir = lights.direction[view]
        n_dot_l = (normal * light_dir).sum(-1).clamp(min=0)
        half = F.normalize(light_dir + to_eye, dim=-1)
        spec = ks * (normal * half).sum(-1).clamp(min=0).pow(shin) * (n_dot_l > 0)
        color = lights.color[view]
        diffuse = lights.diffuse[view]
        intensity = lights.ambient[view] + diffuse * n_dot_l
        rgb_m = albedo * color * intensity[:, None] + color * (diffuse * spec)[:, None]
        cover = fragments.coverage.reshape(-1)[sel].to(dt)
        rgb = torch.zeros(b * h * w, 3, device=dev, dtype=dt).index_copy(0, sel, rgb_m * cover[:, None])
        return rgb.view(b, h, w, 3).permute(0, 3, 1, 2), fragments.coverage.unsqueeze(1).to(dt)

    def _mip_levels(self, mesh: Mesh, texture: Tensor, cameras: Cameras, tex_id: int) -> Tensor:
        """Per view, the mip level whose texels match the screen pixels: log2 of sqrt(texel area /
        pixel area) over the textured faces, weighted by their on-screen area."""
        th, tw = texture.shape[-2:]
        faces = torch.nonzero(mesh.face_materials == tex_id).flatten()
        uv = mesh.uvs[mesh.face_uvs[faces]]                            # T×3×2
        tex_area = ((uv[:, 1] - uv[:, 0])[:, 0] * (uv[:, 2] - uv[:, 0])[:, 1]
                    - (uv[:, 1] - uv[:, 0])[:, 1] * (uv[:, 2] - uv[:, 0])[:, 0]).abs() * th * tw
        px, _ = cameras.project(mesh.verts[mesh.faces[faces]].reshape(-1, 3))
        px = px.view(len(cameras), -1, 3, 2)
        scr_area = ((px[:, :, 1] - px[:, :, 0])[..., 0] * (px[:, :, 2] - px[:, :, 0])[..., 1]
                    - (px[:, :, 1] - px[:, :, 0])[..., 1] * (px[:, :, 2] - px[:, :, 0])[..., 0]).abs()
        rate = (tex_area.sum() / scr_area.sum(1).clamp(min=1e-6)).sqrt()  # texels per pixel, per view
        return torch.log2(rate.clamp(min=1.0)).round().long().clamp(max=self.mip_levels - 1)

    def _sample(self, texture: Tensor, uv: Tensor, view: Tensor, level: Tensor) -> Tensor:
        """Bilinear lookups (M×3) at UVs (M×2) of views ``view``, each from its view's mip level."""
        pyramid = mip_pyramid(texture, self.mip_levels)
        grid = torch.stack([uv[:, 0] * 2 - 1, 1 - uv[:, 1] * 2], dim=-1)
        px_level = level[view].clamp(max=len(pyramid) - 1)
        out = torch.zeros(uv.shape[0], 3, device=uv.device, dtype=uv.dtype) + 0 * pyramid[0].sum()
        for lv in px_level.unique().tolist():
            idx = torch.nonzero(px_level == lv).flatten()
            tex = pyramid[lv]
            if tex.shape[0] == 1:                                       # one texture for every view
                sampled = F.grid_sample(tex, grid[idx].view(1, 1, -1, 2), mode="bilinear",
                                        padding_mode="border", align_corners=False)[0, :, 0].T
            else:                                                       # a texture per view
                sampled = torch.cat([F.grid_sample(tex[v:v + 1], grid[idx[view[idx] == v]].view(1, 1, -1, 2),
                                                   mode="bilinear", padding_mode="border",
                                                   align_corners=False)[0, :, 0].T
                                     for v in view[idx].unique().tolist()])
                order = torch.cat([idx[view[idx] == v] for v in view[idx].unique().tolist()])
                idx = order
            out = out.index_copy(0, idx, sampled)
        return out
