"""Success against placement error: the final patch with its stickers stuck on a little off.

The held-out protocol's views (a seeded subset, the same in every cell) are rendered with every
sticker shifted by exactly ``s`` mm in a random direction and turned by exactly ±``r`` degrees about
its centroid (``PlacementError(distribution="fixed")``, ``physattack/patch/placement.py``), for each
``s`` of ``shift_mm`` and ``r`` of ``rotation_deg``; each attacked victim reads them, and success
counts RP2's way over the views that victim read correctly without the patch, with a 95 % Wilson
interval. A cell without any error is the protocol's own reading of those views (the placed texture
is then the design, bit for bit), so it costs nothing. Directions and signs come from one seed per
draw, so the cells differ only in the error's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor

from physattack.errors import InputError, check_range, check_values
from physattack.evaluate.grid import Comparison
from physattack.evaluate.metrics import in_label_set, rate
from physattack.patch.placement import PlacementError, place_stickers, sticker_pieces, texels_per_mm

KEY = "evaluation.settings.placement"


@dataclass
class PlacementSettings:
    """The placement-error table of the held-out protocol (``evaluation.settings.placement``).

    Args:
        enabled: make the table.
        shift_mm: the table's rows: every sticker shifted by exactly this much, millimetres.
        rotation_deg: its columns: every sticker turned by exactly ± this much, degrees.
        views: protocol views per cell (a seeded random subset of the grid, the same in every cell;
            0: every view).
        draws: placement draws per view and cell.
        scale, colour_gain, colour_offset: further error in every cell (``PlacementError``); 0: none.
        seed: seed of the subset and of the draws' directions and signs.
        headline: the (shift_mm, rotation_deg) cell the console line compares with no error.
        batch_size: views rendered at once; each holds its own texture (3×512×512 floats for the stop
            sign), so a small batch keeps memory low and, on CPU, runs faster than a large one.
    """

    enabled: bool = True
    shift_mm: list[float] = field(default_factory=lambda: [0.0, 2.0, 5.0, 10.0])
    rotation_deg: list[float] = field(default_factory=lambda: [0.0, 3.0, 6.0])
    views: int = 120
    draws: int = 1
    scale: float = 0.0
    colour_gain: float = 0.0
    colour_offset: float = 0.0
    seed: int = 3000
    headline: list[float] = field(default_factory=lambda: [5.0, 6.0])
    batch_size: int = 16

    def __post_init__(self) -> None:
        self.shift_mm = [float(v) for v in check_values(f"{KEY}.shift_mm", list(self.shift_mm), 0, 100,
                                                        why="the table's sticker shifts, millimetres")]
        self.rotation_deg = [float(v) for v in check_values(f"{KEY}.rotation_deg", list(self.rotation_deg), 0, 180,
                                                            why="the table's sticker rotations, degrees")]
        self.views = check_range(f"{KEY}.views", self.views, 0, integer=True,
                                 why="protocol views per cell; 0 takes every view")
        self.draws = check_range(f"{KEY}.draws", self.draws, 1, integer=True, why="placement draws per view")
        self.seed = check_range(f"{KEY}.seed", self.seed, 0, integer=True)
        self.batch_size = check_range(f"{KEY}.batch_size", self.batch_size, 1, integer=True,
                                      why="views rendered at once")
        PlacementError(scale=self.scale, colour_gain=self.colour_gain, colour_offset=self.colour_offset, key=KEY)
        head = list(self.headline)
        if len(head) != 2 or head[0] not in self.shift_mm or head[1] not in self.rotation_deg:
            raise InputError(f"{KEY}.headline must be [shift_mm, rotation_deg], a cell of the table (shift_mm "
                             f"{_list(self.shift_mm)}; rotation_deg {_list(self.rotation_deg)}); got {head}.")
        self.headline = [float(head[0]), float(head[1])]

    def error(self, shift_mm: float, rotation_deg: float) -> PlacementError:
        """The fixed-magnitude error of one cell."""
        return PlacementError(shift_mm, rotation_deg, self.scale, self.colour_gain, self.colour_offset,
                              distribution="fixed", key=KEY)


@dataclass
class Scored:
    """A victim the table scores, with its label sets and the protocol's per-view outcome (no error).

    Shape:
        clean_correct, success: V bool over the protocol grid's views.
    """

    victim: object
    true_set: tuple[int, ...]
    target_set: tuple[int, ...] | None
    clean_correct: Tensor
    success: Tensor

    def hit(self, pred: Tensor) -> Tensor:
        if self.target_set is not None:
            return in_label_set(pred, self.target_set)
        return ~in_label_set(pred, self.true_set)


def protocol_subset(views: int, wanted: int, seed: int) -> Tensor:
    """Indices of ``wanted`` of ``views`` protocol views (all when 0 or more), seeded, in grid order."""
    if wanted == 0 or wanted >= views:
        return torch.arange(views)
    return torch.randperm(views, generator=torch.Generator().manual_seed(seed))[:wanted].sort().values


@torch.no_grad()
def placement_table(cmp: Comparison, sticker_mask: Tensor, params, scored: dict[str, Scored],
                    settings: PlacementSettings, headline_victim: str | None = None) -> dict:
    """Success of the deployed patch against placement error, per attacked victim (see the module).

    Args:
        cmp: the scene, the texture the stickers go on (``clean_texture``, 3×Ht×Wt), the attacked texture
            as evaluated (``adv_texture``: printed, when the run prints; its texels under ``sticker_mask``,
            1×Ht×Wt, are the stickers) and the held-out view pipeline.
        params: the protocol grid's SceneParams.
        scored: ``{name: Scored}``, the attacked victims.
        headline_victim: whose cell the headline reports (default: the victim with the lowest success
            there, e.g. an ensemble's weakest member).

    Returns:
        ``metrics.json``'s ``placement``: the settings, ``views`` (the subset's size), ``of`` (the grid's),
        ``stickers``, per victim ``{"reference": rate, "cells": [{"shift_mm", "rotation_deg",
        "attack_success_rate", "drop_points"}]}`` and ``headline``.
    """
    scene, clean_texture, adv_texture, pipeline = cmp.scene, cmp.clean_texture, cmp.adv_texture, cmp.pipeline
    subset = protocol_subset(len(params), settings.views, settings.seed)
    wanted = torch.zeros(len(params), dtype=torch.bool)
    for s in scored.values():
        wanted |= s.clean_correct.cpu()
    keep = subset[wanted[subset]]                            # views some victim read correctly without the patch
    pieces = sticker_pieces(sticker_mask)
    tpm = texels_per_mm(scene)
    victims = {id(s.victim): s.victim for s in scored.values()}
    table = {name: {"reference": rate(s.success.cpu()[keep][s.clean_correct.cpu()[keep]]), "cells": []}
             for name, s in scored.items()}
    for shift in settings.shift_mm:
        for rotation in settings.rotation_deg:
            error = settings.error(shift, rotation)
            if error.none:
                hits = {name: s.success.cpu()[keep] for name, s in scored.items()}    # the design itself
                valid = {name: s.clean_correct.cpu()[keep] for name, s in scored.items()}
            else:
                preds = {k: [] for k in victims}
                for d in range(settings.draws):
                    draw = error.sample(len(keep), len(pieces), torch.Generator().manual_seed(settings.seed + d))
                    for start in range(0, len(keep), settings.batch_size):
                        idx = keep[start:start + settings.batch_size]
                        textures = place_stickers(adv_texture, sticker_mask, clean_texture, scene.face_mask, tpm,
                                                  draw[start:start + settings.batch_size], pieces)
                        images = pipeline(scene, textures, params[idx]).images
                        for k, victim in victims.items():
                            preds[k].append(victim(images.to(_device(victim, images.device))).argmax(1).cpu())
                hits = {name: s.hit(torch.cat(preds[id(s.victim)])) for name, s in scored.items()}
                valid = {name: s.clean_correct.cpu()[keep].repeat(settings.draws) for name, s in scored.items()}
            for name in scored:
                r = rate(hits[name][valid[name]])
                ref = table[name]["reference"]
                table[name]["cells"].append({"shift_mm": shift, "rotation_deg": rotation, "attack_success_rate": r,
                                             "drop_points": _drop(ref, r)})
    name = headline_victim if headline_victim in table else None
    if name is None and table:               # the victim the stickers' placement error hurts most there
        name = min(table, key=lambda n: _placed_rate(table[n], settings.headline))
    head = None
    if name is not None:
        cell = next(c for c in table[name]["cells"]
                    if [c["shift_mm"], c["rotation_deg"]] == settings.headline)
        head = {"victim": name, "shift_mm": cell["shift_mm"], "rotation_deg": cell["rotation_deg"],
                "reference": table[name]["reference"], "placed": cell["attack_success_rate"],
                "drop_points": cell["drop_points"]}
    return {"mode": "fixed", "shift_mm": settings.shift_mm, "rotation_deg": settings.rotation_deg,
            "scale": settings.scale, "colour_gain": settings.colour_gain, "colour_offset": settings.colour_offset,
            "draws": settings.draws, "seed": settings.seed, "views": len(subset), "of": len(params),
            "views_scored": len(keep), "stickers": len(pieces),
            "how": "every sticker shifted by exactly shift_mm in a random direction and turned by exactly "
                   "±rotation_deg; success over each victim's clean-correct views of a seeded subset of the "
                   "protocol grid, the same in every cell",
            "victims": table, "headline": head}


def _placed_rate(victim: dict, cell: list) -> float:
    """A victim's success in the headline ``cell`` ([shift_mm, rotation_deg]); -1 where undefined."""
    r = next(c for c in victim["cells"] if [c["shift_mm"], c["rotation_deg"]] == cell)["attack_success_rate"]
    return r["rate"] if r["n"] else -1.0


def _list(values) -> str:
    return ", ".join(f"{v:g}" for v in values)


def _drop(reference: dict, placed: dict) -> float | None:
    """Percentage points lost to placement error (None where either rate is undefined)."""
    if not reference["n"] or not placed["n"]:
        return None
    return round(100 * (reference["rate"] - placed["rate"]), 2)


def _device(victim, default: torch.device) -> torch.device:
    try:
        return next(victim.parameters()).device
    except (StopIteration, AttributeError):
        return default


# -- what people read ---------------------------------------------------------------------------------

def _cell(r: dict) -> str:
    return f"{r['rate']:.1%} [{r['ci95'][0]:.1%}, {r['ci95'][1]:.1%}] ({r['count']}/{r['n']})" if r["n"] else "n/a"


def placement_line(table: dict) -> str:
    """The table's headline in one console line."""
    head = table.get("headline")
    if head is None:
        return "placement error: no attacked victim could be scored"
    ref, placed = head["reference"], head["placed"]
    if not ref["n"] or not placed["n"]:
        return f"placement error ({head['victim']}): undefined, no clean-correct view in the subset"
    return (f"placement error ({head['victim']}, {table['views_scored']} protocol views, every sticker off by "
            f"exactly {head['shift_mm']:g} mm / ±{head['rotation_deg']:g}°): success {placed['rate']:.1%} "
            f"(95% CI {placed['ci95'][0]:.1%}-{placed['ci95'][1]:.1%}) against {ref['rate']:.1%} as designed "
            f"({drop_words(head['drop_points'])})")


def drop_words(points: float) -> str:
    """``7.5 points lost`` / ``1.2 points gained``: a drop in words, without a sign to misread."""
    return f"{points:.1f} points lost" if points >= 0 else f"{-points:.1f} points gained"


def placement_markdown(table: dict) -> list[str]:
    """The table as Markdown lines: rows shift, columns rotation, one table per victim."""
    lines = ["## Placement error", "",
             f"The patch as stuck on by hand: {table['how']} ({table['views_scored']} scored of a "
             f"{table['views']}-view "
             f"subset of the {table['of']} protocol views, {table['draws']} draw(s) per view, {table['stickers']} "
             "stickers"
             + (f"; scale ±{table['scale']:g}" if table["scale"] else "")
             + (f"; colour gain std {table['colour_gain']:g}" if table["colour_gain"] else "")
             + (f"; colour offset std {table['colour_offset']:g}" if table["colour_offset"] else "")
             + "). Success [95 % Wilson] (count/n).", ""]
    rotations = table["rotation_deg"]
    for name, entry in table["victims"].items():
        lines += [f"**{name}** (as designed: {_cell(entry['reference'])})", "",
                  "| shift \\ rotation | " + " | ".join(f"±{r:g}°" for r in rotations) + " |",
                  "|---|" + "---|" * len(rotations)]
        for shift in table["shift_mm"]:
            cells = [c for c in entry["cells"] if c["shift_mm"] == shift]
            lines.append(f"| {shift:g} mm | " + " | ".join(_cell(c["attack_success_rate"]) for c in cells) + " |")
        lines.append("")
    head = table.get("headline")
    if head is not None and head["drop_points"] is not None:
        lines += [f"At {head['shift_mm']:g} mm / ±{head['rotation_deg']:g}° the attack on {head['victim']} loses "
                  f"**{head['drop_points']:.1f} points** ({head['reference']['rate']:.1%} -> "
                  f"{head['placed']['rate']:.1%}).", ""]
    return lines


def placement_figure(table: dict):
    """A heatmap per victim: success over shift (rows) × rotation (columns), with Wilson intervals."""
    import matplotlib
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(table["victims"])
    shifts, rotations = table["shift_mm"], table["rotation_deg"]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(1.6 + 1.5 * len(rotations) * max(1, len(names)),
                                                            1.2 + 0.65 * len(shifts)), squeeze=False)
    for ax, name in zip(axes[0], names):
        cells = {(c["shift_mm"], c["rotation_deg"]): c["attack_success_rate"] for c in table["victims"][name]["cells"]}
        grid = np.array([[cells[(s, r)]["rate"] if cells[(s, r)]["n"] else np.nan for r in rotations] for s in shifts])
        im = ax.imshow(grid, vmin=0, vmax=1, cmap=matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey"),
                       aspect="auto")
        for i, s in enumerate(shifts):
            for j, r in enumerate(rotations):
                c = cells[(s, r)]
                if c["n"]:
                    ax.text(j, i, f"{c['rate']:.0%}\n[{c['ci95'][0]:.0%}-{c['ci95'][1]:.0%}]", ha="center",
                            va="center", fontsize=7, color="white" if c["rate"] < 0.6 else "black")
        ax.set_xticks(range(len(rotations)), [f"±{r:g}°" for r in rotations], fontsize=8)
        ax.set_yticks(range(len(shifts)), [f"{s:g} mm" for s in shifts], fontsize=8)
        ax.set_xlabel("rotation")
        ax.set_ylabel("shift")
        ax.set_title(name, fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(f"success against placement error ({table['views_scored']} protocol views)", fontsize=10)
    fig.tight_layout()
    return fig


def log_placement(tracker, table: dict) -> None:
    """The table to the tracker: ``heldout/placement`` rows and the headline's drop."""
    rows = [[name, c["shift_mm"], c["rotation_deg"], c["attack_success_rate"]["rate"],
             c["attack_success_rate"]["ci95"][0], c["attack_success_rate"]["ci95"][1], c["drop_points"]]
            for name, entry in table["victims"].items() for c in entry["cells"]]
    tracker.log_table("heldout/placement", ["victim", "shift_mm", "rotation_deg", "attack_success_rate",
                                            "ci_low", "ci_high", "drop_points"], rows)
    head = table.get("headline")
    if head is not None and head["drop_points"] is not None:
        tracker.summary({"heldout/placement_success": head["placed"]["rate"],
                         "heldout/placement_drop_points": head["drop_points"]})
