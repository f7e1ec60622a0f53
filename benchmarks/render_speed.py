"""Renderer speed: forward+backward ms per view on this machine, with ratios measured in the same run.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/render_speed.py [--views 16 --size 224 --repeats 7]

Renders the stop-sign scene (512² texture) with a texture that requires grad, backpropagates the
image sum, and reports medians over repeats. The contenders run interleaved (one of each per
repeat, after a warm-up of each), so a busy machine slows them alike and the ratios stay fair.

- the built-in renderer as CPU runs it (compiled Numba kernels for rasterization and lighting);
- the same renderer on its PyTorch paths only (what CUDA runs);
- PyTorch3D's own renderer (MeshRenderer, HardPhongShader, TexturesUV, default raster settings) on
  the same mesh, cameras and lights: the reference the issue names, where PyTorch3D is installed;
- PyTorch3D's rasterizer behind physattack's shader (renderer=pytorch3d);
- the built-in renderer 2× supersampled (the slower reference anti-aliasing);
- the whole EOT view pipeline (backgrounds, camera effects) and SignNet's own forward+backward.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.render import MeshRasterizer, PhongShader, Renderer
from physattack.render.pytorch3d import PyTorch3DRasterizer, pytorch3d_available
from physattack.scene import load_scene
from physattack.victims import load_signnet


def interleaved_ms(fns: dict, repeats: int) -> dict:
    """Median ms per call of each function, timed in turn within each repeat (after one warm-up each)."""
    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            sync()
            t = time.perf_counter()
            fn()
            sync()
            times[name].append(time.perf_counter() - t)
    return {name: 1000 * statistics.median(t) for name, t in times.items()}


def pytorch3d_reference(scene, params, size, dev):
    """PyTorch3D's own textured Phong renderer on the same mesh, cameras and lights (the reference)."""
    from pytorch3d.renderer import (DirectionalLights, HardPhongShader, MeshRasterizer, MeshRenderer,
                                    RasterizationSettings, TexturesUV)
    from pytorch3d.structures import Meshes
    from pytorch3d.utils import cameras_from_opencv_projection

    cams = params.cameras(0.75, (size, size))
    b = len(cams)
    K = torch.zeros(b, 3, 3, device=dev)
    K[:, 0, 0] = K[:, 1, 1] = cams.focal_px
    K[:, :2, 2] = cams.principal_px
    K[:, 2, 2] = 1
    p3d_cams = cameras_from_opencv_projection(cams.R, cams.T, K, torch.tensor([[size, size]] * b, device=dev))
    lights = params.lights()
    p3d_lights = DirectionalLights(ambient_color=lights.ambient[:, None].expand(-1, 3) * lights.color,
                                   diffuse_color=lights.diffuse[:, None] * lights.color,
                                   specular_color=0.1 * lights.color, direction=-lights.direction, device=dev)
    renderer = MeshRenderer(MeshRasterizer(p3d_cams, RasterizationSettings(image_size=size)),
                            HardPhongShader(device=dev, cameras=p3d_cams, lights=p3d_lights))
    mesh = scene.mesh

    def step():
        tex = scene.texture.clone().requires_grad_(True)
        textures = TexturesUV(maps=tex.permute(1, 2, 0)[None].expand(b, -1, -1, -1), faces_uvs=[mesh.face_uvs] * b,
                              verts_uvs=[mesh.uvs] * b)
        meshes = Meshes(verts=[mesh.verts] * b, faces=[mesh.faces] * b, textures=textures)
        renderer(meshes)[..., :3].sum().backward()
    return step


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--views", type=int, default=16)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--device", default="cpu")
    args = p.parse_args()
    dev = torch.device(args.device)
    scene = load_scene("stop_sign").to(dev)
    bank = BackgroundBank(16, seed=0)
    params = ViewSampler(background_count=16).sample(args.views, torch.Generator().manual_seed(0)).to(dev)
    victim = load_signnet().to(dev)

    cams = params.cameras(max(scene.texture_size_m), (args.size, args.size))
    lights = params.lights()

    def render_step(renderer):
        def step():
            tex = scene.texture.clone().requires_grad_(True)
            renderer.render(scene, tex, cams, lights).images.sum().backward()
        return step

    def pipeline_step():
        pipe = ViewPipeline(Renderer(), bank, (args.size, args.size))

        def step():
            tex = scene.texture.clone().requires_grad_(True)
            pipe(scene, tex, params).images.sum().backward()
        return step

    images = ViewPipeline(Renderer(), bank, (args.size, args.size))(scene, scene.texture, params).images

    def victim_step():
        x = images.clone().requires_grad_(True)
        victim(x).sum().backward()

    fns = {"builtin": render_step(Renderer()),
           "torch": render_step(Renderer(MeshRasterizer(backend="torch"), PhongShader(backend="torch"))),
           "ssaa": render_step(Renderer(supersample=2)),
           "pipeline": pipeline_step(),
           "victim": victim_step}
    if pytorch3d_available():
        fns["p3d"] = pytorch3d_reference(scene, params, args.size, dev)
        fns["p3d_raster"] = render_step(Renderer(rasterizer=PyTorch3DRasterizer()))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.views} views at "
          f"{args.size}x{args.size}, texture {tuple(scene.texture.shape[1:])}, {len(scene.mesh.faces)} faces; "
          f"median of {args.repeats}, interleaved")
    ms = {k: v / args.views for k, v in interleaved_ms(fns, args.repeats).items()}
    b = ms["builtin"]
    print(f"built-in renderer, fwd+bwd:                 {b:7.2f} ms/view")
    print(f"  its PyTorch paths only (as on CUDA):      {ms['torch']:7.2f} ms/view  "
          f"(compiled kernels: {ms['torch'] / b:.1f}x faster)")
    if "p3d" in ms:
        print(f"PyTorch3D renderer (HardPhong, TexturesUV): {ms['p3d']:7.2f} ms/view  "
              f"(built-in is {ms['p3d'] / b:.1f}x faster; goal 8x)")
        print(f"PyTorch3D rasterizer + our shader:          {ms['p3d_raster']:7.2f} ms/view  "
              f"(built-in is {ms['p3d_raster'] / b:.1f}x faster)")
    else:
        print("PyTorch3D: not installed here, so no comparison")
    print(f"2x supersampled reference, fwd+bwd:         {ms['ssaa']:7.2f} ms/view  "
          f"(built-in is {ms['ssaa'] / b:.1f}x faster)")
    print(f"EOT view pipeline (backgrounds, effects):   {ms['pipeline']:7.2f} ms/view")
    print(f"SignNet victim, fwd+bwd on the same views:  {ms['victim']:7.2f} ms/view  "
          f"(pipeline = {ms['pipeline'] / ms['victim']:.1f}x the victim)")


if __name__ == "__main__":
    main()
