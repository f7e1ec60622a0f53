"""The renderer's CPU kernels, compiled with Numba: the same arithmetic as the PyTorch paths, fused.

On CPU the PyTorch paths spend their time making passes over memory, one tensor operation at a
time, for what is a few comparisons per pixel and face (rasterization) or a few dozen flops per
pixel (the lighting terms). One compiled loop does the same work in one pass. ``MeshRasterizer``
and ``PhongShader`` use these for CPU tensors when Numba is importable, and their PyTorch paths
elsewhere (CUDA); the two agree (tests/render/test_kernels.py). Nothing here carries gradient: the
texture lookup, the only path to the patch, stays in PyTorch.
"""

from __future__ import annotations

import math

import numba
import numpy as np


@numba.njit(cache=True, inline="always")
def _edges(r, tp, x, y):
    e0 = (r[0, 0] * x + r[0, 1] * y + r[0, 2]) * tp[0]
    e1 = (r[1, 0] * x + r[1, 1] * y + r[1, 2]) * tp[1]
    e2 = (r[2, 0] * x + r[2, 1] * y + r[2, 2]) * tp[2]
    return e0, e1, e2


@numba.njit(cache=True)
def _segment_distance(px, py, ax, ay, bx, by):
    abx, aby = bx - ax, by - ay
    t = ((px - ax) * abx + (py - ay) * aby) / max(abx * abx + aby * aby, 1e-12)
    t = min(max(t, 0.0), 1.0)
    dx, dy = px - (ax + t * abx), py - (ay + t * aby)
    return math.sqrt(dx * dx + dy * dy)


