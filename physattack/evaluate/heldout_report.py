"""What the held-out protocol leaves for people: heatmaps, the worst views, a Markdown report, W&B.

Files (in the run directory): ``heldout_azimuth_distance.png``, ``heldout_lighting_distance.png``,
``heldout_conditions.png`` (success and clean accuracy per value of every grid axis, with Wilson
intervals), ``heldout_victims.png`` (each scored victim's success per grid value, when there are
members), ``worst_views.png``, ``atlas.png`` (when an atlas was built), ``placement.png`` (when a
placement-error table was made), ``report.md``; the numbers go into ``metrics.json`` under ``heldout``
(with ``sanity``, ``atlas`` and ``placement``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import Tensor  # noqa: E402

from physattack.atomic import save_figure, save_rgb_png, save_text  # noqa: E402
from physattack.evaluate.grid import Comparison  # noqa: E402
from physattack.evaluate.heldout import HeldOutResult, worst_views  # noqa: E402
from physattack.evaluate.members import fitted_phrase, headline_figures, not_fitted_phrase  # noqa: E402
from physattack.evaluate.placement import placement_figure, placement_markdown  # noqa: E402
from physattack.evaluate.plots import views_gallery  # noqa: E402


def pair_heatmap(conditions: list[dict], success: Tensor, valid: Tensor, x_key: str, y_key: str, title: str):
    """Success over ``x_key`` × ``y_key`` (averaged over every other axis), over valid views only; a
    second panel shows how many valid views each cell holds. Cells without a valid view are grey."""
    xs = sorted({c[x_key] for c in conditions}, key=str if not _numeric(conditions, x_key) else float)
    ys = sorted({c[y_key] for c in conditions}, key=str if not _numeric(conditions, y_key) else float)
    hits, counts = np.zeros((len(ys), len(xs))), np.zeros((len(ys), len(xs)))
    for c, s, v in zip(conditions, success.tolist(), valid.tolist()):
        i, j = ys.index(c[y_key]), xs.index(c[x_key])
        counts[i, j] += v
        hits[i, j] += s * v
    grid = np.where(counts > 0, hits / np.maximum(counts, 1), np.nan)
    fig, axes = plt.subplots(1, 2, figsize=(4 + 0.55 * len(xs) * 2, 3.4))
    cmap = matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey")
    for ax, data, label, vmax in ((axes[0], grid, "success", 1), (axes[1], counts, "valid views", max(1, counts.max()))):
        im = ax.imshow(data, vmin=0, vmax=vmax, cmap=cmap if label == "success" else "Greys", origin="lower", aspect="auto")
        ax.set_xticks(range(len(xs)), [_fmt(x) for x in xs], fontsize=7, rotation=45)
        ax.set_yticks(range(len(ys)), [_fmt(y) for y in ys], fontsize=7)
        ax.set_xlabel(x_key)
        ax.set_ylabel(y_key)
        ax.set_title(label, fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
        if label == "success":
            for i in range(len(ys)):
                for j in range(len(xs)):
                    if counts[i, j] > 0:
                        ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=6,
                                color="white" if grid[i, j] < 0.6 else "black")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _numeric(conditions, key) -> bool:
    return all(isinstance(c[key], (int, float)) for c in conditions)


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, (int, float)) else str(v)


def conditions_figure(tables: dict[str, list[dict]], title: str):
    """One panel per grid axis: conditional success and clean accuracy per value, with 95 % Wilson bars."""
    names = list(tables)
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(3.6 * max(1, len(names)), 3.2), squeeze=False)
    for ax, name in zip(axes[0], names):
        rows = tables[name]
        x = np.arange(len(rows))
        for key, colour, dx in (("attack_success_rate", "tab:red", -0.15), ("clean_accuracy", "tab:blue", 0.15)):
            r = np.array([row[key]["rate"] if row[key]["n"] else np.nan for row in rows])
            lo = np.array([row[key]["ci95"][0] for row in rows])
            hi = np.array([row[key]["ci95"][1] for row in rows])
            ax.errorbar(x + dx, r, yerr=[np.clip(np.nan_to_num(r - lo), 0, None), np.clip(np.nan_to_num(hi - r), 0, None)], fmt="o", color=colour,
                        capsize=2, ms=3, label=key.replace("_", " "))
        ax.set_xticks(x, [_fmt(row["value"]) for row in rows], fontsize=7, rotation=45)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(name, fontsize=9)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def _label(labels, probs: Tensor) -> list[str]:
    return [f"{labels[int(p.argmax())]} {float(p.max()):.2f}" for p in probs]


def worst_views_image(cmp: Comparison, grid, result: HeldOutResult, labels, k: int) -> np.ndarray | None:
    """Two galleries stacked: the victim's worst views (the patch hurts most), then the attack's worst."""
    picks = worst_views(result, k)
    params = grid.params()
    parts = []
    for name in ("victim", "attack"):
        idx = picks[name]
        if not idx:
            continue
        sub = params[torch.tensor(idx)]
        with torch.no_grad():
            c, a = (views.images.cpu() for views in cmp.views(sub))
        g = views_gallery(c, a, _label(labels, result.clean_probs[idx]), _label(labels, result.adv_probs[idx]),
                          columns=min(8, len(idx)))
        title = "patch hurts most (lowest true-class confidence)" if name == "victim" else "attack weakest"
        head = np.full((22, g.shape[1], 3), 30, np.uint8)
        cv2.putText(head, title, (4, 15), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
        parts.append(np.concatenate([head, g], 0))
    if not parts:
        return None
    width = max(p.shape[1] for p in parts)
    parts = [np.pad(p, ((0, 0), (0, width - p.shape[1]), (0, 0))) for p in parts]
    return np.concatenate(parts, 0)


def atlas_image(scene, pipeline, atlas, samples, probs: Tensor, labels, per_region: int = 4, max_regions: int = 6) -> np.ndarray | None:
    """A row of example renders per failing region, each labelled with what the victim read."""
    from physattack.evaluate.atlas import render_samples

    rows = []
    for region in atlas.regions[:max_regions]:
        idx = region.examples[:per_region]
        if not idx:
            continue
        with torch.no_grad():
            imgs = render_samples(scene, scene.texture, pipeline, samples[torch.tensor(idx)]).cpu()
        tiles = []
        for img, p in zip(imgs, probs[idx]):
            t = (img.clamp(0, 1).permute(1, 2, 0).numpy() * 255).round().astype(np.uint8)
            t = cv2.resize(t, None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST)
            t = cv2.copyMakeBorder(t, 0, 18, 0, 0, cv2.BORDER_CONSTANT, value=(20, 20, 20))
            cv2.putText(t, f"{labels[int(p.argmax())][:16]} {float(p.max()):.2f}", (3, t.shape[0] - 5),
                        cv2.FONT_HERSHEY_SIMPLEX, 0.38, (255, 230, 60), 1, cv2.LINE_AA)
            tiles.append(cv2.copyMakeBorder(t, 2, 2, 2, 2, cv2.BORDER_CONSTANT, value=(0, 0, 0)))
        while len(tiles) < per_region:
            tiles.append(np.zeros_like(tiles[0]))
        row = np.concatenate(tiles, 1)
        head = np.full((20, row.shape[1], 3), 30, np.uint8)
        cv2.putText(head, f"{region.name[:70]}  acc {region.accuracy:.2f} (n={region.n})", (4, 14),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.4, (255, 255, 255), 1, cv2.LINE_AA)
        rows.append(np.concatenate([head, row], 0))
    return np.concatenate(rows, 0) if rows else None


def atlas_bins_figure(atlas):
    """Clean accuracy per bin of every searched axis (one-factor samples), with Wilson intervals."""
    names = list(atlas.bins)
    cols = min(5, max(1, len(names)))
    nrows = (len(names) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(3.2 * cols, 2.6 * nrows), squeeze=False)
    for ax in axes.flat[len(names):]:
        ax.axis("off")
    for ax, name in zip(axes.flat, names):
        rows = atlas.bins[name]
        mid = [(r["low"] + r["high"]) / 2 for r in rows]
        acc = np.array([r["accuracy"] if r["accuracy"] is not None else np.nan for r in rows])
        lo = np.array([r["ci95"][0] for r in rows])
        hi = np.array([r["ci95"][1] for r in rows])
        ax.errorbar(mid, acc, yerr=[np.clip(np.nan_to_num(acc - lo), 0, None), np.clip(np.nan_to_num(hi - acc), 0, None)], fmt="o-", ms=3, capsize=2)
        ax.axhline(atlas.max_accuracy, color="tab:red", lw=0.8, ls="--")
        ax.set_ylim(-0.02, 1.02)
        ax.set_title(name, fontsize=9)
        if atlas.axes[name].log:
            ax.set_xscale("log")
    fig.suptitle(f"clean '{atlas.true_label}' accuracy per axis (dashed: region threshold)", fontsize=10)
    fig.tight_layout()
    return fig


def _pct(r: dict) -> str:
    if not r["n"]:
        return "n/a (0 views)"
    return f"{r['rate']:.1%} [{r['ci95'][0]:.1%}, {r['ci95'][1]:.1%}] ({r['count']}/{r['n']})"


def atlas_markdown(atlas: dict, heading: str = "## Natural-failure atlas (clean sign, no patch)") -> list[str]:
    """The atlas's regions as Markdown lines (``atlas``: ``Atlas.to_dict()``)."""
    lines = [heading, "",
             f"{atlas['samples']} one-/two-factor samples; clean accuracy {atlas['clean_accuracy']:.1%}; "
             f"confident failures (wrong with p ≥ {atlas['confidence']}) {atlas['confident_failure_rate']:.1%}.", ""]
    if atlas["regions"]:
        lines += ["| region | n | clean accuracy [95 %] | confident failures | read as | mean wrong confidence |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['name']} | {r['n']} | {r['accuracy']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] | "
                  f"{r['confident_failures']} | {r['top_wrong_label']} | {r['mean_wrong_confidence']:.2f} |"
                  for r in atlas["regions"]]
    else:
        lines.append(f"No region with clean accuracy below {atlas['max_accuracy']:.0%} was found.")
    return lines + [""]


