"""Rasterization: which face is nearest at each pixel, and where on it.

Rasterization carries no gradient: the patch reaches the image through the texture lookup, which
the shader does with the UVs interpolated here. Each face is tested against the pixels of its own
screen bounding box only, for all views at once, and a scatter-max of 1/z picks the nearest face at
each pixel: the work follows the faces' screen area, not faces × image.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from physattack.errors import check_range
from physattack.render.backends import check_backend, numba_kernels, use_compiled
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


@dataclass(frozen=True)
class ScreenFaces:
    """Every face of one mesh as each of B cameras sees it: what rasterizing a view needs.

    Shape:
        valid: B×F bool, the face is drawn in that view (in front of the near plane, not degenerate,
            not culled).
        x0y0, x1y1: B×F×2 long, the pixel box the face is tested over (x1y1 exclusive); span: B×F×2
            its width and height; count: B×F the pixels in it (0 where not drawn).
        rows: B×F×4×3, the three barycentric edge functions then 1/z, each (A, B, C) of ``A x + B y + C``.
        to_px: B×F×3, which turns barycentric i into the signed distance in pixels from edge i's line.
        inv_z: B×F×3, 1/z at the corners. tri_uv: B×F×3×2, the corners in pixels.
        open_edge: B×F×3 bool, edge i lies on the silhouette (no face drawn in the view shares it).
    """

    valid: Tensor
    x0y0: Tensor
    x1y1: Tensor
    span: Tensor
    count: Tensor
    rows: Tensor
    to_px: Tensor
    inv_z: Tensor
    tri_uv: Tensor
    open_edge: Tensor


@dataclass(frozen=True)
class _FlatBuffers:
    """The PyTorch path's flat B·H·W outputs, filled in place a group of views at a time; ``edge_dist``
    is the signed silhouette distance in pixels that becomes coverage once every view is done."""

    pix_to_face: Tensor
    bary: Tensor
    zbuf: Tensor
    edge_dist: Tensor


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
        max_chunk_elems: bound on the pixel-face tests done at once by the PyTorch path, to cap
            memory; views are grouped under it (a single view is never split).
        backend: ``auto`` runs the compiled Numba kernel on CPU tensors where Numba is installed
            and the PyTorch path otherwise (CUDA); ``torch`` or ``numba`` force one.
    """

    def __init__(self, near_m: float = 0.05, cull_backfaces: bool = True, max_chunk_elems: int = 1 << 23,
                 backend: str = "auto"):
        self.near_m = check_range("renderer.rasterizer.near_m", near_m, 0.0, lo_open=True,
                                  why="the near clipping distance in metres")
        self.cull_backfaces = cull_backfaces
        self.max_chunk_elems = check_range("renderer.rasterizer.max_chunk_elems", max_chunk_elems, 1, integer=True)
        self.backend = check_backend(backend, "rasterizer")

    @torch.no_grad()
    def __call__(self, verts: Tensor, faces: Tensor, cameras: Cameras, face_normals: Tensor | None = None) -> Fragments:
        """Rasterize one mesh into every camera's image.

        Args:
            verts: V×3 world metres. faces: F×3. face_normals: F×3 outward normals, used for culling.
        """
        h, w = cameras.image_size
        uv, z = cameras.project(verts.detach())
        b, f = len(cameras), faces.shape[0]
        dev, dt = uv.device, uv.dtype
        tri_uv, tri_z = uv[:, faces], z[:, faces]                    # B×F×3×2, B×F×3
        # Edge functions: lambda_i(p) = A_i x + B_i y + C_i over the edge opposite corner i, / area.
        a, bb, c = tri_uv[:, :, 0], tri_uv[:, :, 1], tri_uv[:, :, 2]
        area = (bb[..., 0] - a[..., 0]) * (c[..., 1] - a[..., 1]) - (bb[..., 1] - a[..., 1]) * (c[..., 0] - a[..., 0])
        valid = (tri_z > self.near_m).all(-1) & (area.abs() > 1e-9) & tri_uv.isfinite().flatten(2).all(-1)
        if self.cull_backfaces and face_normals is not None:
            centroid = verts[faces].mean(1)                           # F×3
            to_cam = cameras.centers[:, None, :] - centroid[None]     # B×F×3
            valid &= (to_cam * face_normals[None]).sum(-1) > 0
        area = torch.where(valid, area, torch.ones_like(area))
        p0 = torch.stack([bb, c, a], dim=2)                           # B×F×3×2 (edge start)
        p1 = torch.stack([c, a, bb], dim=2)                           # edge end
        # lambda_i times to_px is the signed distance in pixels from edge i's line (>= 0 inside).
        to_px = area.abs()[..., None] / (p1 - p0).norm(dim=-1).clamp(min=1e-9)      # B×F×3
        inv_z = 1.0 / tri_z.clamp(min=self.near_m)
        coef_a = -(p1[..., 1] - p0[..., 1]) / area[..., None]
        coef_b = (p1[..., 0] - p0[..., 0]) / area[..., None]
        coef_c = ((p1[..., 1] - p0[..., 1]) * p0[..., 0] - (p1[..., 0] - p0[..., 0]) * p0[..., 1]) / area[..., None]
        # Per face: 3 barycentric rows then 1/z (linear in screen space: sum_i lambda_i / z_i), each (A, B, C).
        rows = torch.stack([coef_a, coef_b, coef_c], dim=-1)                        # B×F×3×3
        rows = torch.cat([rows, (rows * inv_z[..., None]).sum(2, keepdim=True)], dim=2)   # B×F×4×3
        # An edge is on the silhouette unless a face drawn in this view shares it.
        neighbour = edge_neighbours(faces)                                          # F×3, -1 when none
        open_edge = (neighbour < 0)[None] | ~valid.gather(1, neighbour.clamp(min=0).flatten()[None].expand(b, -1)
                                                          ).view(b, f, 3)
        # Each drawable face is tested only against the pixels of its own bounding box, widened by the
        # half-pixel reach of the anti-aliased edge: the work follows the faces' screen area.
        lo = torch.where(valid[..., None], tri_uv.amin(2), 0.0)
        hi = torch.where(valid[..., None], tri_uv.amax(2), 0.0)
        limit = torch.tensor([w, h], device=dev, dtype=dt)
        x0y0 = (lo - 1).floor().clamp(min=0).minimum(limit).long()                # B×F×2
        x1y1 = (hi + 1).ceil().clamp(min=0).minimum(limit).long()
        span = (x1y1 - x0y0).clamp(min=0)
        count = (span[..., 0] * span[..., 1]).masked_fill(~valid, 0)                # B×F pixels to test
        screen = ScreenFaces(valid, x0y0, x1y1, span, count, rows, to_px, inv_z, tri_uv, open_edge)

        if use_compiled(self.backend, verts.device, "rasterizer"):
            return _raster_compiled(screen, (h, w))
        out = _FlatBuffers(pix_to_face=torch.full((b * h * w,), -1, dtype=torch.long, device=dev),
                           bary=torch.zeros((b * h * w, 3), dtype=dt, device=dev),
                           zbuf=torch.full((b * h * w,), float("inf"), dtype=dt, device=dev),
                           edge_dist=torch.full((b * h * w,), -1.0, dtype=dt, device=dev))
        per_view = count.sum(1).tolist()
        start = 0
        while start < b:                                  # groups of views whose work fits max_chunk_elems
            stop, work = start + 1, per_view[start]
            while stop < b and work + per_view[stop] <= self.max_chunk_elems:
                work += per_view[stop]
                stop += 1
            if work:
                self._raster_views(slice(start, stop), (h, w), screen, out)
            start = stop
        pix_to_face, zbuf = out.pix_to_face.view(b, h, w), out.zbuf.view(b, h, w)
        edge_dist = out.edge_dist.view(b, h, w)
        covered = edge_dist >= -1e-6
        # Covered pixels beside an uncovered one sit on the silhouette: box-filter coverage there too.
        open_side = torch.nn.functional.max_pool2d((~covered).to(dt)[:, None], 3, 1, 1)[:, 0] > 0
        coverage = torch.where(covered & ~open_side, torch.ones_like(edge_dist), (0.5 + edge_dist).clamp(0, 1))
        coverage = torch.where(pix_to_face >= 0, coverage, torch.zeros_like(coverage))
        return Fragments(pix_to_face, out.bary.view(b, h, w, 3), zbuf, coverage)

    @staticmethod
    def _raster_views(views: slice, size: tuple[int, int], screen: ScreenFaces, out: _FlatBuffers) -> None:
        """Rasterize views ``views`` of ``screen`` into the flat B·H·W buffers ``out``, in place.

        Every (view, face, pixel-in-the-face's-box) triple is one test; the nearest covering face
        wins each pixel by a scatter-max of 1/z, and uncovered pixels within half a pixel of a face
        take the nearest one by exact distance (for the anti-aliased silhouette)."""
        h, w = size
        count, x0y0, span, rows, to_px, inv_z, tri_uv, open_edge = (
            screen.count, screen.x0y0, screen.span, screen.rows, screen.to_px, screen.inv_z, screen.tri_uv,
            screen.open_edge)
        pix_to_face, bary, zbuf, edge_dist = out.pix_to_face, out.bary, out.zbuf, out.edge_dist
        f = count.shape[1]
        vf = torch.nonzero(count[views].flatten()).flatten() + views.start * f   # (view, face) pairs with work
        n = count.flatten()[vf]
        pair = torch.repeat_interleave(torch.arange(len(vf), device=vf.device), n)  # one entry per test
        local = torch.arange(len(pair), device=vf.device) - (n.cumsum(0) - n)[pair]
        sx = span.view(-1, 2)[vf, 0][pair]
        px = x0y0.view(-1, 2)[vf, 0][pair] + local % sx
        py = x0y0.view(-1, 2)[vf, 1][pair] + torch.div(local, sx, rounding_mode="floor")
        vf = vf[pair]                                                   # each test's (view, face)
        view = torch.div(vf, f, rounding_mode="floor")
        pix = (view * h + py) * w + px                                  # flat output index
        xy1 = torch.stack([px + 0.5, py + 0.5, torch.ones_like(px, dtype=rows.dtype)], -1)   # P×3
        r = rows.view(-1, 4, 3)[vf]
        lam = r[..., 0] * xy1[:, :1] + r[..., 1] * xy1[:, 1:2] + r[..., 2]   # P×4: barycentrics and 1/z
        edge_px = lam[:, :3] * to_px.view(-1, 3)[vf]
        dist = edge_px.amin(-1)                                           # >= 0 inside the face
        inside = dist >= -1e-6
        # Depth test: the largest 1/z wins; ties go to the later face, deterministically.
        best = torch.zeros_like(zbuf).scatter_reduce_(0, pix[inside], lam[inside, 3], "amax")
        win = inside & (lam[:, 3] >= best[pix]) & (lam[:, 3] > 0)
        test_id = torch.arange(len(pix), device=pix.device)
        owner = torch.full_like(pix_to_face, -1).scatter_reduce_(0, pix[win], test_id[win], "amax")
        hit_pix = torch.nonzero(owner >= 0).flatten()
        t = owner[hit_pix]
        d_win = torch.where(open_edge.view(-1, 3)[vf[t]], edge_px[t], float("inf")).amin(-1).clamp(max=1.0)
        # Uncovered pixels within half a pixel of a face: the nearest by true distance to the triangle
        # (the line distance bounds it from below, so only tests with dist > -0.5 can touch).
        near = ~inside & (dist > -0.5)
        cand = torch.nonzero(near).flatten()
        cand = cand[owner[pix[cand]] < 0]
        d_true = _triangle_distance(xy1[cand, :2], tri_uv.view(-1, 3, 2)[vf[cand]])
        close = d_true < 0.5
        cand, d_true = cand[close], d_true[close]
        nearest = torch.full_like(zbuf, float("inf")).scatter_reduce_(0, pix[cand], d_true, "amin")
        take = d_true <= nearest[pix[cand]]
        near_owner = torch.full_like(pix_to_face, -1).scatter_reduce_(0, pix[cand[take]], cand[take], "amax")
        near_pix = torch.nonzero(near_owner >= 0).flatten()
        all_pix = torch.cat([hit_pix, near_pix])
        t_all = torch.cat([t, near_owner[near_pix]])
        d_all = torch.cat([d_win, -nearest[near_pix]])
        face = vf[t_all] % f
        lam_win = lam[t_all, :3].clamp(min=0)
        lam_win = lam_win / lam_win.sum(-1, keepdim=True).clamp(min=1e-12)
        persp = lam_win * inv_z.view(-1, 3)[vf[t_all]]
        depth = 1.0 / persp.sum(-1).clamp(min=1e-12)
        pix_to_face[all_pix] = face
        bary[all_pix] = persp / persp.sum(-1, keepdim=True).clamp(min=1e-12)
        zbuf[all_pix] = depth
        edge_dist[all_pix] = d_all


