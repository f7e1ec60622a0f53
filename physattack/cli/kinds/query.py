"""Query runs: a classifier the red team can ask (labels or scores, each image counted) but not open.

Evaluated as every classifier run is (the held-out protocol, drives, export), and reported as what it
is: the victim is **query-attacked** — never held out — and the victims the ``init=`` run attacked by
their gradient are attacked too; only the others are held out. The run adds a ``query`` section to
``metrics.json`` (images asked, answers, optimizer, the success-vs-queries curve judged on the quick
grid), ``queries.png`` and a *Queries* part of ``report.md``.
"""

from __future__ import annotations

from pathlib import Path

import torch

from physattack.cli.kinds.classifier import ClassifierKind
from physattack.cli.kinds.detector import DetectorKind
from physattack.run_report import RunReport


class QueryKind(ClassifierKind):
    name = "query"

    def matches(self, attack, victim) -> bool:
        return getattr(attack, "method", "gradient") == "query" and not getattr(victim, "is_detector", False)

    def judge(self, parts, run):
        """texture -> the share of the quick grid's first ``attack.query.judge_views`` views (spread evenly) the
        victim misreads as the attack wants, among those it reads correctly when clean: the curve's figure.
        It asks the victim itself (evaluation, never the optimizer's guide, never counted)."""
        scene, victim, attack = parts.scene, parts.victim, parts.attack
        true = torch.tensor(victim.label_set(scene.class_name))
        goal = torch.tensor(victim.label_set(attack.target)) if attack.targeted else None
        device = next(victim.parameters()).device
        return quick_grid_judge(parts, run, lambda views: victim(views.images.to(device)).argmax(-1).cpu(),
                                correct=lambda read: torch.isin(read, true),
                                won=lambda read: torch.isin(read, goal) if goal is not None else ~torch.isin(read, true))

    def report(self, done, setup) -> RunReport:
        return add_queries(super().report(done, setup), self.name, done, setup, "victims")

    def fitted(self, report: RunReport, fig: dict) -> str:
        return query_fitted(report.query) if report.query else super().fitted(report, fig)

    def console(self, report: RunReport) -> list[str]:
        return super().console(report) + query_console(report, "victims")


class QueryDetectorKind(DetectorKind):
    """A detector (or a whole stack, ``physattack.victims.stack``) the red team can ask (its detections, with or
    without scores, each image counted) but not open, made to miss the sign (``attack=hide``) on context frames or
    over approach windows; evaluated and reported as every detector run is, plus the queries."""

    name = "query_detector"

    def matches(self, attack, victim) -> bool:
        return getattr(attack, "method", "gradient") == "query" and bool(getattr(victim, "is_detector", False))

    def judge(self, parts, run):
        """texture -> the share of the quick grid's first ``attack.query.judge_views`` frames (spread evenly) on
        which the detector no longer finds the sign, among those it finds clean: the curve's figure. It asks the
        detector itself (evaluation, never the optimizer's guide, never counted)."""
        from physattack.victims.detection import best_scores_on_boxes

        victim = parts.victim
        label, threshold = victim.label_index(parts.scene.class_name), float(victim.score_threshold)
        device = next(victim.parameters()).device

        def found(views):
            return best_scores_on_boxes(victim(views.images.to(device)).detections, views.boxes, label) >= threshold

        return quick_grid_judge(parts, run, found, correct=lambda read: read, won=lambda read: ~read)

    def report(self, done, setup) -> RunReport:
        return add_queries(super().report(done, setup), self.name, done, setup, "detectors")

    def fitted(self, report: RunReport) -> str | None:
        return query_fitted(report.query) if report.query else None

    def console(self, report: RunReport) -> list[str]:
        return super().console(report) + query_console(report, "detectors")


def quick_grid_judge(parts, run, read, correct, won):
    """texture -> the share of the quick grid's first ``attack.query.judge_views`` views (spread evenly) that
    ``won`` (of what ``read`` says of the rendered views), among those the clean sign's reading makes ``correct``."""
    params = parts.grid.params()
    k = min(parts.attack.query.judge_views, len(params))
    views = params[torch.linspace(0, len(params) - 1, k).round().long()]

    @torch.no_grad()
    def reads(texture):
        return torch.cat([read(parts.eval_pipeline(parts.scene, texture, views[i:i + run.eval_batch_size]))
                          for i in range(0, k, run.eval_batch_size)])

    ok = correct(reads(parts.scene.texture))

    def judge(texture) -> float:
        return float(won(reads(texture))[ok].float().mean()) if ok.any() else 0.0

    return judge


