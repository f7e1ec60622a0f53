"""Shading: texture lookup (the only gradient path to the patch) and Blinn-Phong lighting."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.errors import check_range
from physattack.render.backends import check_backend, numba_kernels, use_compiled
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


@dataclass(frozen=True)
class AtlasLayout:
    """Where each of B views reads its texture in the shader's atlas.

    Shape:
        place: B×4, per view its mip level's x offset, height and width, and the row offset of the
            view's own texture within the level (texels).
        size: the atlas's (height, width) in texels.
    """

    place: Tensor
    size: tuple[int, int]


def mip_pyramid(texture: Tensor, levels: int) -> list[Tensor]:
    """Box-filtered pyramid of a C×H×W (or B×C×H×W) texture, finest first; differentiable."""
    tex = texture if texture.dim() == 4 else texture.unsqueeze(0)
    out = [tex]
    for _ in range(levels - 1):
        h, w = out[-1].shape[-2:]
        if min(h, w) < 4:
            break
        if h % 2 == 0 and w % 2 == 0:
            out.append(F.avg_pool2d(out[-1], 2))
        else:
            out.append(F.adaptive_avg_pool2d(out[-1], (math.ceil(h / 2), math.ceil(w / 2))))
    return out


class PhongShader:
    """Samples the texture with a per-view mip level and shades with ambient + Lambert + Blinn-Phong.

    Only covered pixels are shaded (gathered into one flat batch), and all views share one lookup
    per mip level into the texture: the work scales with the object's pixels, not the image's.
    The lighting terms, which carry no gradient, are computed by a compiled kernel on CPU.

    Args:
        mip_levels: levels of the texture's mip pyramid.
        backend: ``auto`` computes the lighting terms with the compiled Numba kernel on CPU where
            Numba is installed and in PyTorch otherwise (CUDA); ``torch`` or ``numba`` force one.
    """

    def __init__(self, mip_levels: int = 6, backend: str = "auto"):
        self.mip_levels = check_range("renderer.shader.mip_levels", mip_levels, 1, integer=True,
                                      why="levels of the texture's mip pyramid")
        self.backend = check_backend(backend, "shader")

    def __call__(self, fragments: Fragments, mesh: Mesh, texture: Tensor, cameras: Cameras,
                 lights: Lights, background: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Shade every covered pixel.

        Args:
            texture: 3×Ht×Wt or B×3×Ht×Wt in [0, 1]; may require grad.
            background: B×3×H×W to composite over ("over", by coverage), or None.

        Returns:
            rgb: B×3×H×W, clamped to [0, 1]: composited over ``background`` where one is given,
            else premultiplied by coverage (over black); and coverage B×1×H×W in [0, 1].
        """
        p2f = fragments.pix_to_face
        b, h, w = p2f.shape
        dev, dt = fragments.bary.device, texture.dtype
        sel = torch.nonzero(p2f.reshape(-1) >= 0).flatten()           # covered pixels, M
        tex_id = mesh.textured_material
        atlas, layout = None, AtlasLayout(torch.zeros(b, 4, device=dev, dtype=dt), (1, 1))
        if tex_id is not None:
            level = self._mip_levels(mesh, texture, cameras, tex_id)
            pyramid = mip_pyramid(texture, min(self.mip_levels, int(level.max()) + 1 if len(level) else 1))
            atlas, place = _atlas(pyramid, level.clamp(max=len(pyramid) - 1))
            layout = AtlasLayout(place, atlas.shape[-2:])
        with torch.no_grad():
            # Everything but the texture lookup is a constant of the patch: per pixel, the texture's
            # albedo is scaled by ``gain`` and lifted by ``lift`` (specular light and untextured albedo).
            compiled = dt == torch.float32 and use_compiled(self.backend, dev, "shader")
            grid, gain, lift, pix = _shading_terms(fragments, sel, mesh, cameras, lights, layout, dt, compiled)
        rgb = lift                                                     # 3×M, channel-major like the image
        if atlas is not None:
            # Every covered pixel looks the texture up (the gain is 0 off the textured faces), so the
            # image always depends on it, even when no pixel sees it.
            albedo = F.grid_sample(atlas, grid.view(1, 1, -1, 2), mode="bilinear", padding_mode="border",
                                   align_corners=False)[0, :, 0]
            rgb = torch.addcmul(lift, albedo, gain)
        rgb = rgb.clamp(0, 1)
        if background is None:
            canvas = torch.zeros(b * 3 * h * w, device=dev, dtype=dt)
        else:
            canvas = background.to(dt).reshape(-1).clone()
            rgb = rgb + (1 - fragments.coverage.reshape(-1)[sel].to(dt)) * canvas[pix]
        image = canvas.index_copy_(0, pix.flatten(), rgb.flatten())   # a fresh canvas: in place is safe
        return image.view(b, 3, h, w), fragments.coverage.unsqueeze(1).to(dt)

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


