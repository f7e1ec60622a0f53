"""Reprogramming runs: a classifier made to do another task (read a digit shown in a printed card's
window) by the frame printed around it (Elsayed et al. 2018, made physical).

Evaluation: task accuracy on held-out digits under held-out views, beside chance and beside the same
victim with a random program (Elsayed et al.'s control). These runs are not judged on drives.
"""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from physattack.atomic import save_figure, save_rgb_png, save_torch  # noqa: E402
from physattack.cli.kinds.base import AttackKind  # noqa: E402
from physattack.eot.tasks import DigitTask  # noqa: E402
from physattack.evaluate.metrics import rate  # noqa: E402
from physattack.evaluate.plots import training_curves, views_gallery  # noqa: E402
from physattack.run_report import RunReport  # noqa: E402
from physattack.victims.base import remap_logits  # noqa: E402


class ReprogramKind(AttackKind):
    name = "reprogram"

    def matches(self, attack, victim) -> bool:
        from physattack.attack.reprogram import ReprogramAttack

        return isinstance(attack, ReprogramAttack)

    def report(self, done, setup) -> RunReport:
        report = report_reprogram(done, setup)
        setup.export({"attack": "reprogram", "label_map": report.summary["label_map"]})   # which label means which digit
        return report

    def headline(self, report: RunReport) -> str:
        m = report.summary
        acc, ctl = m["task_accuracy"], m["random_program_accuracy"]
        return (f"reprogram: held-out task accuracy {acc['rate']:.1%} (95% CI {acc['ci95'][0]:.1%}-{acc['ci95'][1]:.1%}, "
                f"{acc['n']} held-out digit views); random program {ctl['rate']:.1%}; chance {m['chance']:.1%}; "
                f"digits read as {', '.join(f'{i}={n}' for i, n in enumerate(m['label_map']))}.")

    def headline_rate(self, report: RunReport) -> float | None:
        return report.summary["task_accuracy"]["rate"]


@dataclass
class TaskViews:
    """The held-out task views a program is read through: the board scene, the victim and its label map,
    the digit task and the window it is shown in, the held-out pipeline and grid (``params``), digits per
    view, the batch size and the colour model that prints the program (or None)."""

    scene: object
    victim: object
    label_map: torch.Tensor
    task: DigitTask
    window: tuple
    pipeline: object
    params: object
    digits_per_view: int = 9
    batch_size: int = 64
    colour_model: object | None = None


@torch.no_grad()
def task_predictions(views: TaskViews, patch, keep: int = 0):
    """Every grid view paired with ``digits_per_view`` held-out digits (in turn through the split);
    returns the true digits, the predicted ones, and up to ``keep`` example images."""
    scene, params, batch_size = views.scene, views.params, views.batch_size
    images, labels = views.task.split["heldout"]
    n = len(params) * views.digits_per_view
    view_idx = torch.arange(n) // views.digits_per_view
    digit_idx = torch.arange(n) % len(labels)
    preds, examples = [], []
    for s in range(0, n, batch_size):
        v, d = view_idx[s:s + batch_size], digit_idx[s:s + batch_size]
        texture = patch.apply(DigitTask.print_into(scene.texture, images[d].to(scene.texture.device), views.window))
        if views.colour_model is not None:
            texture = views.colour_model.print_patch(texture, patch.mask)
        rendered = views.pipeline(scene, texture, params[v])
        preds.append(remap_logits(views.victim(rendered.images),
                                  views.label_map.to(rendered.images.device)).argmax(1).cpu())
        if len(examples) * batch_size < keep:
            examples.append(rendered.images.cpu())
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


def report_reprogram(done, setup, digits_per_view: int = 9) -> RunReport:
    """Evaluate the trained program and its random control; write the plots and the program; return the
    run report."""
    from physattack.patch.frame import FramePatch

    scene, patch, victim, attack, result = done.scene, done.patch, done.victim, done.attack, done.result
    run_dir = setup.run_dir
    params = setup.grid.params()
    views = TaskViews(scene, victim, attack.label_map, attack.task, scene.regions[attack.window], setup.pipeline,
                      params, digits_per_view, setup.run.eval_batch_size, setup.colour_model)
    true, pred, examples = task_predictions(views, patch, keep=16)
    control = FramePatch(patch.mask.cpu(), cell_px=patch.cell_px, init_scale=2.0,
                         generator=torch.Generator().manual_seed(1)).to(scene.texture.device)
    _, control_pred, _ = task_predictions(views, control)
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
        "seconds": done.elapsed(),
        "protocol": "held-out digits (split by sample) under the held-out view grid; the control is the same "
                    "victim with a random frame program",
    }
    run_dir.mkdir(parents=True, exist_ok=True)
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
    setup.tracker.summary(flat)
    setup.tracker.log(flat)
    return RunReport("reprogram", summary={**metrics, **done.stopped()})


__all__ = ["ReprogramKind", "TaskViews", "confusion", "report_reprogram", "task_predictions"]
