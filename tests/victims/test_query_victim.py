"""A victim seen only through queries: it counts every image exactly, answers labels or scores and nothing
else, refuses gradients and stops at its budget."""

from __future__ import annotations

import pytest
import torch

from physattack.victims.base import Classifier
from physattack.victims.detection import Detections, Detector, DetectorOutput
from physattack.victims.query import BudgetSpent, QueryError, QueryVictim


class Mean(Classifier):
    """Logits from the images' mean colour: stop when red, yield when blue."""

    labels = ("stop", "yield", "other")

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([[4.0, 0, 0], [0, 0, 4.0], [0, 1.0, 0]]))

    def logits(self, images):
        return images.mean((2, 3)) @ self.w.T


def test_counts_every_image_exactly_and_a_refused_batch_not_at_all():
    victim = QueryVictim(Mean(), "scores", budget=10)
    victim(torch.rand(3, 3, 8, 8))
    victim(torch.rand(4, 3, 8, 8))
    assert victim.images == 7 and victim.remaining == 3
    with pytest.raises(BudgetSpent):
        victim(torch.rand(4, 3, 8, 8))
    assert victim.images == 7
    victim(torch.rand(3, 3, 8, 8))
    assert victim.images == 10 and not victim.can_answer(1)


def test_scores_are_probabilities_without_a_graph():
    model = Mean()
    victim = QueryVictim(model, "scores")
    out = victim(torch.rand(5, 3, 8, 8))
    assert out.shape == (5, 3) and not out.requires_grad
    assert torch.allclose(out.sum(-1), torch.ones(5))
    assert all(p.grad is None for p in model.parameters())


def test_refuses_images_that_carry_a_gradient_and_gives_no_weights():
    victim = QueryVictim(Mean(), "scores")
    x = torch.rand(2, 3, 8, 8, requires_grad=True)
    with pytest.raises(QueryError, match="never a gradient"):
        victim(x)
    assert victim.images == 0
    with pytest.raises(QueryError, match="weights are not given"):
        victim.parameters()


def test_labels_only_never_shows_a_score():
    victim = QueryVictim(Mean(), "labels")
    red = torch.zeros(2, 3, 8, 8)
    red[:, 0] = 1
    out = victim(red)
    assert out.dtype == torch.long and out.tolist() == [0, 0]
    with pytest.raises(QueryError, match="labels only"):
        victim.scores(red)
    assert victim.images == 2


def test_one_classifier_only(signnet):
    from physattack.victims.ensemble import Ensemble

    with pytest.raises(QueryError, match="single classifier or detector"):
        QueryVictim(Ensemble([signnet, signnet], names=["a", "b"]), "scores")
    with pytest.raises(QueryError, match="scores or labels"):
        QueryVictim(Mean(), "logits")


class Redness(Detector):
    """One box over the whole image, labelled stop sign, scored by the image's mean red."""

    labels = ("stop sign",)
    score_threshold = 0.5

    def detect(self, images):
        score = images[:, 0].mean((1, 2))
        box = torch.tensor([[0.0, 0.0, images.shape[-1], images.shape[-2]]])
        dets = [Detections(box, s[None], torch.zeros(1, dtype=torch.long)) for s in score]
        return DetectorOutput(box.expand(len(images), 1, 4), score[:, None, None], torch.ones(len(images), 1, dtype=torch.bool),
                              dets, self.score_threshold)


def test_a_detector_answers_its_detections_with_scores_or_only_those_it_makes():
    images = torch.zeros(2, 3, 8, 8)
    images[0, 0], images[1, 0] = 0.8, 0.3
    scored = QueryVictim(Redness(), "scores", budget=4)
    out = scored(images)
    assert scored.is_detector and scored.score_threshold == 0.5 and scored.images == 2
    assert [round(float(d.scores[0]), 3) for d in out] == [0.8, 0.3] and not out[0].scores.requires_grad
    made = QueryVictim(Redness(), "labels")
    out = made(images)
    assert [len(d) for d in out] == [1, 0] and out[0].scores.tolist() == [1.0]     # no score leaks
    with pytest.raises(QueryError, match="never a gradient"):
        scored(images.requires_grad_(True))
    with pytest.raises(BudgetSpent):
        scored(torch.zeros(3, 3, 8, 8))
    assert scored.images == 2