def members_markdown(table: dict) -> list[str]:
    """The members table (``heldout["victims"]``, ``physattack.evaluate.members``) as Markdown lines."""
    lines = ["## Victims: attacked and held out", "",
             "The final patch on every victim through the same held-out views. A held-out victim was never "
             "called by the optimizer. Rates [95 % Wilson] (count/n), each victim with its own label sets; "
             f"success counts RP2's way over that victim's clean-correct views ({table['scope']}).", "",
             "| victim | role | family | trained on | mode | clean accuracy | success (clean-correct) "
             "| success (all views) | mean target confidence |", "|---|---|---|---|---|---|---|---|---|"]
    for name, r in table["members"].items():
        conf = f"{r['mean_target_confidence']:.3f}" if "mean_target_confidence" in r else "–"
        lines.append(f"| {name} | {r['role']} | {r.get('family') or '–'} | {r.get('data', 'render')} | {r['mode']} | "
                     f"{_pct(r['clean_accuracy'])} | "
                     f"{_pct(r['attack_success_rate'])} | {_pct(r['attack_success_rate_unconditional'])} | {conf} |")
    mean = table["held_out_mean"]
    lines.append("")
    if mean["attack_success_rate"] is not None:
        lines.append(f"Mean {mean['mode'] or ''} success over the {len(mean['victims'])} held-out victims "
                     f"(clean-correct views, each victim weighted equally): **{mean['attack_success_rate']:.1%}** "
                     f"(lowest {mean['attack_success_rate_min']:.1%}).")
    else:
        lines.append("No held-out victim could be scored: none was given, each was skipped, or none read the "
                     "clean object correctly on any view.")
    fam = table.get("held_out_families") or {}
    if fam.get("attack_success_rate") is not None:
        lines += ["", f"Over the {len(fam['victims'])} held-out victims of families no attacked victim belongs to "
                      f"({', '.join(fam['families'])}; attacked: {', '.join(fam['attacked_families']) or 'none known'}): "
                      f"**{fam['attack_success_rate']:.1%}** (lowest {fam['attack_success_rate_min']:.1%}) — what a "
                      "red team that holds neither the weights nor the architecture can expect."]
    other = table.get("held_out_other_data") or {}
    if other.get("attack_success_rate") is not None:
        lines += ["", f"Over the {len(other['victims'])} held-out victims trained on other images than the renders the "
                      f"attack optimizes through ({', '.join(other['data'])}; left out of the two means above): "
                      f"**{other['attack_success_rate']:.1%}** (lowest {other['attack_success_rate_min']:.1%}) — a "
                      "victim whose training data this pipeline did not make."]
    if table["skipped"]:
        lines += ["", "Skipped:", ""] + [f"- `{n}` ({s['role']}): {s['reason']}." for n, s in table["skipped"].items()]
    return lines + [""] + victims_conditions_markdown(table)


