"""A victim seen only through queries: a batch of images in, labels or scores out, every image counted.

The other threat model a red team has besides transfer: the car's perception runs on a bench, in a
simulator or in a vehicle on a closed track, and answers what it sees — a label, or with luck its
scores — but gives no weights and no gradients. ``QueryVictim`` holds a victim behind exactly that
door: it answers ``labels`` (decision-based) or ``scores`` (score-based: the probabilities, never
the logits), counts every image it is asked about, refuses images that carry a gradient, and stops
answering at its budget. The label names stay public (a red team knows what a car can read).

A detector answers as a detection API does: with ``scores``, each image's detections after NMS (boxes,
labels and scores, down to the model's own low threshold); with ``labels``, only the detections it makes
at its operating threshold (boxes and labels; every score reads 1, so no score leaks).
"""

from __future__ import annotations

import torch
from torch import Tensor

from physattack.victims.base import VictimError

ANSWERS = ("scores", "labels")


class QueryError(VictimError):
    """A query the victim will not answer (a gradient asked for, an answer it does not give)."""


class BudgetSpent(Exception):
    """The victim's query budget has no room for the images asked about (not an input error: the
    optimizer stops here, and the count stays what it was)."""


class QueryVictim:
    """``victim`` behind a query-only door.

    Args:
        victim: a classifier (``physattack.victims.Classifier``: B×3×H×W images in [0, 1] -> B×K logits) or a
            detector (``physattack.victims.detection.Detector``).
        answers: ``scores`` (classifier: B×K probabilities; detector: B ``Detections`` with their scores) or
            ``labels`` (classifier: B labels, the top class, and nothing else; detector: B ``Detections`` of the
            detections made at ``score_threshold``, every score 1).
        budget: the most images it answers in all (None: no limit).
        name: what reports call it.

    Attributes:
        images: how many images it has been asked about (exact: a refused batch is not counted).
        labels: the victim's label names (public).
        is_detector: whether it answers detections; ``score_threshold`` is then its operating threshold (public).
    """

    def __init__(self, victim, answers: str = "scores", budget: int | None = None, name: str | None = None):
        if getattr(victim, "members", None) is not None:
            raise QueryError("A query-only victim is one model (a car's stack reads one); give victim= a single "
                             "classifier or detector, e.g. victim=zoo_convnext_atto, not an ensemble.")
        if answers not in ANSWERS:
            raise QueryError(f"attack.query.answers must be scores or labels, not {answers!r}.")
        if budget is not None:
            budget = QueryError.check_range("attack.queries", budget, 1, integer=True,
                                            why="the images the victim may be asked about")
        self._victim = victim
        self.answers, self.budget, self.name = answers, budget, name or type(victim).__name__
        self.images = 0
        self.labels = tuple(getattr(victim, "labels", ()))
        self.is_detector = bool(getattr(victim, "is_detector", False))
        self.score_threshold = float(getattr(victim, "score_threshold", 0.5)) if self.is_detector else None

    def label_index(self, name: str) -> int:
        return self._victim.label_index(name)

    def label_set(self, name: str) -> tuple[int, ...]:
        return self._victim.label_set(name)

    @property
    def remaining(self) -> int | None:
        return None if self.budget is None else self.budget - self.images

    def can_answer(self, images: int) -> bool:
        return self.budget is None or self.images + images <= self.budget

    def __call__(self, images: Tensor):
        """The answer for B×3×H×W images: B×K probabilities (``scores``) or B labels (``labels``); a detector's B
        ``Detections``."""
        if self.is_detector:
            return self.detections(images)
        return self.scores(images) if self.answers == "scores" else self.query_labels(images)

    def detections(self, images: Tensor) -> list:
        """A detector's B ``Detections``: all it returns after NMS with their scores (``scores``), or those it makes
        at its operating threshold with every score 1 (``labels``)."""
        from physattack.victims.detection import Detections

        if not self.is_detector:
            raise QueryError(f"{self.name} is a classifier: it answers labels or scores, not detections.")
        out = []
        for d in self._ask(images).detections:
            d = Detections(d.boxes.detach(), d.scores.detach(), d.labels.detach())
            if self.answers == "labels":
                d = d.above(self.score_threshold)
                d = Detections(d.boxes, torch.ones_like(d.scores), d.labels)
            out.append(d)
        return out

    def scores(self, images: Tensor) -> Tensor:
        """B×K probabilities (detached); refused when the victim answers labels only."""
        if self.answers != "scores":
            raise QueryError(f"{self.name} answers labels only (attack.query.answers=labels): a decision-based "
                             "optimizer never sees a score.")
        return torch.softmax(self._ask(images).float(), -1)

    def query_labels(self, images: Tensor) -> Tensor:
        """B labels (the top class), detached."""
        return self._ask(images).argmax(-1)

    def _ask(self, images: Tensor) -> Tensor:
        if images.requires_grad:
            raise QueryError(f"{self.name} is reachable only through queries: it answers labels or scores, never a "
                             "gradient; detach the images (a gradient-free optimizer needs none).")
        if images.dim() != 4 or images.shape[1] != 3:
            raise QueryError(f"{self.name} answers batches of B×3×H×W images; got {tuple(images.shape)}.")
        n = int(images.shape[0])
        if not self.can_answer(n):
            raise BudgetSpent(f"{self.name}'s budget of {self.budget} images has {self.remaining} left, fewer than "
                              f"the {n} asked about")
        self.images += n
        with torch.no_grad():
            out = self._victim(images)
        return out if self.is_detector else out.detach()

    def parameters(self):
        raise QueryError(f"{self.name} is reachable only through queries: its weights are not given.")

    def __repr__(self) -> str:
        limit = "no budget" if self.budget is None else f"budget {self.budget}"
        return f"QueryVictim({self.name}, answers={self.answers}, {self.images} images asked, {limit})"


__all__ = ["ANSWERS", "BudgetSpent", "QueryError", "QueryVictim"]