def add_queries(report: RunReport, kind: str, done, setup, table: str) -> RunReport:
    """``report`` with the run's ``query`` section, ``queries.png``, the *Queries* part of report.md and W&B's
    summary; ``table``: where the held-out members table is (``victims`` or ``detectors``)."""
    report.kind = kind
    queries = getattr(done.result, "queries", None)
    if queries is None:
        return report
    section = dict(queries)
    section["query_attacked"] = section["victim"]
    init = report.summary.get("init") or {}
    section["attacked_by_gradient"] = list(init.get("attacked_by_gradient") or [])
    if init.get("query_attacked"):            # init= a query run: what its chain asked, and the images it spent
        section["query_attacked_before"] = list(init["query_attacked"])
        section["images_before"] = int(init.get("query_images") or 0)
    section["images_to"] = {f"{t:.0%}": first_reaching(section["curve"], t) for t in (0.8, 0.9)}
    report.add(query=section)
    what = "the sign missed, % of clean-detected frames" if table == "detectors" else None
    plot = write_query_plot(Path(setup.run_dir) / "queries.png", section, what)
    append_query_report(report, section, plot, table)
    setup.tracker.summary({"query/images": section["images"], "query/answers": section["answers"],
                           "query/victim": section["victim"]})
    return report


def query_fitted(q: dict) -> str:
    """The queried victim and the images spent, and the victims the ``init=`` patch was attacked on by gradient."""
    prior = q.get("attacked_by_gradient") or []
    start = f", from a patch attacked by gradient on {'+'.join(prior)}" if prior else ""
    if q.get("kept"):
        who = "their" if prior else "the init run's victims'"
        start += f", still steered by {who} gradients (keep={q['keep']:g})"
    if q.get("query_attacked_before"):
        start += (f", after {_n(q.get('images_before', 0))} images asked of {'+'.join(q['query_attacked_before'])} "
                  "by the query runs it started from")
    return f"query-attacked {q['victim']} with {_n(q['images'])} images ({q['answers']} only{start})"


def query_console(report: RunReport, table: str) -> list[str]:
    if not report.query:
        return []
    lines = [query_line(report.query)]
    if report.heldout is not None and report.heldout.get(table):
        lines.append(access_table(report.heldout[table], report.query))
    return lines


def first_reaching(curve: list[dict], rate: float) -> int | None:
    """The images queried when the judged success first reached ``rate`` (None: never)."""
    return next((p["images"] for p in curve if p["success"] >= rate), None)


def query_line(q: dict) -> str:
    to = ", ".join(f"{k} after {_n(v)} images" if v is not None else f"{k} not reached" for k, v in q["images_to"].items())
    first, last = q["curve"][0]["success"], q["curve"][-1]["success"]
    guided = (f"; the gradients of {'+'.join(q['kept'])} (the init run's, held white-box) steered it too "
              f"(keep={q['keep']:g})") if q.get("kept") else ""
    return (f"queries: {_n(q['images'])} images asked of {q['victim']} ({q['answers']}, {q['optimizer']}, {q['steps']} "
            f"steps of {q['images_per_step']}, {q['blocks']} {q.get('basis', 'rgb')} blocks); quick-grid success {first:.1%} -> "
            f"{last:.1%} ({to}){selected_line(q)}{layout_line(q)}; no gradient asked of {q['victim']}{guided}")


def layout_line(q: dict) -> str:
    """How often a run with ``attack.query.layout_every`` moved the stickers ('' without it)."""
    layout = q.get("layout")
    if not layout:
        return ""
    refused = (f", {layout['refused']} best moves refused by a fresh draw" if layout.get("confirm") else "")
    return (f"; {layout['taken']} of {layout['steps']} layout steps moved stickers ({layout['moved']} cells moved, "
            f"the area unchanged{refused})")