def victim_axes(table: dict) -> dict[str, list]:
    """The grid axes a members table's per-condition rates cover (classifiers' or detectors'), with
    their values in order; empty when no member has them."""
    axes: dict[str, list] = {}
    for r in table["members"].values():
        for axis, rows in (r.get("per_condition") or {}).items():
            axes.setdefault(axis, [row["value"] for row in rows])
    return axes


def _condition_rate(r: dict, axis: str, value, key: str):
    row = next((x for x in (r.get("per_condition") or {}).get(axis, []) if x["value"] == value), None)
    return row[key]["rate"] if row is not None and row[key]["n"] else None


def victims_conditions_markdown(table: dict, key: str = "attack_success_rate",
                                intro: str = "Success over each victim's clean-correct views per grid value",
                                figure: str = "heldout_victims.png", heading: str = "Victims by condition") -> list[str]:
    """Each member's ``key`` rate per value of every grid axis, one table an axis: where a patch that
    holds on one victim gives way on another (say, only under a low sun)."""
    axes = victim_axes(table)
    if not axes:
        return []
    lines = [f"### {heading}", "", f"{intro} (Wilson intervals in metrics.json, `per_condition` of each member); "
             f"`{figure}` draws the same.", ""]
    for axis, values in axes.items():
        lines += [f"**{axis}**", "", "| victim | role | " + " | ".join(_fmt(v) for v in values) + " |",
                  "|---|---|" + "---|" * len(values)]
        for name, r in table["members"].items():
            cells = [_condition_rate(r, axis, v, key) for v in values]
            lines.append(f"| {name} | {r['role']} | " + " | ".join("–" if c is None else f"{c:.0%}" for c in cells) + " |")
        lines.append("")
    return lines


