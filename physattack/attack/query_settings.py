"""The settings of a query attack (``attack.query``) and the checks made before it asks anything: the victim is
one model, the budget pays for a step. ``physattack.attack.query`` runs the attack."""

from __future__ import annotations

from dataclasses import dataclass, fields

from physattack.attack.loop import AttackError

OPTIMIZERS = ("nes", "search")
STARTS = ("patch", "clean")
BASES = ("rgb", "grey")


class QueryAttackError(AttackError):
    """A query attack that cannot run as configured; the message says what to do."""


@dataclass
class QuerySettings:
    """How a query attack spends its images (``attack.query``).

    Args:
        answers: what the victim gives: ``scores`` (probabilities) or ``labels`` (the top class only).
        optimizer: ``nes`` or ``search``, either with scores or labels; ``auto``: nes (with labels only it estimates
            the gradient of the share of the step's views won, which EOT makes a graded score).
        samples: antithetic pairs (nes) or children (search) per step.
        views: EOT views each candidate is judged on, for a sampler of independent views (``eot=default``); a sampler
            of approach windows (``eot=approach``) sets its own (its windows' frames and views).
        sigma: nes: the std of a block's colour perturbation, in [0, 1] colour units.
        lr: nes: Adam's step on the block offsets (cosine to 10 % over the budget).
        change: search: the share of blocks a child redraws at the start (a quarter of it at the end).
        epsilon: search: how far a redrawn block's colour moves (uniform in ±epsilon per channel).
        cell_mm: the side of a block on the sign, in millimetres; None: the patch's sticker cell.
        start: ``patch`` (the patch's colours, e.g. ``init=``'s) or ``clean`` (the sign's own colours under the
            stickers: no colour prior, only the layout).
        margin: the log-probability margin at which a view counts as won (scores).
        judge_every: images between judgements of the current patch on the run's quick grid, through the
            victim itself (never counted: the judge is not the attacker; it draws the success-vs-queries plot).
        judge_views: quick-grid views per judgement.
        basis: ``rgb`` (one RGB offset per block) or ``grey`` (one brightness offset per block, the same on the three
            channels: a third of the dimensions to estimate, for the budget's few hundred steps).
        keep: nes: the weight of the ``init=`` run's victims' own loss gradient (their capped margin on the step's
            views; the red team holds them) added to every step, so the patch keeps fooling them; 0: off.
        select: images between checks of the current patch on one fixed held-aside draw (of ``select_draws`` draws
            like a step's: its views, or its approach windows), asked of the victim and **counted** against the
            budget; the patch handed back is the best one checked (most of the draw won, then the lowest loss), not
            the last. 0: off (the last patch). A query optimizer's last patch is wherever its last steps put it.
        select_draws: step-sized draws pooled into the held-aside draw (more: a steadier estimate, more images a
            check).
        layout_every: every this many steps, one step moves the stickers instead of their colours (``samples``
            children of ``layout_cells`` moved cells each, ``physattack.attack.query_layout``); 0: they stay put.
        layout_cells: sticker cells a layout child moves, each to a free cell of the face next to the stickers.
        layout_confirm: a layout step's best child is taken only if it also beats the patch on a second, fresh
            draw (both asked, both counted): the best of ``samples`` children beats its parent on one draw by
            chance alone (the winner's curse), most of all with labels, whose share of views won is coarse.
            False: taken on the step's draw alone (and no second draw is made).
    """

    answers: str = "scores"
    optimizer: str = "auto"
    samples: int = 4
    views: int = 64
    sigma: float = 0.2
    lr: float = 0.3
    change: float = 0.15
    epsilon: float = 0.35
    cell_mm: float | None = 90.0
    start: str = "patch"
    margin: float = 2.0
    judge_every: int = 5000
    judge_views: int = 96
    basis: str = "rgb"
    keep: float = 0.0
    select: int = 0
    select_draws: int = 2
    layout_every: int = 0
    layout_cells: int = 1
    layout_confirm: bool = False

    def __post_init__(self) -> None:
        E, k = QueryAttackError, "attack.query."
        if self.answers not in ("scores", "labels"):
            raise E(f"{k}answers must be scores or labels, not {self.answers!r}.")
        if self.optimizer not in (*OPTIMIZERS, "auto"):
            raise E(f"{k}optimizer must be nes, search or auto, not {self.optimizer!r}.")
        if self.start not in STARTS:
            raise E(f"{k}start must be patch or clean, not {self.start!r}.")
        if self.basis not in BASES:
            raise E(f"{k}basis must be rgb or grey, not {self.basis!r}.")
        self.samples = E.check_range(k + "samples", self.samples, 1, integer=True, why="pairs or children per step")
        self.views = E.check_range(k + "views", self.views, 1, integer=True, why="views per candidate")
        E.check_range(k + "sigma", self.sigma, 0, 1, lo_open=True, why="colour units")
        E.check_range(k + "lr", self.lr, 0, lo_open=True)
        E.check_range(k + "change", self.change, 0, 1, lo_open=True, why="the share of blocks a child redraws")
        E.check_range(k + "epsilon", self.epsilon, 0, 1, lo_open=True, why="colour units")
        if self.cell_mm is not None:
            E.check_range(k + "cell_mm", self.cell_mm, 0, lo_open=True, why="a block's side in mm")
        E.check_range(k + "margin", self.margin, 0, lo_open=True)
        self.judge_every = E.check_range(k + "judge_every", self.judge_every, 0, integer=True,
                                         why="images between quick-grid judgements; 0: only at the start and end")
        self.judge_views = E.check_range(k + "judge_views", self.judge_views, 1, integer=True)
        E.check_range(k + "keep", self.keep, 0, why="the weight of the init= run's victims' own loss")
        self.select = E.check_range(k + "select", self.select, 0, integer=True,
                                    why="images between checks on the held-aside draw; 0: keep the last patch")
        self.select_draws = E.check_range(k + "select_draws", self.select_draws, 1, 64, integer=True,
                                          why="step-sized draws in the held-aside draw")
        self.layout_every = E.check_range(k + "layout_every", self.layout_every, 0, integer=True,
                                          why="steps between layout steps; 0: the stickers stay where they are")
        self.layout_cells = E.check_range(k + "layout_cells", self.layout_cells, 1, integer=True)
        if not isinstance(self.layout_confirm, bool):
            raise E(f"{k}layout_confirm must be true or false, not {self.layout_confirm!r}.")
        if self.keep and self.method != "nes":
            raise E(f"{k}keep steers nes's steps; with {k}optimizer={self.optimizer} set {k}keep=0.")

    @classmethod
    def of(cls, value) -> QuerySettings:
        if value is None or isinstance(value, cls):
            return value or cls()
        keys = dict(value)
        unknown = sorted(set(keys) - {f.name for f in fields(cls)})
        if unknown:
            raise QueryAttackError(f"attack.query.{unknown[0]} is not a setting; the settings are "
                                   f"{', '.join(f.name for f in fields(cls))}.")
        return cls(**keys)

    @property
    def method(self) -> str:
        return "nes" if self.optimizer == "auto" else self.optimizer

    @property
    def needs_members(self) -> bool:
        """Whether the optimizer differentiates through the ``init=`` run's victims (never through the one asked)."""
        return self.keep > 0

    def images_per_step(self, views: int) -> int:
        """The most images one step asks about with ``views`` views per candidate."""
        layout = 1 + self.samples + (2 if self.layout_confirm else 0) if self.layout_every else 0
        return views * max(2 * self.samples if self.method == "nes" else 1 + self.samples, layout)


