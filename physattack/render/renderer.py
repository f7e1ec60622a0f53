"""The renderer: rasterize, shade, anti-alias by supersampling, composite over backgrounds."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.errors import check_range
from physattack.render.backends import numba_kernels, use_compiled
from physattack.render.camera import Cameras
from physattack.render.raster import Fragments, MeshRasterizer
from physattack.render.shade import Lights, PhongShader
from physattack.scene.scene import Scene


@dataclass(frozen=True)
class RenderedViews:
    """A batch of rendered views.

    Shape:
        images: B×3×H×W in [0, 1]. alpha: B×1×H×W coverage of the whole mesh (object and supports).
        object_mask: B×1×H×W coverage of the object without its supports (the sign without its post).
        boxes: B×4 (x0, y0, x1, y1) in pixels of the object mask, zeros where it is not visible.
        depth: B×1×H×W metres along the optical axis, ``inf`` on the background.
    """

    images: Tensor
    alpha: Tensor
    object_mask: Tensor
    boxes: Tensor
    depth: Tensor


def mask_boxes(mask: Tensor, threshold: float = 0.5) -> Tensor:
    """B×1×H×W mask to B×4 boxes (x0, y0, x1, y1) in pixels; zeros for empty masks."""
    on = mask[:, 0] > threshold
    rows, cols = on.any(2), on.any(1)
    h, w = on.shape[1:]
    ar_h = torch.arange(h, device=mask.device)
    ar_w = torch.arange(w, device=mask.device)
    big = torch.tensor(10**9, device=mask.device)
    y0 = torch.where(rows, ar_h, big).amin(1)
    y1 = torch.where(rows, ar_h + 1, -big).amax(1)
    x0 = torch.where(cols, ar_w, big).amin(1)
    x1 = torch.where(cols, ar_w + 1, -big).amax(1)
    boxes = torch.stack([x0, y0, x1, y1], 1).float()
    return torch.where(on.flatten(1).any(1, keepdim=True), boxes, torch.zeros_like(boxes))


def object_mask(fragments: Fragments, object_faces: Tensor) -> tuple[Tensor, Tensor]:
    """The object's coverage (B×1×H×W: the fragments' coverage where the face is one of
    ``object_faces``, an F boolean mask) and its boxes as ``mask_boxes`` gives them (B×4)."""
    p2f, coverage = fragments.pix_to_face, fragments.coverage
    if use_compiled("auto", p2f.device, "renderer"):
        mask, boxes = torch.empty_like(coverage), torch.empty(p2f.shape[0], 4, dtype=torch.float32)
        numba_kernels().object_mask(p2f.contiguous().numpy(), coverage.contiguous().numpy(), object_faces.cpu().numpy(),
                                    mask.numpy(), boxes.numpy())
        return mask.unsqueeze(1), boxes
    on = torch.cat([torch.zeros(1, dtype=torch.bool, device=p2f.device), object_faces.to(p2f.device)])
    mask = (coverage * on[p2f + 1]).unsqueeze(1)
    return mask, mask_boxes(mask)


class Renderer:
    """``Renderer(rasterizer, shader)``: any rasterizer making Fragments works with any shader.

    Args:
        rasterizer: callable ``(verts, faces, cameras, face_normals) -> Fragments``: verts V×3 world
            metres, faces F×3, face_normals F×3 outward (for back-face culling; may be None), as
            ``MeshRasterizer`` and ``PyTorch3DRasterizer`` take them.
        shader: callable ``(fragments, mesh, texture, cameras, lights, background=None) -> (rgb, coverage)``
            that composites over ``background`` where one is given (see PhongShader).
        supersample: render at this many times the resolution per axis and box-filter down. The
            rasterizer already anti-aliases silhouettes and the shader mip-maps the texture, so 1
            (the default) is enough; 2 or more is a slower reference.
    """

    def __init__(self, rasterizer=None, shader=None, supersample: int = 1):
        self.rasterizer = rasterizer or MeshRasterizer()
        self.shader = shader or PhongShader()
        self.supersample = check_range("renderer.supersample", supersample, 1, integer=True,
                                       why="render this many times larger per axis, then box-filter down")

    def render(self, scene: Scene, texture: Tensor, cameras: Cameras, lights: Lights,
               backgrounds: Tensor | None = None) -> RenderedViews:
        """Render ``scene`` with ``texture`` in place of its own, over ``backgrounds`` (B×3×H×W)."""
        s = self.supersample
        cams = cameras.scaled(s) if s > 1 else cameras
        mesh = scene.mesh
        face_normals = torch.nn.functional.normalize(mesh.normals[mesh.face_normals].mean(1), dim=-1)
        frags = self.rasterizer(mesh.verts, mesh.faces, cams, face_normals)
        depth = frags.zbuf.unsqueeze(1)
        if s == 1:                                            # the shader composites covered pixels only
            images, cover = self.shader(frags, mesh, texture, cams, lights, background=backgrounds)
            obj_cover, boxes = object_mask(frags, scene.object_faces)
            obj_cover = obj_cover.to(images.dtype)
        else:
            rgb, cover = self.shader(frags, mesh, texture, cams, lights)      # premultiplied, over black
            obj_cover = object_mask(frags, scene.object_faces)[0].to(rgb.dtype)
            rgb, cover, obj_cover = (F.avg_pool2d(t, s) for t in (rgb, cover, obj_cover))
            depth = -F.max_pool2d(-depth, s)
            images = rgb if backgrounds is None else rgb + (1 - cover) * backgrounds
            boxes = mask_boxes(obj_cover)
        return RenderedViews(images=images, alpha=cover, object_mask=obj_cover, boxes=boxes, depth=depth)

    __call__ = render
