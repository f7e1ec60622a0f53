"""``python -m physattack.transfer run_dir=<run>``: the transfer matrix of a finished run's patch,
written beside the run's files (``<run>/transfer``, then ``transfer-2``, ...).

Rebuild the run, make the grid's clean and attacked images through each image path, build the victims
of ``conf/transfer.yaml`` and hand them to ``physattack.evaluate.transfer``.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import torch
from omegaconf import DictConfig

from physattack.atomic import save_figure, save_json, save_text
from physattack.cli import build
from physattack.cli.door import HydraCommand
from physattack.cli.runs import check_run_dir, open_run
from physattack.errors import InputError
from physattack.evaluate.transfer import (ImagePath, load_victims, matrix_figure, matrix_markdown, opencv_warp_views,
                                          render_path, transfer_matrix)


def _paths(run, grid, names: list[str]) -> list[ImagePath]:
    params = grid.params()
    scene = run.scene

    def through(pipeline):
        def make():
            with torch.no_grad():
                views = [(pipeline(scene, scene.texture, params[s:s + 64]).images.cpu(),
                          pipeline(scene, run.adv_texture, params[s:s + 64]).images.cpu()) for s in range(0, len(params), 64)]
            return torch.cat([c for c, _ in views]), torch.cat([a for _, a in views])
        return make

    def opencv():
        args = (scene.face_mask, scene.texture_size_m, params, run.eval_bank.images, run.image_size)
        return opencv_warp_views(scene.texture, *args), opencv_warp_views(run.adv_texture, *args)

    def pytorch3d():
        from physattack.eot import ViewPipeline
        from physattack.render import Renderer
        from physattack.render.pytorch3d import PyTorch3DRasterizer, pytorch3d_available
        if not pytorch3d_available():
            raise ImportError("PyTorch3D is not installed here (see the README's PyTorch3D section)")
        renderer = Renderer(rasterizer=PyTorch3DRasterizer(), shader=run.renderer.shader)
        return through(ViewPipeline(renderer, run.eval_bank, run.image_size))()

    makers = {"renderer": through(run.eval_pipeline), "opencv_warp": opencv, "pytorch3d": pytorch3d}
    unknown = [n for n in names if n not in makers]
    if unknown:
        raise InputError(f"Unknown transfer path(s) {unknown}; choose from {sorted(makers)}.")
    return [render_path(n, makers[n]) for n in names]


def run_transfer(cfg: DictConfig, out: str | Path) -> tuple[dict, str]:
    run = open_run(cfg.run_dir).rebuild(build.device_of(cfg.device))
    grid = (build.make(run.cfg.eot.grid, background_count=len(run.eval_bank), _convert_="all") if cfg.grid == "eot"
            else build.protocol_grid(run.cfg, len(run.eval_bank)))
    paths = _paths(run, grid, list(cfg.paths))
    victims, skipped = load_victims(dict(cfg.victims), lambda spec: build.victim(spec, cfg.device))
    result = transfer_matrix(victims, paths, run.scene.class_name, run.target, skipped)
    result.update({"run_dir": str(run.run_dir), "scene": run.scene.name, "target": run.target,
                   "views": len(grid), "grid": cfg.grid})
    out = Path(out)
    title = f"transfer of {run.run_dir.name}'s patch ({'-> ' + run.target if run.target else 'untargeted'}), {len(grid)} views"
    save_json(out / "transfer.json", result)
    save_text(out / "transfer.md", matrix_markdown(result, title))
    fig = matrix_figure(result, title)
    save_figure(out / "transfer.png", fig)
    plt.close(fig)
    return result, title


def task(cfg: DictConfig, out: Path) -> None:
    result, title = run_transfer(cfg, out)
    print(matrix_markdown(result, title))
    print(f"transfer matrix in {out}")


COMMAND = HydraCommand(
    module="physattack.transfer", config_name="transfer",
    summary="the transfer matrix of a finished run's patch: other victims (bundled siblings, local torchvision "
            "weights) x other image paths (the renderer, an OpenCV warp, PyTorch3D where installed).",
    usage=("python -m physattack.transfer run_dir=outputs/<date>/<time>",
           "python -m physattack.transfer run_dir=<run> grid=evaluation paths=[renderer,opencv_warp]"),
    task=task, output="beside", check=check_run_dir)

main = COMMAND.main
