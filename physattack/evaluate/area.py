"""Area as a frontier, not a wall (issue 26): how success falls as the stickers are taken off.

A run's patch covers the area its config allowed. Whether that area buys anything is a question of
the curve, not of one point: the stickers are cut into the cells they were placed in (the mask search's
grid), ranked once by occlusion — each cell taken off alone, the attacked victims' mean target
probability (untargeted: their mean probability of anything but the sign's class) measured on a fixed
set of views — and taken off the least useful first, down to each share of the run's area in
``AreaSettings.keep`` (as near as whole cells allow). At each step the remaining stickers are scored as
the run's were: per view on the run's quick grid for every victim of the protocol's panel (attacked and
held out), and per drive on the run's drives through its stack and panel
(``physattack.drive.build.frontier_judge``). ``area.png`` draws the curves, ``report.md`` gets a table,
W&B the same table (``area/frontier``) and the figure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import Tensor

from physattack.errors import InputError, check_range
from physattack.evaluate.members import classify_views, label_sets, member_rates


@dataclass
class AreaSettings:
    """``evaluation.area``.

    Args:
        enabled: ``auto`` (a frontier for sticker patches, none for paint), ``true`` (a frontier, and an
            error for a patch that has no stickers to take off) or ``false``.
        keep: the shares of the run's sticker area the frontier keeps, after the run's own (1.0).
        rank_views: views of the run's quick grid the cells are ranked on (by occlusion).
        drives: also judge the run's drives at each step.
    """

    enabled: str | bool = "auto"
    keep: list[float] = field(default_factory=lambda: [0.75, 0.5, 0.25])
    rank_views: int = 48
    drives: bool = True

    def __post_init__(self) -> None:
        if self.enabled not in ("auto", True, False):
            raise InputError(f"evaluation.area.enabled must be auto, true or false, not {self.enabled!r}.")
        for v in self.keep:
            check_range("evaluation.area.keep", v, 0.0, 1.0, hi_open=True, why="shares of the run's sticker area kept")
        self.keep = sorted({float(v) for v in self.keep}, reverse=True)
        check_range("evaluation.area.rank_views", self.rank_views, 1, integer=True, why="views the cells are ranked on")

    def wanted(self, patch) -> bool:
        """Whether this run gets a frontier; an explicit ``true`` for a patch without stickers is refused."""
        if self.enabled is False:
            return False
        if not getattr(patch, "cut_as_stickers", False):
            if self.enabled is True:
                raise InputError("evaluation.area.enabled=true asks for an area frontier, but a "
                                 f"{type(patch).__name__} has no stickers to take off: set evaluation.area.enabled=false "
                                 "(or auto) or use patch=sticker.")
            return False
        return True


def sticker_cells(mask: Tensor, cell_px: int) -> Tensor:
    """K×H×W bool: ``mask`` (1×H×W or H×W) cut by a grid of ``cell_px`` squares, one entry per non-empty cell,
    row by row."""
    m = mask.reshape(mask.shape[-2:]) > 0.5
    h, w = m.shape
    cells = []
    for y in range(0, h, cell_px):
        for x in range(0, w, cell_px):
            part = torch.zeros_like(m)
            part[y:y + cell_px, x:x + cell_px] = m[y:y + cell_px, x:x + cell_px]
            if part.any():
                cells.append(part)
    return torch.stack(cells) if cells else torch.zeros(0, h, w, dtype=torch.bool)


def with_cells(clean: Tensor, attacked: Tensor, cells: Tensor, keep: Tensor) -> Tensor:
    """The attacked texture with only the cells ``keep`` (K bool) on, the clean face elsewhere."""
    on = cells[keep].any(0) if bool(keep.any()) else torch.zeros(cells.shape[1:], dtype=torch.bool)
    on = on.to(attacked.device)[None].float()
    return clean * (1 - on) + attacked * on


@dataclass
class FrontierInputs:
    """What the frontier needs from a finished run (classifier or detector).

    ``score`` (texture -> the attacked victims' mean reading of the attack's goal on the rank views: higher
    is better for the attacker) ranks the cells; ``rate_views`` (texture -> ``{name: {"role", "family",
    **rate}}``: each victim's success per view, ``classifier_view_rates`` or ``detector_view_rates``)
    scores every step; ``judge`` (texture -> the drive section's ``attack_success_rate`` and panel means),
    when given, judges the run's drives with ``drive_texture``'s cells (the printed patch, as the drive
    report has it). ``views`` is the number of views ``rate_views`` reads, ``success`` what it counts.
    """

    clean: Tensor
    attacked: Tensor
    mask: Tensor
    cell_px: int
    face_texels: float
    score: Callable[[Tensor], Tensor]
    rate_views: Callable[[Tensor], dict]
    views: int
    judge: Callable[[Tensor], dict] | None = None
    drive_texture: Tensor | None = None
    success: str = "attack success over each victim's clean-correct views"


def classifier_view_rates(scene, clean: Tensor, members: dict, pipeline, params, target: str | None
                          ) -> Callable[[Tensor], dict]:
    """``FrontierInputs.rate_views`` for classifiers: every member (name -> ``Member``) with label sets for
    the attack, scored on ``params`` through ``pipeline`` as the protocol scores them (success over its
    clean-correct views)."""
    sets = {n: label_sets(m.victim, scene.class_name, target) for n, m in members.items()}
    scored = {n: m for n, m in members.items() if not isinstance(sets[n], str)}

    def rate_views(texture: Tensor) -> dict:
        probs, _ = classify_views(scene, clean, texture, pipeline, params, [m.victim for m in scored.values()])
        return {n: {"role": scored[n].role, "family": scored[n].family,
                    **member_rates(p, sets[n])["attack_success_rate"]} for n, p in zip(scored, probs)}

    return rate_views


def detector_view_rates(scene, clean: Tensor, members: dict, pipeline, params, batch_size: int = 32
                        ) -> Callable[[Tensor], dict]:
    """``FrontierInputs.rate_views`` for detectors (``attack=hide``): every member (name -> ``Member``) that
    knows the scene's class, scored on the frames ``params`` as the detectors table scores them (the sign
    gone, over the frames it was detected in clean)."""
    from physattack.evaluate.detectors import detect_views, detector_rates, scene_label
    from physattack.victims.detection import best_scores_on_boxes

    labels = {n: scene_label(m.victim, scene.class_name) for n, m in members.items()}
    scored = {n: m for n, m in members.items() if not isinstance(labels[n], str)}

    def rate_views(texture: Tensor) -> dict:
        outputs, boxes = detect_views(scene, clean, texture, pipeline, params, [m.victim for m in scored.values()],
                                      batch_size)
        out = {}
        for (n, m), (c, a) in zip(scored.items(), outputs):
            t = float(m.victim.score_threshold)
            rates = detector_rates(best_scores_on_boxes(c, boxes, labels[n]), best_scores_on_boxes(a, boxes, labels[n]), t)
            out[n] = {"role": m.role, "family": m.family, **rates["disappearance_rate"]}
        return out

    return rate_views


@torch.no_grad()
def area_frontier(inputs: FrontierInputs, settings: AreaSettings, progress: bool = False) -> dict:
    """The frontier: one row per step (the run's area, then each share of ``settings.keep``)."""
    from tqdm import tqdm

    cells = sticker_cells(inputs.mask, inputs.cell_px)
    k = len(cells)
    full = torch.ones(k, dtype=torch.bool)
    base = float(inputs.score(with_cells(inputs.clean, inputs.attacked, cells, full)))
    loss = torch.zeros(k)
    for i in tqdm(range(k), desc="area: ranking cells", unit="cell", disable=not progress):
        keep = full.clone()
        keep[i] = False
        loss[i] = base - float(inputs.score(with_cells(inputs.clean, inputs.attacked, cells, keep)))
    order = torch.argsort(loss, stable=True)          # the least useful first
    texels = cells.flatten(1).sum(1).float()
    total = float(texels.sum())
    rows = []
    for share in tqdm([1.0, *settings.keep], desc="area: frontier", unit="step", disable=not progress):
        keep = full.clone()
        removed, area = 0, total
        target = share * total
        # take cells off while that brings the area nearer the target (cells are coarse: the nearest area, not below)
        while removed < k and abs(area - float(texels[order[removed]]) - target) < abs(area - target):
            keep[order[removed]] = False
            area -= float(texels[order[removed]])
            removed += 1
        texture = with_cells(inputs.clean, inputs.attacked, cells, keep)
        row = {"keep": share, "cells": int(keep.sum()), "area_fraction": area / inputs.face_texels,
               "views": inputs.rate_views(texture)}
        row.update(_means(row["views"]))
        if inputs.judge is not None:
            source = inputs.drive_texture if inputs.drive_texture is not None else inputs.attacked
            row["drives"] = inputs.judge(with_cells(inputs.clean, source, cells, keep))
        rows.append(row)
    return {"cells": k, "cell_px": inputs.cell_px, "ranked_by": "occlusion: each cell off alone, the attacked "
            "victims' mean reading of the goal on the rank views", "views": inputs.views, "success": inputs.success,
            "steps": rows}


def _means(views: dict) -> dict:
    attacked = [r["rate"] for r in views.values() if r["role"] == "attacked" and r["n"]]
    held = [r["rate"] for r in views.values() if r["role"] != "attacked" and r["n"]]
    families = {r["family"] for r in views.values() if r["role"] == "attacked"}
    unseen = [r["rate"] for r in views.values() if r["role"] != "attacked" and r["n"] and r["family"] not in families]
    mean = lambda v: sum(v) / len(v) if v else None  # noqa: E731
    return {"views_attacked_min": min(attacked) if attacked else None, "views_held_out_mean": mean(held),
            "views_held_out_families": mean(unseen)}


def area_figure(frontier: dict):
    """Success against the share of the face covered: per view (attacked, held-out mean, unseen families)
    and per drive (the stack, the held-out mean), one point per step."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = frontier["steps"]
    x = [100 * r["area_fraction"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    curves = [("views_attacked_min", "per view, attacked (lowest)", "-o"),
              ("views_held_out_mean", "per view, held-out mean", "--o"),
              ("views_held_out_families", "per view, held-out unseen families", ":o")]
    for key, label, style in curves:
        y = [r[key] for r in rows]
        if all(v is not None for v in y):
            ax.plot(x, [100 * v for v in y], style, label=label)
    if all("drives" in r for r in rows):
        ax.plot(x, [100 * r["drives"]["attack_success_rate"]["rate"] for r in rows], "-s", label="per drive, the stack")
        if all(r["drives"].get("attacked_min") is not None for r in rows):
            ax.plot(x, [100 * r["drives"]["attacked_min"] for r in rows], "-^", label="per drive, attacked (lowest member)")
        if all(r["drives"].get("held_out_mean") is not None for r in rows):
            ax.plot(x, [100 * r["drives"]["held_out_mean"] for r in rows], "--s", label="per drive, held-out mean")
    ax.set_xlabel("stickers' area, % of the face")
    ax.set_ylabel("attack success, %")
    ax.set_ylim(-3, 103)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("Area frontier: stickers taken off, the least useful first")
    fig.tight_layout()
    return fig


def area_markdown(frontier: dict, figure: str = "area.png") -> list[str]:
    """The frontier as a section of ``report.md``."""
    pct = lambda v: "–" if v is None else f"{100 * v:.1f} %"  # noqa: E731
    rows = frontier["steps"]
    drives = all("drives" in r for r in rows)
    members = drives and all(r["drives"].get("attacked_min") is not None for r in rows)
    head = ("| area of the face | cells | per view: attacked (lowest) | held-out mean | unseen families"
            + (" | per drive: the stack" + (" | lowest attacked member" if members else "")
               + " | held-out mean | unseen families |" if drives else " |"))
    lines = ["## Area frontier", "",
             f"The stickers cut into their {frontier['cells']} cells ({frontier['cell_px']} texels a side), ranked by "
             f"{frontier['ranked_by']}, and taken off the least useful first; each step scored per view on the "
             f"{frontier['views']}-view grid ({frontier.get('success', 'attack success')})"
             + (" and per drive on the run's drives." if drives else "."), "",
             head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        cells = [f"{100 * r['area_fraction']:.1f} %", str(r["cells"]), pct(r["views_attacked_min"]),
                 pct(r["views_held_out_mean"]), pct(r["views_held_out_families"])]
        if drives:
            s = r["drives"]["attack_success_rate"]
            cells += [f"{pct(s['rate'])} ({s['count']}/{s['n']})",
                      *([pct(r["drives"]["attacked_min"])] if members else []),
                      pct(r["drives"].get("held_out_mean")), pct(r["drives"].get("held_out_families"))]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + ["", f"![area frontier]({figure})", ""]


def report_frontier(frontier: dict, run_dir, tracker=None) -> dict:
    """Write ``area.png``, add the frontier's section to ``report.md`` and log both; returns the section as the
    run report keeps it (``area``)."""
    from pathlib import Path

    import cv2
    import matplotlib.pyplot as plt

    from physattack.atomic import save_figure, save_text

    run_dir = Path(run_dir)
    fig = area_figure(frontier)
    path = save_figure(run_dir / "area.png", fig)
    plt.close(fig)
    report = run_dir / "report.md"
    text = report.read_text() if report.is_file() else ""
    save_text(report, text.rstrip("\n") + "\n\n" + "\n".join(area_markdown(frontier, path.name)))
    if tracker is not None:
        rows = frontier["steps"]
        tracker.log_table("area/frontier", ["area_fraction", "cells", "views_attacked_min", "views_held_out_mean",
                                            "views_held_out_families", "drives_stack", "drives_held_out_mean"],
                          [[r["area_fraction"], r["cells"], r["views_attacked_min"], r["views_held_out_mean"],
                            r["views_held_out_families"],
                            r["drives"]["attack_success_rate"]["rate"] if "drives" in r else None,
                            r["drives"].get("held_out_mean") if "drives" in r else None] for r in rows])
        tracker.log_images({"area/frontier": cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)})
    return {**frontier, "figure": path.name}


__all__ = ["report_frontier", "AreaSettings", "FrontierInputs", "area_figure", "area_frontier", "area_markdown",
           "classifier_view_rates", "detector_view_rates", "sticker_cells", "with_cells"]