@numba.njit(parallel=True, cache=True)
def raster_views(faces, out):
    """Fill the B×H×W outputs ``out`` = (pix_to_face, bary, zbuf, coverage) in place (each is
    written whole) from the screen-space faces ``faces`` = (valid, box, rows, to_px, inv_z, tri_uv,
    open_edge), both tuples of arrays as ``raster.ScreenFaces`` and ``raster.Fragments`` hold them.

    Per view: (1) depth test of every covering face over its box (largest 1/z wins, later face on
    ties); (2) uncovered pixels within half a pixel of a face take the nearest by exact distance;
    (3) barycentrics, depth and the signed silhouette distance of the winners; (4) box-filter
    coverage, ``0.5 + d`` on the silhouette and 1 inside."""
    valid, box, rows, to_px, inv_z, tri_uv, open_edge = faces
    pix_to_face, bary, zbuf, coverage = out
    n_views, n_faces = valid.shape
    h, w = zbuf.shape[1], zbuf.shape[2]
    for v in numba.prange(n_views):
        owner = pix_to_face[v]
        owner[:, :] = -1
        best = np.zeros((h, w), np.float32)
        near_d = np.full((h, w), np.inf, np.float32)
        near_f = np.full((h, w), -1, np.int64)
        dist = np.full((h, w), -1.0, np.float32)
        for f in range(n_faces):
            if not valid[v, f]:
                continue
            r, tp = rows[v, f], to_px[v, f]
            for y in range(box[v, f, 1], box[v, f, 3]):
                cy = np.float32(y + 0.5)
                for x in range(box[v, f, 0], box[v, f, 2]):
                    cx = np.float32(x + 0.5)
                    e0, e1, e2 = _edges(r, tp, cx, cy)
                    if min(e0, e1, e2) >= -1e-6:
                        iz = r[3, 0] * cx + r[3, 1] * cy + r[3, 2]
                        if iz > 0 and iz >= best[y, x]:
                            best[y, x] = iz
                            owner[y, x] = f
        for f in range(n_faces):
            if not valid[v, f]:
                continue
            r, tp, t = rows[v, f], to_px[v, f], tri_uv[v, f]
            for y in range(box[v, f, 1], box[v, f, 3]):
                cy = np.float32(y + 0.5)
                for x in range(box[v, f, 0], box[v, f, 2]):
                    if owner[y, x] >= 0:
                        continue
                    cx = np.float32(x + 0.5)
                    e0, e1, e2 = _edges(r, tp, cx, cy)
                    if min(e0, e1, e2) <= -0.5:          # the line distance bounds the true one
                        continue
                    d = min(_segment_distance(cx, cy, t[0, 0], t[0, 1], t[1, 0], t[1, 1]),
                            _segment_distance(cx, cy, t[1, 0], t[1, 1], t[2, 0], t[2, 1]),
                            _segment_distance(cx, cy, t[2, 0], t[2, 1], t[0, 0], t[0, 1]))
                    if d < 0.5 and d <= near_d[y, x]:
                        near_d[y, x] = d
                        near_f[y, x] = f
        for y in range(h):
            cy = np.float32(y + 0.5)
            for x in range(w):
                f = owner[y, x]
                cx = np.float32(x + 0.5)
                if f >= 0:
                    e0, e1, e2 = _edges(rows[v, f], to_px[v, f], cx, cy)
                    d = np.inf
                    if open_edge[v, f, 0]:
                        d = min(d, e0)
                    if open_edge[v, f, 1]:
                        d = min(d, e1)
                    if open_edge[v, f, 2]:
                        d = min(d, e2)
                    dist[y, x] = min(d, 1.0)
                elif near_f[y, x] >= 0:
                    f = near_f[y, x]
                    owner[y, x] = f
                    dist[y, x] = -near_d[y, x]
                else:
                    zbuf[v, y, x] = np.inf
                    bary[v, y, x, 0], bary[v, y, x, 1], bary[v, y, x, 2] = 0.0, 0.0, 0.0
                    continue
                r = rows[v, f]
                l0 = max(r[0, 0] * cx + r[0, 1] * cy + r[0, 2], 0.0)
                l1 = max(r[1, 0] * cx + r[1, 1] * cy + r[1, 2], 0.0)
                l2 = max(r[2, 0] * cx + r[2, 1] * cy + r[2, 2], 0.0)
                s = max(l0 + l1 + l2, 1e-12)
                p0, p1, p2 = l0 / s * inv_z[v, f, 0], l1 / s * inv_z[v, f, 1], l2 / s * inv_z[v, f, 2]
                ps = max(p0 + p1 + p2, 1e-12)
                zbuf[v, y, x] = 1.0 / ps
                bary[v, y, x, 0], bary[v, y, x, 1], bary[v, y, x, 2] = p0 / ps, p1 / ps, p2 / ps
        for y in range(h):
            for x in range(w):
                d = dist[y, x]
                coverage[v, y, x] = 0.0
                if owner[y, x] < 0:
                    continue
                if d >= -1e-6:                       # covered: full unless beside an uncovered pixel
                    inner = True
                    for yy in range(max(y - 1, 0), min(y + 2, h)):
                        for xx in range(max(x - 1, 0), min(x + 2, w)):
                            if dist[yy, xx] < -1e-6:
                                inner = False
                    if inner:
                        coverage[v, y, x] = 1.0
                        continue
                coverage[v, y, x] = min(max(0.5 + d, 0.0), 1.0)


@numba.njit(cache=True, inline="always")
def _normalize(x, y, z):
    n = max(math.sqrt(x * x + y * y + z * z), 1e-12)
    return x / n, y / n, z / n


@numba.njit(cache=True, inline="always")
def _lerp(ft, k, w0, w1, w2):
    """Attribute ``k`` of a face-table row at barycentrics (w0, w1, w2)."""
    return ft[k] * w0 + ft[8 + k] * w1 + ft[16 + k] * w2


