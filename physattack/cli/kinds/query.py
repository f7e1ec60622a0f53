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
        params = parts.grid.params()
        k = min(attack.query.judge_views, len(params))
        views = params[torch.linspace(0, len(params) - 1, k).round().long()]
        true = torch.tensor(victim.label_set(scene.class_name))
        goal = torch.tensor(victim.label_set(attack.target)) if attack.targeted else None
        device = next(victim.parameters()).device

        @torch.no_grad()
        def labels(texture):
            out = []
            for i in range(0, k, run.eval_batch_size):
                images = parts.eval_pipeline(scene, texture, views[i:i + run.eval_batch_size]).images
                out.append(victim(images.to(device)).argmax(-1).cpu())
            return torch.cat(out)

        correct = torch.isin(labels(scene.texture), true)

        def judge(texture) -> float:
            read = labels(texture)
            won = torch.isin(read, goal) if goal is not None else ~torch.isin(read, true)
            return float(won[correct].float().mean()) if correct.any() else 0.0

        return judge

    def report(self, done, setup) -> RunReport:
        report = super().report(done, setup)
        report.kind = self.name
        queries = getattr(done.result, "queries", None)
        if queries is not None:
            section = dict(queries)
            section["query_attacked"] = section["victim"]
            section["attacked_by_gradient"] = list((report.summary.get("init") or {}).get("attacked_by_gradient") or [])
            section["images_to"] = {f"{t:.0%}": first_reaching(section["curve"], t) for t in (0.8, 0.9)}
            report.add(query=section)
            plot = write_query_plot(Path(setup.run_dir) / "queries.png", section)
            append_query_report(report, section, plot)
            setup.tracker.summary({"query/images": section["images"], "query/answers": section["answers"],
                                   "query/victim": section["victim"]})
        return report

    def fitted(self, report: RunReport, fig: dict) -> str:
        """The queried victim and the images spent, and the victims the ``init=`` patch was attacked on by gradient."""
        q = report.query
        if not q:
            return super().fitted(report, fig)
        prior = q.get("attacked_by_gradient") or []
        start = f", from a patch attacked by gradient on {'+'.join(prior)}" if prior else ""
        return f"query-attacked {q['victim']} with {_n(q['images'])} images ({q['answers']} only{start})"

    def console(self, report: RunReport) -> list[str]:
        lines = super().console(report)
        if report.query:
            lines.append(query_line(report.query))
            if report.heldout is not None and report.heldout.get("victims"):
                lines.append(access_table(report.heldout["victims"], report.query))
        return lines


def first_reaching(curve: list[dict], rate: float) -> int | None:
    """The images queried when the judged success first reached ``rate`` (None: never)."""
    return next((p["images"] for p in curve if p["success"] >= rate), None)


def query_line(q: dict) -> str:
    to = ", ".join(f"{k} after {_n(v)} images" if v is not None else f"{k} not reached" for k, v in q["images_to"].items())
    first, last = q["curve"][0]["success"], q["curve"][-1]["success"]
    return (f"queries: {_n(q['images'])} images asked of {q['victim']} ({q['answers']}, {q['optimizer']}, {q['steps']} "
            f"steps of {q['images_per_step']}, {q['blocks']} colour blocks); quick-grid success {first:.1%} -> "
            f"{last:.1%} ({to}); no gradient asked")


def _n(count: int) -> str:
    """40000 -> '40 000' (the SI's thin grouping, which no locale misreads)."""
    return f"{count:,}".replace(",", " ")


def roles(table: dict, q: dict) -> dict[str, str]:
    """Each victim of the members table as queried, attacked by gradient (the init run) or held out."""
    out = {}
    for name, row in table["members"].items():
        if name == q["victim"]:
            out[name] = "query-attacked"
        elif row["role"] == "attacked":
            out[name] = "attacked by gradient (init run)" if name in q.get("attacked_by_gradient", []) else "attacked"
        else:
            out[name] = "held out"
    return out


def access_table(table: dict, q: dict) -> str:
    """The members × success table with each victim's access: query-attacked, attacked by gradient, held out."""
    role = roles(table, q)
    rows = ["| victim | family | access | success (clean-correct views) |", "|---|---|---|---|"]
    for name, row in table["members"].items():
        r = row["attack_success_rate"]
        rate = f"{r['rate']:.1%} ({r['count']}/{r['n']})" if r["n"] else "undefined"
        rows.append(f"| {name} | {row.get('family') or '–'} | {role[name]} | {rate} |")
    return "\n".join(rows)


def write_query_plot(path: Path, q: dict) -> Path:
    """Success on the quick grid against images queried (``queries.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from physattack.atomic import save_figure

    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    xs = [p["images"] for p in q["curve"]]
    ax.plot(xs, [100 * p["success"] for p in q["curve"]], marker="o", ms=3, label="quick grid (judged)")
    for level in (80, 90):
        ax.axhline(level, color="grey", lw=0.6, ls=":")
    ax.set_xlabel("images queried")
    ax.set_ylabel("success, % of clean-correct views")
    ax.set_ylim(0, 100)
    ax.set_title(f"{q['victim']}: {q['answers']} only, {q['optimizer']}, start {q['start']}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    save_figure(path, fig)
    plt.close(fig)
    return path


def append_query_report(report: RunReport, q: dict, plot: Path) -> None:
    """A *Queries* part at the end of the run's ``report.md`` (when it has one)."""
    from physattack.atomic import save_text

    if not report.report or not Path(report.report).is_file():
        return
    path = Path(report.report)
    lines = ["", "## Queries", "", query_line(q), "",
             f"The victim was asked only for {q['answers']}; the optimizer called no backward pass. The curve is the "
             "current patch judged on the quick grid by the victim itself (never counted, never the optimizer's guide).",
             "", f"![success against images queried]({plot.name})", ""]
    if report.heldout is not None and report.heldout.get("victims"):
        lines += [access_table(report.heldout["victims"], q), ""]
    save_text(path, path.read_text() + "\n".join(lines))


__all__ = ["QueryKind", "access_table", "first_reaching", "query_line"]
