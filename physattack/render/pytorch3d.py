"""PyTorch3D's rasterizer behind physattack's rasterizer interface, for parity and for clusters
where it is installed (it ships no Linux wheels; see the README for building it).

Only rasterization changes: PyTorch3D's ``MeshRasterizer`` with its own cameras (converted from
ours with ``cameras_from_opencv_projection``) finds the nearest face and its perspective-correct
barycentrics; physattack's shader does the rest, so the two backends differ only where their
rasterizers do. PyTorch3D rasterizes hard edges, so its coverage is 0 or 1.
"""

from __future__ import annotations

import logging

import torch
from torch import Tensor

from physattack.errors import InputError, check_range
from physattack.render.camera import Cameras
from physattack.render.raster import Fragments, MeshRasterizer

log = logging.getLogger(__name__)


def pytorch3d_available() -> bool:
    try:
        import pytorch3d.renderer  # noqa: F401
    except ImportError:
        return False
    return True


class PyTorch3DRasterizer:
    """Rasterize with ``pytorch3d.renderer.MeshRasterizer``; same call and Fragments as MeshRasterizer.

    Args:
        near_m: faces with a corner closer than this are dropped (as the built-in rasterizer does).
        cull_backfaces: drop faces whose vertex normals face away from the camera (decided here,
            per view, exactly as the built-in rasterizer decides, rather than by PyTorch3D's winding).
        bin_size: PyTorch3D's coarse-to-fine bin size; 0 rasterizes naively (exact on every mesh).
    """

    def __init__(self, near_m: float = 0.05, cull_backfaces: bool = True, bin_size: int | None = 0):
        if not pytorch3d_available():
            raise InputError("renderer=pytorch3d needs PyTorch3D, which is not installed here; build it from "
                             "source (README, 'PyTorch3D backend') or use renderer=builtin.")
        self.near_m = check_range("renderer.rasterizer.near_m", near_m, 0.0, lo_open=True,
                                  why="the near clipping distance in metres")
        self.cull_backfaces = cull_backfaces
        self.bin_size = None if bin_size is None else check_range("renderer.rasterizer.bin_size", bin_size, 0,
                                                                  integer=True, why="0 rasterizes naively")

    @torch.no_grad()
    def __call__(self, verts: Tensor, faces: Tensor, cameras: Cameras, face_normals: Tensor | None = None) -> Fragments:
        from pytorch3d.renderer import MeshRasterizer as P3DRasterizer
        from pytorch3d.renderer import RasterizationSettings
        from pytorch3d.structures import Meshes
        from pytorch3d.utils import cameras_from_opencv_projection

        b = len(cameras)
        h, w = cameras.image_size
        _, z = cameras.project(verts)
        valid = (z[:, faces] > self.near_m).all(-1)                    # B×F
        if self.cull_backfaces and face_normals is not None:
            centroid = verts[faces].mean(1)
            valid &= ((cameras.centers[:, None, :] - centroid[None]) * face_normals[None]).sum(-1) > 0
        kept = [torch.nonzero(valid[v]).flatten() for v in range(b)]
        meshes = Meshes(verts=[verts.float()] * b, faces=[faces[k] for k in kept])
        K = torch.zeros(b, 3, 3, device=verts.device)
        K[:, 0, 0] = cameras.focal_px
        K[:, 1, 1] = cameras.focal_px
        K[:, :2, 2] = cameras.principal_px
        K[:, 2, 2] = 1
        size = torch.tensor([[h, w]], device=verts.device).expand(b, 2)
        p3d_cams = cameras_from_opencv_projection(cameras.R.float(), cameras.T.float(), K, size)
        settings = RasterizationSettings(image_size=(h, w), blur_radius=0.0, faces_per_pixel=1,
                                         bin_size=self.bin_size, perspective_correct=True, cull_backfaces=False)
        frags = P3DRasterizer(cameras=p3d_cams, raster_settings=settings)(meshes)
        packed = frags.pix_to_face[..., 0]                             # B×H×W, packed over views
        hit = packed >= 0
        offsets = meshes.mesh_to_faces_packed_first_idx()
        local = packed - offsets[:, None, None]
        pix_to_face = torch.full_like(packed, -1)
        for v in range(b):
            if len(kept[v]):
                pix_to_face[v] = torch.where(hit[v], kept[v][local[v].clamp(min=0, max=len(kept[v]) - 1)], -1)
        bary = torch.where(hit[..., None], frags.bary_coords[..., 0, :], 0.0)
        zbuf = torch.where(hit, frags.zbuf[..., 0], float("inf"))
        return Fragments(pix_to_face, bary, zbuf, hit.to(verts.dtype))


def auto_rasterizer(backend: str = "auto", **kwargs):
    """PyTorch3D's rasterizer where it is importable, the built-in one otherwise (and say which);
    ``backend`` is the built-in one's (see MeshRasterizer)."""
    if pytorch3d_available():
        log.info("renderer=auto: using PyTorch3D's rasterizer")
        return PyTorch3DRasterizer(**kwargs)
    log.info("renderer=auto: PyTorch3D is not installed; using the built-in rasterizer")
    return MeshRasterizer(backend=backend, **kwargs)
