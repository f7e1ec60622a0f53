"""Evaluating a reprogramming frame: task accuracy on held-out digits under held-out views, beside
chance and beside the same victim with a random program (Elsayed et al.'s control)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from physattack.atomic import save_figure, save_json, save_rgb_png, save_torch  # noqa: E402
from physattack.eot.tasks import DigitTask  # noqa: E402
from physattack.evaluate.metrics import rate  # noqa: E402
from physattack.evaluate.plots import training_curves, views_gallery  # noqa: E402
from physattack.victims.base import remap_logits  # noqa: E402


@torch.no_grad()
def task_predictions(*, scene, patch, victim, label_map, task: DigitTask, window, pipeline, params, digits_per_view,
                     batch_size=64, colour_model=None, keep=0):
    """Every grid view paired with ``digits_per_view`` held-out digits (in turn through the split);
    returns the true digits, the predicted ones, and up to ``keep`` example images."""
    images, labels = task.split["heldout"]
    n = len(params) * digits_per_view
    view_idx = torch.arange(n) // digits_per_view
    digit_idx = torch.arange(n) % len(labels)
    preds, examples = [], []
    for s in range(0, n, batch_size):
        v, d = view_idx[s:s + batch_size], digit_idx[s:s + batch_size]
        texture = patch.apply(DigitTask.print_into(scene.texture, images[d].to(scene.texture.device), window))
        if colour_model is not None:
            texture = colour_model.print_patch(texture, patch.mask)
        views = pipeline(scene, texture, params[v])
        preds.append(remap_logits(victim(views.images), label_map.to(views.images.device)).argmax(1).cpu())
        if len(examples) * batch_size < keep:
            examples.append(views.images.cpu())
    ex = torch.cat(examples)[:keep] if examples else None
    return labels[digit_idx], torch.cat(preds), ex


def confusion(true: torch.Tensor, pred: torch.Tensor, classes: int) -> np.ndarray:
    m = np.zeros((classes, classes), dtype=int)
    for t, p in zip(true.tolist(), pred.tolist()):
        m[t, p] += 1
    return m


def confusion_figure(matrix: np.ndarray, title: str, read_as: list):
    """The confusion matrix, each row normalised; ``read_as`` names the victim label of each predicted digit."""
    fig, ax = plt.subplots(figsize=(4.6, 4.6))
    norm = matrix / np.maximum(matrix.sum(1, keepdims=True), 1)
    im = ax.imshow(norm, vmin=0, vmax=1, cmap="viridis")
    for i in range(matrix.shape[0]):
        for j in range(matrix.shape[1]):
            ax.text(j, i, str(matrix[i, j]), ha="center", va="center", fontsize=6,
                    color="white" if norm[i, j] < 0.5 else "black")
    ax.set_xlabel("predicted digit (victim label)")
    ax.set_ylabel("true digit")
    ax.set_xticks(range(matrix.shape[1]), [f"{i} ({n})" for i, n in enumerate(read_as)], rotation=40, ha="right",
                  fontsize=7)
    ax.set_yticks(range(matrix.shape[0]))
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, shrink=0.8, label="share of the true digit")
    return fig


def report_reprogram(*, scene, patch, victim, attack, result, eval_pipeline, grid, run_dir: Path, tracker,
                     digits_per_view: int = 9, batch_size: int = 64, colour_model=None, seconds: float = 0.0) -> dict:
    """Evaluate the trained program and its random control; write metrics, plots and the program."""
    from physattack.patch.frame import FramePatch

    params = grid.params()
    window = scene.regions[attack.window]
    common = dict(scene=scene, victim=victim, label_map=attack.label_map, task=attack.task, window=window,
                  pipeline=eval_pipeline, params=params, digits_per_view=digits_per_view, batch_size=batch_size,
                  colour_model=colour_model)
    true, pred, examples = task_predictions(patch=patch, keep=16, **common)
    control = FramePatch(patch.mask.cpu(), cell_px=patch.cell_px, init_scale=2.0,
                         generator=torch.Generator().manual_seed(1)).to(scene.texture.device)
    _, control_pred, _ = task_predictions(patch=control, **common)
    classes = attack.classes
    matrix = confusion(true, pred, classes)
    metrics = {
        "scene": scene.name, "attack": "reprogram", "classes": classes,
        "label_map": [victim.labels[int(i)] for i in attack.label_map],
        "evaluations": int(len(true)), "grid_views": len(params), "digits_per_view": digits_per_view,
        "heldout_digits": int(len(attack.task.split["heldout"][1])),
        "task_accuracy": rate(pred == true), "random_program_accuracy": rate(control_pred == true),
        "chance": 1.0 / classes, "per_digit_accuracy": (np.diag(matrix) / np.maximum(matrix.sum(1), 1)).tolist(),
        "confusion": matrix.tolist(), "steps_done": result.steps_done, "best_step": result.best_step,
        "program_area_fraction": float(patch.mask.mean()),     # of the card's texture (the card minus its window)
        "seconds": round(seconds, 1),
        "protocol": "held-out digits (split by sample) under the held-out view grid; the control is the same "
                    "victim with a random frame program",
    }
    run_dir.mkdir(parents=True, exist_ok=True)
    save_json(run_dir / "metrics.json", metrics)
    fig = confusion_figure(matrix, f"reprogrammed {type(victim).__name__}: task accuracy "
                                   f"{metrics['task_accuracy']['rate']:.1%} (chance {1 / classes:.1%})",
                           read_as=metrics["label_map"])
    save_figure(run_dir / "confusion.png", fig)
    plt.close(fig)
    if result.history:
        fig = training_curves(result.history)
        save_figure(run_dir / "training.png", fig)
        plt.close(fig)
    save_rgb_png(run_dir / "program.png", patch.apply(scene.texture).detach().cpu())
    if examples is not None:
        k = len(examples)
        labels = [f"digit {int(t)} -> {int(p)}" for t, p in zip(true[:k], pred[:k])]
        save_rgb_png(run_dir / "views.png", views_gallery(examples, examples, labels, labels))
    save_torch(run_dir / "patch.pt", {"patch": patch.state_dict()})
    flat = {"eval/task_accuracy": metrics["task_accuracy"]["rate"],
            "eval/random_program_accuracy": metrics["random_program_accuracy"]["rate"], "eval/chance": 1 / classes}
    tracker.summary(flat)
    tracker.log(flat)
    return metrics
