"""``python -m physattack.evaluate run_dir=<run>``: the full held-out evaluation of a finished run.

Wiring only: rebuild the run (``physattack.runs.load_run``), build the protocol grid and settings
from ``conf/evaluation``, and hand them to ``physattack.evaluate.protocol.evaluate_attack``.
"""

from __future__ import annotations


import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from physattack.errors import report_input_errors
from physattack.evaluate.protocol import evaluate_attack


def evaluate_run(cfg: DictConfig) -> dict:
    from physattack.runs import load_run

    run = load_run(cfg.run_dir, cfg.device)
    merged = OmegaConf.merge(run.cfg, {"evaluation": OmegaConf.to_container(cfg.evaluation, resolve=False)})
    grid = instantiate(merged.evaluation.grid, background_count=len(run.eval_bank), _convert_="all")
    settings = instantiate(merged.evaluation.settings, _convert_="all")
    m = run.metrics
    summary = {k: m[k] for k in ("scene", "attack", "target_label", "true_label", "patch_type", "patch_area_fraction",
                                 "steps_done", "seed") if k in m}
    summary.setdefault("scene", run.scene.name)
    summary.setdefault("attack", f"targeted -> {run.target}" if run.target else "untargeted")
    summary["target_label"] = run.target
    summary["victim"] = run.cfg.victim.get("_target_", type(run.victim).__name__)
    tracker = instantiate(cfg.logger, dir=str(run.run_dir), run_config=OmegaConf.to_container(merged, resolve=True),
                          _recursive_=False, _convert_="all")
    try:
        return evaluate_attack(scene=run.scene, victim=run.victim, clean_texture=run.scene.texture,
                               adv_texture=run.adv_texture, pipeline=run.eval_pipeline, grid=grid, target=run.target,
                               summary=summary, run_dir=run.run_dir, settings=settings,
                               atlas_pipeline=run.plain_pipeline(), tracker=tracker,
                               zero_grad_steps=m.get("zero_gradient_steps"), steps_done=m.get("steps_done"),
                               batch_size=cfg.eval_batch_size)
    finally:
        tracker.finish()


@hydra.main(version_base="1.3", config_path="pkg://physattack.conf", config_name="evaluate")
@report_input_errors()
def main(cfg: DictConfig) -> None:
    evaluate_run(cfg)


if __name__ == "__main__":
    main()
