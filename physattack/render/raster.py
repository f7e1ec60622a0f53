"""Rasterization: which face is nearest at each pixel, and where on it.

Rasterization carries no gradient: the patch reaches the image through the texture lookup, which
the shader does with the UVs interpolated here. Every face is tested against every pixel of the
faces' common bounding box in one batched matrix product of edge functions (scenes are small meshes).
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
        coverage: B×H×W share of the pixel the mesh covers, in [0, 1] (anti-aliased silhouettes).
    """

    pix_to_face: Tensor
    bary: Tensor
    zbuf: Tensor
    coverage: Tensor


class MeshRasterizer:
    """Z-buffer rasterizer in plain PyTorch (CPU and CUDA), with analytic edge coverage.

    Silhouettes are anti-aliased analytically rather than by supersampling: a pixel whose centre lies
    within half a pixel of a silhouette edge gets the coverage a box filter would give it,
    ``0.5 + d`` for signed distance ``d`` in pixels (outside: the nearest face within half a pixel;
    inside: pixels next to an uncovered one, by their distance to the winning face's nearest edge).

    Args:
        near_m: faces with a corner closer than this to the camera are dropped.
        cull_backfaces: drop faces whose (vertex-normal) front faces away from the camera; right
            for closed meshes such as a sign plate, wrong for single-sided sheets seen from behind.
        max_chunk_elems: bound on the size of the pixels × faces work tensor, to cap memory.
    """

    def __init__(self, near_m: float = 0.05, cull_backfaces: bool = True, max_chunk_elems: int = 1 << 23):
        self.near_m = near_m
        self.cull_backfaces = cull_backfaces
        self.max_chunk_elems = max_chunk_elems

    @torch.no_grad()
    def __call__(self, verts: Tensor, faces: Tensor, cameras: Cameras, face_normals: Tensor | None = None) -> Fragments:
        """Rasterize one mesh into every camera's image.

        Args:
            verts: V×3 world metres. faces: F×3. face_normals: F×3 outward normals, used for culling.
        """
        h, w = cameras.image_size
        uv, z = cameras.project(verts.detach())
        b, f = len(cameras), faces.shape[0]
        tri_uv, tri_z = uv[:, faces], z[:, faces]                    # B×F×3×2, B×F×3
        # Edge functions: lambda_i(p) = A_i x + B_i y + C_i over the edge opposite corner i, / area.
        a, bb, c = tri_uv[:, :, 0], tri_uv[:, :, 1], tri_uv[:, :, 2]
        area = (bb[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (bb[..., 1] - a[..., 1]) * (c[..., 0] - a[..., 0])
        valid = (tri_z > self.near_m).all(-1) & (area.abs() > 1e-9)
        if self.cull_backfaces and face_normals is not None:
            centroid = verts[faces].mean(1)                           # F×3
            to_cam = cameras.centers[:, None, :] - centroid[None]     # B×F×3
            valid &= (to_cam * face_normals[None]).sum(-1) > 0
        area = torch.where(valid, area, torch.ones_like(area))
        p0 = torch.stack([bb, c, a], dim=2)                           # B×F×3×2 (edge start)
        p1 = torch.stack([c, a, bb], dim=2)                           # edge end
        coef_a = -(p1[..., 1] - p0[..., 1]) / area[..., None]
        coef_b = (p1[..., 0] - p0[..., 0]) / area[..., None]
        coef_c = ((p1[..., 1] - p0[..., 1]) * p0[..., 0] - (p1[..., 0] - p0[..., 0]) * p0[..., 1]) / area[..., None]
        # lambda_i times this is the distance in pixels from edge i.
        to_px = area.abs()[..., None] / (p1 - p0).norm(dim=-1).clamp(min=1e-9)    # B×F×3
        inv_z = 1.0 / tri_z.clamp(min=self.near_m)
        # 1/z is linear in screen space: sum_i lambda_i / z_i.
        z_a, z_b, z_c = ((k * inv_z).sum(-1) for k in (coef_a, coef_b, coef_c))
        coef = torch.stack([torch.cat([coef_a, z_a[..., None]], -1),
                            torch.cat([coef_b, z_b[..., None]], -1),
                            torch.cat([coef_c, z_c[..., None]], -1)], dim=1)   # B×3×F×4
        # An edge is on the silhouette unless a face drawn in this view shares it.
        neighbour = edge_neighbours(faces)                                        # F×3, -1 when none
        open_edge = (neighbour < 0)[None] | ~valid.gather(1, neighbour.clamp(min=0).flatten()[None].expand(b, -1)
                                                          ).view(b, f, 3)

        pix_to_face = torch.full((b, h, w), -1, dtype=torch.long, device=uv.device)
        bary = torch.zeros((b, h, w, 3), dtype=uv.dtype, device=uv.device)
        zbuf = torch.full((b, h, w), float("inf"), dtype=uv.dtype, device=uv.device)
        edge_dist = torch.full((b, h, w), -1.0, dtype=uv.dtype, device=uv.device)
        # Each view tests only its drawable faces, over their bounding box plus the half-pixel AA margin.
        for v in range(b):
            faces_v = torch.nonzero(valid[v]).flatten()
            if len(faces_v) == 0:
                continue
            corners = tri_uv[v, faces_v].reshape(-1, 2)
            x0, y0 = (int(t) for t in corners.amin(0).sub(1).floor().clamp(min=0).tolist())
            x1, y1 = (int(t) for t in corners.amax(0).add(1).ceil().tolist())
            x1, y1 = min(x1, w), min(y1, h)
            if x1 <= x0 or y1 <= y0:
                continue
            ys = torch.arange(y0, y1, device=uv.device, dtype=uv.dtype) + 0.5
            xs = torch.arange(x0, x1, device=uv.device, dtype=uv.dtype) + 0.5
            gy, gx = torch.meshgrid(ys, xs, indexing="ij")
            pix = torch.stack([gx.flatten(), gy.flatten(), torch.ones_like(gx).flatten()], dim=-1)  # N×3
            out = self._raster_view(pix, coef[v][:, faces_v].reshape(3, -1), to_px[v, faces_v], inv_z[v, faces_v],
                                    tri_uv[v, faces_v], open_edge[v, faces_v])
            idx, hit_any, persp, depth, d_win = out
            shape = (y1 - y0, x1 - x0)
            pix_to_face[v, y0:y1, x0:x1] = torch.where(hit_any, faces_v[idx], -1).view(shape)
            bary[v, y0:y1, x0:x1] = torch.where(hit_any[:, None], persp, 0).view(*shape, 3)
            zbuf[v, y0:y1, x0:x1] = torch.where(hit_any, depth, float("inf")).view(shape)
            edge_dist[v, y0:y1, x0:x1] = torch.where(hit_any, d_win, -1.0).view(shape)
        covered = edge_dist >= -1e-6
        # Covered pixels beside an uncovered one sit on the silhouette: box-filter coverage there too.
        open_side = torch.nn.functional.max_pool2d((~covered).float()[:, None], 3, 1, 1)[:, 0] > 0
        coverage = torch.where(covered & ~open_side, torch.ones_like(edge_dist),
                               (0.5 + edge_dist).clamp(0, 1))
        coverage = torch.where(pix_to_face >= 0, coverage, torch.zeros_like(coverage))
        return Fragments(pix_to_face, bary, zbuf, coverage)

    def _raster_view(self, pix, coef, to_px, inv_z, tri_uv, open_edge):
        """One view: pixels N×3 (x, y, 1) against its F drawable faces. Returns, per pixel, the face
        (index into these F), whether any face touches it, perspective-correct barycentrics, depth and
        the signed silhouette distance."""
        n, f = pix.shape[0], to_px.shape[0]
        idx_all, hit_all, persp_all, depth_all, d_all = [], [], [], [], []
        step = max(1, self.max_chunk_elems // max(1, f * 4))
        for s in range(0, n, step):
            p = pix[s:s + step]
            lam = (p @ coef).view(-1, f, 4)
            edge_px = lam[..., :3] * to_px                            # distance to each edge's line
            dist = edge_px.amin(-1)                                   # >= 0 inside the face
            best, idx = torch.where(dist >= -1e-6, lam[..., 3], 0).max(dim=-1)   # nearest = largest 1/z
            hit = best > 0
            # Silhouette distance of covered pixels: to the winning face's open edges only.
            win_edges = edge_px.gather(1, idx[:, None, None].expand(-1, 1, 3)).squeeze(1)
            d_win = torch.where(open_edge[idx], win_edges, float("inf")).amin(-1).clamp(max=1.0)
            # Uncovered pixels within half a pixel of some face (the line distance bounds the true one).
            cand = ~hit & (dist.amax(-1) > -0.5)
            near_idx, near_d = self._exact_nearest(cand[None], p, tri_uv[None], torch.ones(1, f, dtype=torch.bool,
                                                                                              device=p.device))
            near_idx, near_d = near_idx[0], near_d[0]
            touch = hit | (near_d > -0.5)
            idx = torch.where(hit, idx, near_idx)
            d_win = torch.where(hit, d_win, near_d)
            lam_win = lam[..., :3].gather(1, idx[:, None, None].expand(-1, 1, 3)).squeeze(1).clamp(min=0)
            lam_win = lam_win / lam_win.sum(-1, keepdim=True).clamp(min=1e-12)
            persp = lam_win * inv_z[idx]
            depth = 1.0 / persp.sum(-1).clamp(min=1e-12)
            persp = persp / persp.sum(-1, keepdim=True).clamp(min=1e-12)
            for acc, val in zip((idx_all, hit_all, persp_all, depth_all, d_all), (idx, touch, persp, depth, d_win)):
                acc.append(val)
        return tuple(torch.cat(acc) for acc in (idx_all, hit_all, persp_all, depth_all, d_all))

    @staticmethod
    def _exact_nearest(cand: Tensor, pix: Tensor, tri_uv: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
        """For candidate pixels (B×N mask), the nearest valid face by true distance to the triangle
        (not to its edges' lines, which reach far past a sliver's sharp corner). Returns the face
        index and minus the distance in pixels (-inf for non-candidates)."""
        bsz, n = cand.shape
        near_idx = torch.zeros((bsz, n), dtype=torch.long, device=pix.device)
        near_d = torch.full((bsz, n), -float("inf"), dtype=pix.dtype, device=pix.device)
        bi, ni = torch.nonzero(cand, as_tuple=True)
        if len(bi) == 0:
            return near_idx, near_d
        p = pix[ni, :2][:, None, None, :]                                  # M×1×1×2
        a = tri_uv[bi]                                                      # M×F×3×2
        bvert = a.roll(-1, dims=2)
        ab = bvert - a
        t = (((p - a) * ab).sum(-1) / (ab * ab).sum(-1).clamp(min=1e-12)).clamp(0, 1)
        d = (p - (a + t[..., None] * ab)).norm(dim=-1).amin(-1)           # M×F
        d = torch.where(valid[bi], d, float("inf"))
        dmin, fidx = d.min(dim=-1)
        near_idx[bi, ni] = fidx
        near_d[bi, ni] = -dmin
        return near_idx, near_d


def edge_neighbours(faces: Tensor) -> Tensor:
    """F×3: for edge k of each face (opposite corner k), the index of another face sharing it, or -1."""
    f = faces.shape[0]
    ends = torch.stack([faces[:, [1, 2]], faces[:, [2, 0]], faces[:, [0, 1]]], dim=1)   # F×3×2
    lo, hi = ends.amin(-1), ends.amax(-1)
    keys = (lo * (int(faces.max()) + 1) + hi).flatten()
    order = keys.argsort()
    same = keys[order][1:] == keys[order][:-1]
    neighbour = torch.full((f * 3,), -1, dtype=torch.long, device=faces.device)
    neighbour[order[:-1][same]] = order[1:][same] // 3
    neighbour[order[1:][same]] = order[:-1][same] // 3
    return neighbour.view(f, 3)