def victims_conditions_figure(table: dict, title: str, key: str = "attack_success_rate", label: str = "success"):
    """Members (rows, attacked first) × every value of every grid axis (columns, grouped by axis): the
    ``key`` rate; grey where it is undefined (e.g. no clean-correct view of that value)."""
    axes = victim_axes(table)
    names = sorted(table["members"], key=lambda n: table["members"][n]["role"] != "attacked")
    cols = [(axis, v) for axis, values in axes.items() for v in values]
    grid = np.array([[np.nan if (c := _condition_rate(table["members"][n], a, v, key)) is None else c
                      for a, v in cols] for n in names], dtype=float)
    fig, ax = plt.subplots(figsize=(2.5 + 0.42 * len(cols), 1.2 + 0.34 * len(names)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap=matplotlib.colormaps["viridis"].with_extremes(bad="lightgrey"),
                   aspect="auto")
    for i in range(len(names)):
        for j in range(len(cols)):
            if not np.isnan(grid[i, j]):
                ax.text(j, i, f"{100 * grid[i, j]:.0f}", ha="center", va="center", fontsize=6,
                        color="white" if grid[i, j] < 0.6 else "black")
    ax.set_xticks(range(len(cols)), [_fmt(v) for _, v in cols], fontsize=7, rotation=60)
    ax.set_yticks(range(len(names)), [f"{n} ({table['members'][n]['role']})" for n in names], fontsize=7)
    start = 0
    for axis, values in axes.items():                   # axis names over their column groups
        ax.text(start + (len(values) - 1) / 2, -0.8, axis, ha="center", va="bottom", fontsize=8)
        if start:
            ax.axvline(start - 0.5, color="white", lw=2)
        start += len(values)
    fig.colorbar(im, ax=ax, shrink=0.8, label=f"{label} (cells: %)")
    ax.set_title(title, fontsize=10, pad=18)
    fig.tight_layout()
    return fig


def markdown_report(summary: dict, heldout: dict, sanity: list[dict], atlas: dict | None, files: dict[str, str],
                    placement: dict | None = None) -> str:
    """A short report a reviewer can read in a minute (``placement``: the placement-error table, if made)."""
    lines = [f"# Held-out evaluation: {summary.get('attack', '')} on {summary.get('scene', '')}", ""]
    lines += [f"Victim `{summary.get('victim', '')}`; true label set {heldout['true_label_set']}"
              + (f", target set {heldout['target_label_set']}" if heldout.get("target_label_set") else "")
              + f"; {heldout['views']} held-out views (grid axes: "
              + ", ".join(f"{k} ×{len(v)}" for k, v in heldout["grid_axes"].items() if v) + ").", ""]
    lines += fitted_markdown(summary.get("victim_names") or [], heldout)
    lines += ["| measure | rate [95 % Wilson] (count/n) |", "|---|---|",
              f"| clean accuracy | {_pct(heldout['clean_accuracy'])} |",
              f"| attack success, clean-correct views (RP2) | {_pct(heldout['attack_success_rate'])} |",
              f"| attack success, all views | {_pct(heldout['attack_success_rate_unconditional'])} |",
              f"| attacked accuracy | {_pct(heldout['attacked_accuracy'])} |"]
    if "mean_target_confidence" in heldout:
        lines.append(f"| mean target confidence | {heldout['mean_target_confidence']:.3f} |")
    free = heldout["free_successes"]
    lines += [f"| success outside natural-failure regions | {_pct(free['attack_success_rate_outside_atlas'])} |", "",
              f"Free successes: {free['free_clean_wrong']} on views the clean sign already failed, "
              f"{free['free_atlas_region']} on clean-correct views inside atlas failure regions "
              f"({free['views_in_atlas_regions']} grid views lie in such regions), of {free['successes']} successes.", ""]
    if heldout.get("victims"):
        lines += members_markdown(heldout["victims"])
    if placement is not None:
        lines += placement_markdown(placement)
    raised = [f for f in sanity if f["raised"]]
    lines += ["## Sanity flags", ""]
    lines += [f"- **{f['name']}**: {f['message']}" for f in raised] or ["- none raised"]
    lines += [f"- checked, not raised: {', '.join(f['name'] for f in sanity if not f['raised'])}", ""]
    lines += ["## Per condition (success over clean-correct views; clean accuracy)", ""]
    for axis, rows in heldout["per_condition"].items():
        lines += [f"**{axis}**", "", "| value | views | clean accuracy | success (RP2) | success (all) |", "|---|---|---|---|---|"]
        lines += [f"| {_fmt(r['value'])} | {r['views']} | {_pct(r['clean_accuracy'])} | {_pct(r['attack_success_rate'])} | "
                  f"{_pct(r['attack_success_rate_unconditional'])} |" for r in rows]
        lines.append("")
    if atlas is not None:
        lines += atlas_markdown(atlas)
    lines += ["## Files", ""] + [f"- `{name}`: {path}" for name, path in files.items()] + [""]
    return "\n".join(lines)


def fitted_markdown(victim_names: list[str], heldout: dict) -> list[str]:
    """The report's headline paragraph: the success quoted (``members.headline_figures``), what the patch
    was fitted to, and how the victims it was not fitted to read it."""
    fig = headline_figures(victim_names, heldout)
    if not fig["fitted_to"] or not fig["success"] or not fig["success"]["n"]:
        return []
    lines = [f"**Headline:** {_pct(fig['success'])} success, {fitted_phrase(fig)}; {not_fitted_phrase(fig)}."]
    if len(fig["fitted_to"]) > 1:
        lines.append("The first table reads the members' mean probability, which no model the patch meets "
                     "computes; the headline quotes the lowest member's own rate (each member under *Victims*).")
    return [" ".join(lines), ""]


@dataclass
class ProtocolFindings:
    """Everything the held-out protocol found, for its pictures and ``report.md``: the comparison it
    rendered (scene, textures, pipeline), its grid, the victim, the per-view result and its rates, the
    sanity flags, the report's head (``summary``), the atlas with its samples and their probabilities
    (``(atlas, samples, probs)``, each may be None), the atlas's pipeline, the worst views to show, and
    the placement-error table (or None)."""

    cmp: Comparison
    grid: object
    victim: object
    result: HeldOutResult
    heldout: dict
    sanity: list[dict]
    summary: dict
    atlas: tuple = (None, None, None)
    atlas_pipeline: object | None = None
    worst: int = 8
    placement: dict | None = None


def write_heldout_outputs(run_dir: str | Path, findings: ProtocolFindings, tracker=None
                          ) -> tuple[dict[str, Path], list[dict]]:
    """Write the held-out protocol's pictures and ``report.md`` and log them to ``tracker``; returns name ->
    path and the protocol's per-view rows (for the run report's ``heldout`` section)."""
    f = findings
    scene, pipeline = f.cmp.scene, f.cmp.pipeline
    result, heldout, victim, summary = f.result, f.heldout, f.victim, f.summary
    atlas, atlas_samples, atlas_probs = f.atlas
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    valid = result.clean_correct.float()
    what = summary.get("attack", "attack")
    for x, y, name in (("azimuth_deg", "distance_m", "heldout_azimuth_distance"),
                       ("lighting", "distance_m", "heldout_lighting_distance")):
        fig = pair_heatmap(result.conditions, result.success.float(), valid, x, y,
                           f"{what}: held-out success, clean-correct views")
        out[name] = save_figure(run_dir / f"{name}.png", fig)
        plt.close(fig)
    if heldout["per_condition"]:
        fig = conditions_figure(heldout["per_condition"], f"{what}: per held-out condition")
        out["heldout_conditions"] = save_figure(run_dir / "heldout_conditions.png", fig)
        plt.close(fig)
    if heldout.get("victims") and victim_axes(heldout["victims"]):
        fig = victims_conditions_figure(heldout["victims"], f"{what}: each victim's success per held-out condition")
        out["heldout_victims"] = save_figure(run_dir / "heldout_victims.png", fig)
        plt.close(fig)
    img = worst_views_image(f.cmp, f.grid, result, victim.labels, f.worst)
    if img is not None:
        out["worst_views"] = save_rgb_png(run_dir / "worst_views.png", img)
    atlas_dict = atlas.to_dict() if atlas is not None else None
    if atlas is not None and atlas_samples is not None:
        img = atlas_image(scene, f.atlas_pipeline or pipeline, atlas, atlas_samples, atlas_probs, victim.labels)
        if img is not None:
            out["atlas"] = save_rgb_png(run_dir / "atlas.png", img)
        fig = atlas_bins_figure(atlas)
        out["atlas_bins"] = save_figure(run_dir / "atlas_bins.png", fig)
        plt.close(fig)
    if f.placement is not None:
        fig = placement_figure(f.placement)
        out["placement"] = save_figure(run_dir / "placement.png", fig)
        plt.close(fig)
    files = {k: p.name for k, p in out.items()}
    out["report"] = save_text(run_dir / "report.md", markdown_report(summary, heldout, f.sanity, atlas_dict, files,
                                                                     f.placement))
    per_view = [{**c, "clean": victim.labels[int(cp)], "attacked": victim.labels[int(ap)],
                 "clean_correct": bool(ok), "success": bool(s), "in_atlas_region": bool(r),
                 "patch_visible_share": round(float(v), 4)}
                for c, cp, ap, ok, s, r, v in zip(result.conditions, result.clean_pred, result.adv_pred,
                                                   result.clean_correct, result.success, result.in_atlas_region,
                                                   result.patch_visible)]
    if tracker is not None:
        _log(tracker, heldout, f.sanity, per_view, out)
    return out, per_view


def _log(tracker, heldout: dict, sanity: list[dict], per_view: list[dict], paths: dict[str, Path]) -> None:
    flat = {"heldout/clean_accuracy": heldout["clean_accuracy"]["rate"],
            "heldout/attack_success_rate": heldout["attack_success_rate"]["rate"],
            "heldout/attack_success_rate_unconditional": heldout["attack_success_rate_unconditional"]["rate"],
            "heldout/attack_success_rate_outside_atlas":
                heldout["free_successes"]["attack_success_rate_outside_atlas"]["rate"],
            **{f"sanity/{f['name']}": int(f["raised"]) for f in sanity}}
    if "mean_target_confidence" in heldout:
        flat["heldout/mean_target_confidence"] = heldout["mean_target_confidence"]
    tracker.summary(flat)
    tracker.log(flat)
    images = {f"heldout/{k}": cv2.cvtColor(cv2.imread(str(p), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
              for k, p in paths.items() if p.suffix == ".png"}
    tracker.log_images(images)
    columns = ["azimuth_deg", "elevation_deg", "distance_m", "lighting", "effects", "background", "clean", "attacked",
               "clean_correct", "success", "in_atlas_region"]
    tracker.log_table("heldout/per_view", columns, [[v.get(c) for c in columns] for v in per_view])
    rows = [[axis, _fmt(r["value"]), r["views"], r["clean_accuracy"]["rate"], r["attack_success_rate"]["rate"],
             r["attack_success_rate_unconditional"]["rate"]] for axis, rs in heldout["per_condition"].items() for r in rs]
    tracker.log_table("heldout/per_condition", ["axis", "value", "views", "clean_accuracy", "attack_success_rate",
                                                "attack_success_rate_unconditional"], rows)