def _raster_compiled(screen: ScreenFaces, size: tuple[int, int]) -> Fragments:
    """All views through the Numba kernel (CPU); the same Fragments as the PyTorch path."""
    b, (h, w) = screen.valid.shape[0], size
    dt = screen.rows.dtype
    frags = Fragments(pix_to_face=torch.empty((b, h, w), dtype=torch.long), bary=torch.empty((b, h, w, 3), dtype=dt),
                      zbuf=torch.empty((b, h, w), dtype=dt), coverage=torch.empty((b, h, w), dtype=dt))
    inputs = (screen.valid, torch.cat([screen.x0y0, screen.x1y1], -1), screen.rows, screen.to_px, screen.inv_z,
              screen.tri_uv, screen.open_edge)
    outputs = (frags.pix_to_face, frags.bary, frags.zbuf, frags.coverage)
    numba_kernels().raster_views(tuple(t.contiguous().numpy() for t in inputs), tuple(t.numpy() for t in outputs))
    return frags


def _triangle_distance(p: Tensor, tri: Tensor) -> Tensor:
    """Distance in pixels from points P×2 to the (outside of) triangles P×3×2: to the nearest edge
    segment, not to the edges' lines, which reach far past a sliver's sharp corner."""
    a = tri
    ab = a.roll(-1, dims=1) - a
    t = (((p[:, None] - a) * ab).sum(-1) / (ab * ab).sum(-1).clamp(min=1e-12)).clamp(0, 1)
    return (p[:, None] - (a + t[..., None] * ab)).norm(dim=-1).amin(-1)


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