def selected_line(q: dict) -> str:
    """Which patch a run with ``attack.query.select`` handed back, by its counted checks ('' without them)."""
    checks, chosen = q.get("checks") or [], q.get("selected")
    if not checks or chosen is None:
        return ""
    last = checks[-1]
    which = ("the last patch" if chosen["images"] == last["images"] else
             f"the patch of {_n(chosen['images'])} images, not the last ({last['success']:.1%})")
    return (f"; kept {which}: {chosen['success']:.1%} of the held-aside draw won, best of {len(checks)} counted "
            f"checks")


def _n(count: int) -> str:
    """40000 -> '40 000' (the SI's thin grouping, which no locale misreads)."""
    return f"{count:,}".replace(",", " ")


def roles(table: dict, q: dict) -> dict[str, str]:
    """Each victim of the members table as queried, attacked by gradient (the init run) or held out."""
    out = {}
    for name, row in table["members"].items():
        if name == q["victim"]:
            out[name] = "query-attacked"
        elif name in q.get("stack_parts", []):
            out[name] = "inside the query-attacked stack"
        elif name in q.get("query_attacked_before", []):
            out[name] = "query-attacked (init run)"
        elif row["role"] == "attacked":
            out[name] = ("attacked" if name not in q.get("attacked_by_gradient", []) else
                         "attacked by gradient (init run, and steered this run)" if name in q.get("kept", [])
                         else "attacked by gradient (init run)")
        else:
            out[name] = "held out"
    return out


def access_table(table: dict, q: dict) -> str:
    """The members × success table with each victim's access: query-attacked, attacked by gradient, held out (a
    classifier's success over its clean-correct views; a detector's detection rate clean -> attacked)."""
    role = roles(table, q)
    detectors = any("detection_rate_attacked" in row for row in table["members"].values())
    what = "detected clean -> attacked (frames)" if detectors else "success (clean-correct views)"
    rows = [f"| victim | family | access | {what} |", "|---|---|---|---|"]
    for name, row in table["members"].items():
        if detectors:
            c, a = row["detection_rate_clean"], row["detection_rate_attacked"]
            rate = f"{c['rate']:.1%} -> {a['rate']:.1%} (of {a['n']})" if a["n"] else "undefined"
        else:
            r = row["attack_success_rate"]
            rate = f"{r['rate']:.1%} ({r['count']}/{r['n']})" if r["n"] else "undefined"
        rows.append(f"| {name} | {row.get('family') or '–'} | {role[name]} | {rate} |")
    return "\n".join(rows)


def write_query_plot(path: Path, q: dict, what: str | None = None) -> Path:
    """Success on the quick grid against images queried (``queries.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from physattack.atomic import save_figure

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    xs = [p["images"] for p in q["curve"]]
    ax.plot(xs, [100 * p["success"] for p in q["curve"]], marker="o", ms=3, label="quick grid (judged)")
    if q.get("checks"):
        ax.plot([p["images"] for p in q["checks"]], [100 * p["success"] for p in q["checks"]], marker=".", ms=3,
                lw=0.8, label="held-aside draw (asked, counted)")
        if q.get("selected"):
            ax.plot([q["selected"]["images"]], [100 * q["selected"]["success"]], marker="*", ms=9, ls="",
                    color="C3", label="patch handed back")
    for level in (80, 90):
        ax.axhline(level, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("images queried")
    ax.set_ylabel(what or "success, % of clean-correct views")
    ax.set_ylim(0, 100)
    ax.set_title(f"{q['victim']}: {q['answers']} only, {q['optimizer']}, start {q['start']}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(path, fig)
    plt.close(fig)
    return path


def append_query_report(report: RunReport, q: dict, plot: Path, table: str = "victims") -> None:
    """A *Queries* part at the end of the run's ``report.md`` (when it has one)."""
    from physattack.atomic import save_text

    if not report.report or not Path(report.report).is_file():
        return
    path = Path(report.report)
    lines = ["", "## Queries", "", query_line(q), "",
             f"The victim was asked only for {q['answers']}; the optimizer called no backward pass. The curve is the "
             "current patch judged on the quick grid by the victim itself (never counted, never the optimizer's guide).",
             "", f"![success against images queried]({plot.name})", ""]
    if report.heldout is not None and report.heldout.get(table):
        lines += [access_table(report.heldout[table], q), ""]
    save_text(path, path.read_text() + "\n".join(lines))


__all__ = ["QueryDetectorKind", "QueryKind", "access_table", "first_reaching", "query_line"]
