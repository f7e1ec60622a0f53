"""Renderer speed: forward+backward ms per view on this machine, with ratios measured in the same run.

    OMP_WAIT_POLICY=PASSIVE python benchmarks/render_speed.py [--views 16 --size 224 --repeats 7]

Renders the stop-sign scene (512² texture) through the built-in renderer with a texture that requires
grad, backpropagates the image sum, and reports the median over repeats (the first run is dropped as
warm-up). Baselines in the same run: the same renderer with 2× supersampling (the slower reference
anti-aliasing), and SignNet's own forward+backward on the same images (the victim's cost).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from physattack.eot import BackgroundBank, ViewPipeline, ViewSampler
from physattack.render import Renderer
from physattack.render.pytorch3d import PyTorch3DRasterizer, pytorch3d_available
from physattack.scene import load_scene
from physattack.victims import load_signnet


def median_ms(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return 1000 * statistics.median(times)


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
    renderer = MeshRenderer(MeshRasterizer(p3d_cams, RasterizationSettings(image_size=size, bin_size=0)),
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

    def render_step(renderer, effects):
        pipe = ViewPipeline(renderer, bank, (args.size, args.size))

        def step():
            tex = scene.texture.clone().requires_grad_(True)
            views = pipe(scene, tex, params, effects=effects)
            views.images.sum().backward()
        return step

    images = ViewPipeline(Renderer(), bank, (args.size, args.size))(scene, scene.texture, params).images

    def victim_step():
        x = images.clone().requires_grad_(True)
        victim(x).sum().backward()

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.views} views at "
          f"{args.size}x{args.size}, texture {tuple(scene.texture.shape[1:])}, {len(scene.mesh.faces)} faces; "
          f"median of {args.repeats}")
    render = median_ms(render_step(Renderer(), False), args.repeats)
    full = median_ms(render_step(Renderer(), True), args.repeats)
    ssaa = median_ms(render_step(Renderer(supersample=2), False), args.repeats)
    vic = median_ms(victim_step, args.repeats)
    p3d = p3d_full = None
    if pytorch3d_available():
        p3d = median_ms(render_step(Renderer(rasterizer=PyTorch3DRasterizer()), False), args.repeats)
        p3d_full = median_ms(pytorch3d_reference(scene, params, args.size, dev), args.repeats)
    n = args.views
    print(f"built-in renderer, fwd+bwd:                {render / n:7.2f} ms/view")
    print(f"  + camera effects (blur, noise, JPEG...): {full / n:7.2f} ms/view")
    print(f"2x supersampled reference, fwd+bwd:        {ssaa / n:7.2f} ms/view  "
          f"(built-in is {ssaa / render:.1f}x faster)")
    if p3d is not None:
        print(f"PyTorch3D renderer (HardPhong, TexturesUV): {p3d_full / n:6.2f} ms/view  "
              f"(built-in is {p3d_full / render:.1f}x faster)")
        print(f"PyTorch3D rasterizer + our shader:         {p3d / n:7.2f} ms/view  "
              f"(built-in is {p3d / render:.1f}x faster)")
    else:
        print("PyTorch3D: not installed here, so no comparison")
    print(f"SignNet victim, fwd+bwd on the same views: {vic / n:7.2f} ms/view  "
          f"(renderer+effects = {full / vic:.1f}x the victim)")


if __name__ == "__main__":
    main()