def check_victim(victim, objective: str) -> None:
    """A query attack asks one model: a classifier, or a detector made to miss the sign; else one sentence."""
    if getattr(victim, "members", None):
        raise QueryAttackError("attack.method=query asks one model (the car's) through queries; give victim= a single "
                               "classifier or detector, e.g. victim=zoo_convnext_atto (init= an ensemble run to start "
                               "from its patch).")
    if getattr(victim, "is_detector", False) and objective != "hide":
        raise QueryAttackError(f"attack.method=query on a detector makes it miss the sign (attack=hide); "
                               f"attack.objective={objective} is for gradient attacks on detectors.")


def check_budget(settings: QuerySettings, queries: int | None, sampler) -> int:
    """One step's images; a budget (``queries``) below them is one sentence naming ``attack.queries``."""
    views = views_per_step(sampler, settings.views)
    cost = settings.images_per_step(views)
    if queries is not None and cost > queries:
        raise QueryAttackError(f"attack.queries={queries} is below one step's {cost} images ({views} views x "
                               f"{cost // views} candidates); raise attack.queries or lower attack.query.samples.")
    return cost


def views_per_step(sampler, views: int) -> int:
    """The views one step draws: approach windows' rows (and independent views), or ``views``."""
    return sampler.batch_size if hasattr(sampler, "windows") else views


__all__ = ["BASES", "OPTIMIZERS", "QueryAttackError", "QuerySettings", "STARTS", "check_budget", "check_victim",
           "views_per_step"]