@numba.njit(parallel=True, cache=True)
def shading_terms(pixels, tables, sizes, out):
    """Per covered pixel ``sel[m]`` (flat index into B·H·W): where it reads the texture atlas
    (``grid``, M×2 in grid_sample's [-1, 1]), the ``gain`` and ``lift`` (3×M) with which the shader
    turns that albedo into colour, ``albedo * gain + lift``, and its three channels' flat indices
    into the B×3×H×W image (``pix``, 3×M).

    ``gain`` is ambient + Lambert times light colour and coverage; ``lift`` holds the Blinn-Phong
    specular and, on untextured faces (gain 0), their own albedo. Tables: per face, 3 corners ×
    (u, v, x, y, z, nx, ny, nz) then diffuse RGB, specular, shininess, textured; per view, eye,
    light direction, light colour, ambient, diffuse; per view, its mip level's place in the atlas
    (x offset, height, width, row offset of the view's own texture).

    Grouped as ``pixels`` = (sel, pix_to_face, bary, coverage), the flat per-pixel inputs; ``tables``
    = (face_table, view_table, place); ``sizes`` = (atlas_w, atlas_h, pixels_per_view); ``out`` =
    (grid, gain, lift, pix), filled in place."""
    sel, pix_to_face, bary, coverage = pixels
    face_table, view_table, place = tables
    atlas_w, atlas_h, pixels_per_view = sizes
    grid, gain, lift, pix = out
    for m in numba.prange(sel.shape[0]):
        p = sel[m]
        v = p // pixels_per_view
        ft = face_table[pix_to_face[p]]
        vt = view_table[v]
        w0, w1, w2 = bary[p, 0], bary[p, 1], bary[p, 2]
        ex, ey, ez = _normalize(vt[0] - _lerp(ft, 2, w0, w1, w2), vt[1] - _lerp(ft, 3, w0, w1, w2),
                                vt[2] - _lerp(ft, 4, w0, w1, w2))
        nx, ny, nz = _normalize(_lerp(ft, 5, w0, w1, w2), _lerp(ft, 6, w0, w1, w2), _lerp(ft, 7, w0, w1, w2))
        if nx * ex + ny * ey + nz * ez < 0:
            nx, ny, nz = -nx, -ny, -nz
        lx, ly, lz = vt[3], vt[4], vt[5]
        n_dot_l = max(nx * lx + ny * ly + nz * lz, 0.0)
        hx, hy, hz = _normalize(lx + ex, ly + ey, lz + ez)
        spec = 0.0
        if n_dot_l > 0:
            spec = ft[27] * max(nx * hx + ny * hy + nz * hz, 0.0) ** ft[28]
        c = coverage[p]
        intensity = vt[9] + vt[10] * n_dot_l
        textured = ft[29] > 0.5
        x_off, th, tw, row = place[v, 0], place[v, 1], place[v, 2], place[v, 3]
        u = min(max(_lerp(ft, 0, w0, w1, w2) * tw, 0.5), tw - 0.5)
        t = min(max((1.0 - _lerp(ft, 1, w0, w1, w2)) * th, 0.5), th - 0.5)
        grid[m, 0] = 2.0 * (x_off + u) / atlas_w - 1.0
        grid[m, 1] = 2.0 * (row + t) / atlas_h - 1.0
        q = p - v * pixels_per_view
        for k in range(3):
            col = vt[6 + k] * c
            lift[k, m] = col * (vt[10] * spec)
            if textured:
                gain[k, m] = col * intensity
            else:
                lift[k, m] += ft[24 + k] * (col * intensity)
                gain[k, m] = 0.0
            pix[k, m] = (3 * v + k) * pixels_per_view + q


@numba.njit(parallel=True, cache=True)
def object_mask(pix_to_face, coverage, on_object, mask, boxes):
    """The object's coverage (B×H×W: coverage where the pixel's face is the object's, not a
    support's) and its boxes (B×4, x0 y0 x1 y1 of the pixels over half covered; zeros if none)."""
    n_views, h, w = pix_to_face.shape
    for v in numba.prange(n_views):
        x0, y0, x1, y1 = w, h, -1, -1
        for y in range(h):
            for x in range(w):
                f = pix_to_face[v, y, x]
                c = coverage[v, y, x] if f >= 0 and on_object[f] else 0.0
                mask[v, y, x] = c
                if c > 0.5:
                    x0, x1 = min(x0, x), max(x1, x)
                    y0, y1 = min(y0, y), max(y1, y)
        if x1 >= 0:
            boxes[v, 0], boxes[v, 1], boxes[v, 2], boxes[v, 3] = x0, y0, x1 + 1, y1 + 1
        else:
            boxes[v, 0], boxes[v, 1], boxes[v, 2], boxes[v, 3] = 0, 0, 0, 0