def _atlas(pyramid: list[Tensor], level: Tensor) -> tuple[Tensor, Tensor]:
    """The mip levels that ``level`` (B, per view) uses, side by side in one 1×3×H×W atlas (a texture
    per view stacked top to bottom within its level), and each view's place in it (B×4: x offset,
    height and width of its level, row offset of its own texture), so that one ``grid_sample``
    serves every view. Lookups clamped to their place's texel centres never read a neighbour."""
    n, c = pyramid[0].shape[:2]
    tiles, place, x0 = [], {}, 0
    for lv in level.unique().tolist():
        th, tw = pyramid[lv].shape[-2:]
        tiles.append(pyramid[lv].transpose(0, 1).reshape(1, c, n * th, tw))
        place[lv] = (x0, th, tw)
        x0 += tw
    height = max(t.shape[2] for t in tiles)
    atlas = torch.cat([F.pad(t, (0, 0, 0, height - t.shape[2])) for t in tiles], dim=3) if len(tiles) > 1 \
        else tiles[0]
    table = torch.zeros(len(pyramid), 3)
    for lv, xyz in place.items():
        table[lv] = torch.tensor(xyz, dtype=table.dtype)
    per_view = table.to(level.device)[level]
    row = per_view[:, 1] * torch.arange(len(level), device=level.device) if n > 1 else torch.zeros_like(per_view[:, 1])
    return atlas, torch.cat([per_view, row[:, None]], dim=1).to(pyramid[0].dtype)


def _shading_terms(fragments: Fragments, sel: Tensor, mesh: Mesh, cameras: Cameras, lights: Lights,
                   layout: AtlasLayout, dt: torch.dtype, compiled: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per covered pixel ``sel``: where it reads the atlas (M×2, grid_sample's [-1, 1]); gain and lift
    (3×M; the colour is ``albedo * gain + lift``, with a gain of 0 on untextured faces); and its
    channels' flat indices into the B×3×H×W image (3×M). The compiled kernel where ``compiled``
    (see kernels.shading_terms), the same arithmetic in PyTorch otherwise."""
    dev = sel.device
    corners = torch.cat([mesh.uvs[mesh.face_uvs], mesh.verts[mesh.faces], mesh.normals[mesh.face_normals]],
                        dim=-1).to(dt)                                  # F×3 corners×8
    props = torch.tensor([[*m.diffuse, m.specular, m.shininess, float(m.texture is not None)]
                          for m in mesh.materials], dtype=dt, device=dev)[mesh.face_materials]
    face_table = torch.cat([corners.flatten(1), props], dim=1)          # F×30
    view_table = torch.cat([cameras.centers, lights.direction, lights.color, lights.ambient[:, None],
                            lights.diffuse[:, None]], dim=1).to(dt)     # B×11
    b, h, w = fragments.pix_to_face.shape
    place, (atlas_h, atlas_w) = layout.place, layout.size
    if compiled:
        m = len(sel)
        grid, gain, lift = torch.empty(m, 2), torch.empty(3, m), torch.empty(3, m)
        pix = torch.empty(3, m, dtype=torch.long)
        pixels = (sel, fragments.pix_to_face.reshape(-1), fragments.bary.reshape(-1, 3).float(),
                  fragments.coverage.reshape(-1).float())
        tables = (face_table, view_table, place.float())
        numba_kernels().shading_terms(tuple(t.contiguous().numpy() for t in pixels),
                                      tuple(t.contiguous().numpy() for t in tables),
                                      (float(atlas_w), float(atlas_h), h * w),
                                      (grid.numpy(), gain.numpy(), lift.numpy(), pix.numpy()))
        return grid, gain, lift, pix
    view = torch.div(sel, h * w, rounding_mode="floor")
    table = face_table[fragments.pix_to_face.reshape(-1)[sel]]          # M×30
    wts = fragments.bary.reshape(-1, 3)[sel].to(dt)
    attr = table[:, 0:8] * wts[:, :1]
    attr = attr.addcmul_(table[:, 8:16], wts[:, 1:2]).addcmul_(table[:, 16:24], wts[:, 2:])
    uv, pos, normal = attr[:, :2], attr[:, 2:5], attr[:, 5:]
    kd, ks, shin, on_tex = table[:, 24:27], table[:, 27:28], table[:, 28:29], table[:, 29] > 0.5
    eye, light_dir, color, ambient, diffuse = view_table[view].split([3, 3, 3, 1, 1], dim=1)
    to_eye = F.normalize(eye - pos, dim=-1)
    normal = F.normalize(normal, dim=-1)
    normal = torch.where((normal * to_eye).sum(-1, keepdim=True) < 0, -normal, normal)
    n_dot_l = (normal * light_dir).sum(-1, keepdim=True).clamp(min=0)
    half = F.normalize(light_dir + to_eye, dim=-1)
    spec = ks * (normal * half).sum(-1, keepdim=True).clamp(min=0).pow(shin) * (n_dot_l > 0)
    color = color * fragments.coverage.reshape(-1)[sel, None].to(dt)
    gain = color * (ambient + diffuse * n_dot_l)
    lift = color * (diffuse * spec)
    lift = torch.where(on_tex[:, None], lift, lift + kd * gain)
    x_off, th, tw, row = place[view].unbind(1)
    u = torch.minimum(torch.maximum(uv[:, 0] * tw, torch.full_like(tw, 0.5)), tw - 0.5)
    t = torch.minimum(torch.maximum((1 - uv[:, 1]) * th, torch.full_like(th, 0.5)), th - 0.5)
    grid = torch.stack([2 * (x_off + u) / atlas_w - 1, 2 * (row + t) / atlas_h - 1], dim=-1)
    pix = (sel - view * (h * w))[None] + (3 * view[None] + torch.arange(3, device=dev)[:, None]) * (h * w)
    return grid, (gain * on_tex[:, None]).T.contiguous(), lift.T.contiguous(), pix
