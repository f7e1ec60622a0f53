"""Rasterization: which face is nearest at each pixel, and where on it.

Rasterization carries no gradient: the patch reaches the image through the texture lookup, which
the shader does with the UVs interpolated here. Every face is tested against every pixel of the
face's bounding box in one batched matrix product of edge functions (the scenes are small meshes).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from physattack.render.camera import Cameras


@dataclass(frozen=True)
class Fragments:
    """What the rasterizer hands the shader, per pixel.

    Shape:
        pix_to_face: B×H×W long, index of the nearest face, -1 where no face covers the pixel.
        bary: B×H×W×3 perspective-correct barycentric weights of that face's corners.
        zbuf: B×H×W depth in metres along the optical axis, ``inf`` where empty.
    """

    pix_to_face: Tensor
    bary: Tensor
    zbuf: Tensor


class MeshRasterizer:
    """Z-buffer rasterizer in plain PyTorch (CPU and CUDA).

    Args:
        near_m: faces with a corner closer than this to the camera are dropped.
        max_chunk_elems: bound on the size of the pixels × faces work tensor, to cap memory.
    """

    def __init__(self, near_m: float = 0.05, max_chunk_elems: int = 1 << 24):
        self.near_m = near_m
        self.max_chunk_elems = max_chunk_elems

    @torch.no_grad()
    def __call__(self, verts: Tensor, faces: Tensor, cameras: Cameras) -> Fragments:
        """Rasterize one mesh (verts V×3 in world metres, faces F×3) into every camera's image."""
        h, w = cameras.image_size
        uv, z = cameras.project(verts.detach())
        b, f = len(cameras), faces.shape[0]
        tri_uv, tri_z = uv[:, faces], z[:, faces]                    # B×F×3×2, B×F×3
        # Edge functions: lambda_i(p) = A_i x + B_i y + C_i over the opposite edge, normalized by area.
        a, bb, c = tri_uv[:, :, 0], tri_uv[:, :, 1], tri_uv[:, :, 2]
        area = (bb[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (bb[..., 1] - a[..., 1]) * (c[..., 0] - a[..., 0])
        valid = (tri_z > self.near_m).all(-1) & (area.abs() > 1e-9)
        area = torch.where(valid, area, torch.ones_like(area))
        p0 = torch.stack([bb, c, a], dim=2)                           # B×F×3×2 (edge start)
        p1 = torch.stack([c, a, bb], dim=2)                           # edge end
        coef_a = -(p1[..., 1] - p0[..., 1]) / area[..., None]
        coef_b = (p1[..., 0] - p0[..., 0]) / area[..., None]
        coef_c = ((p1[..., 1] - p0[..., 1]) * p0[..., 0] - (p1[..., 0] - p0[..., 0]) * p0[..., 1]) / area[..., None]
        inv_z = 1.0 / tri_z.clamp(min=self.near_m)
        # 1/z is linear in screen space: sum_i lambda_i / z_i.
        z_a, z_b, z_c = ((k * inv_z).sum(-1) for k in (coef_a, coef_b, coef_c))
        coef = torch.stack([torch.cat([coef_a, z_a[..., None]], -1),
                            torch.cat([coef_b, z_b[..., None]], -1),
                            torch.cat([coef_c, z_c[..., None]], -1)], dim=1)   # B×3×F×4
        coef = coef.reshape(b, 3, f * 4)

        # Only pixels inside the union of the faces' bounding boxes need testing.
        box_lo = tri_uv.amin(dim=2).clamp(min=0)
        box_hi = tri_uv.amax(dim=2)
        big = torch.tensor(float("inf"), device=uv.device)
        x0 = int(torch.where(valid, box_lo[..., 0], big).min().clamp(0, w).floor()) if valid.any() else 0
        y0 = int(torch.where(valid, box_lo[..., 1], big).min().clamp(0, h).floor()) if valid.any() else 0
        x1 = int(torch.where(valid, box_hi[..., 0], -big).max().clamp(0, w).ceil()) if valid.any() else 0
        y1 = int(torch.where(valid, box_hi[..., 1], -big).max().clamp(0, h).ceil()) if valid.any() else 0

        pix_to_face = torch.full((b, h, w), -1, dtype=torch.long, device=uv.device)
        bary = torch.zeros((b, h, w, 3), dtype=uv.dtype, device=uv.device)
        zbuf = torch.full((b, h, w), float("inf"), dtype=uv.dtype, device=uv.device)
        if x1 <= x0 or y1 <= y0:
            return Fragments(pix_to_face, bary, zbuf)
        ys = torch.arange(y0, y1, device=uv.device, dtype=uv.dtype) + 0.5
        xs = torch.arange(x0, x1, device=uv.device, dtype=uv.dtype) + 0.5
        gy, gx = torch.meshgrid(ys, xs, indexing="ij")
        pix = torch.stack([gx.flatten(), gy.flatten(), torch.ones_like(gx).flatten()], dim=-1)  # N×3
        n = pix.shape[0]
        rows = max(1, self.max_chunk_elems // max(1, n * f * 4))
        for s in range(0, b, rows):
            e = min(b, s + rows)
            lam = (pix @ coef[s:e]).view(e - s, n, f, 4)
            inside = (lam[..., :3] >= -1e-6).all(-1) & valid[s:e, None, :]
            depth_key = torch.where(inside, lam[..., 3], torch.zeros_like(lam[..., 3]))
            best, idx = depth_key.max(dim=-1)                          # nearest = largest 1/z
            hit = best > 0
            lam_best = lam[..., :3].gather(2, idx[..., None, None].expand(-1, -1, 1, 3)).squeeze(2)
            iz = torch.gather(inv_z[s:e], 1, idx.unsqueeze(-1).expand(-1, -1, 3))
            persp = lam_best.clamp(min=0) * iz
            persp = persp / persp.sum(-1, keepdim=True).clamp(min=1e-12)
            pix_to_face[s:e, y0:y1, x0:x1] = torch.where(hit, idx, -1).view(e - s, y1 - y0, x1 - x0)
            bary[s:e, y0:y1, x0:x1] = torch.where(hit[..., None], persp, 0).view(e - s, y1 - y0, x1 - x0, 3)
            zbuf[s:e, y0:y1, x0:x1] = torch.where(hit, 1.0 / best.clamp(min=1e-12), float("inf")).view(
                e - s, y1 - y0, x1 - x0)
        return Fragments(pix_to_face, bary, zbuf)
