"""A car's two-stage stack as one model (physattack/victims/stack.py): the detector's boxes, labelled by the
classifier on a square crop around each; boxes the detector does not make are never classified; through a
query door the labels-only answer is the classifier's majority label; gradients are refused in one sentence."""

from __future__ import annotations

import pytest
import torch

from physattack.victims.base import Classifier, VictimError
from physattack.victims.detection import Detections, Detector, DetectorOutput
from physattack.victims.query import QueryVictim
from physattack.victims.stack import StackVictim, square_crops


class TwoBoxes(Detector):
    """Two fixed boxes: the left half (score 0.9) and the right half (score 0.2, below the threshold 0.5)."""

    labels = ("sign",)
    score_threshold = 0.5
    input_size = 16

    def detect(self, images):
        boxes = torch.tensor([[0.0, 0.0, 8.0, 16.0], [8.0, 0.0, 16.0, 16.0]])
        dets = [Detections(boxes, torch.tensor([0.9, 0.2]), torch.zeros(2, dtype=torch.long)) for _ in images]
        return DetectorOutput(boxes.expand(len(images), 2, 4), torch.zeros(len(images), 2, 1),
                              torch.ones(len(images), 2, dtype=torch.bool), dets, self.score_threshold)


class Colour(Classifier):
    """stop when the crop is red, yield when it is blue; counts the crops it is shown."""

    labels = ("stop", "yield", "other")

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.tensor([[8.0, 0, 0], [0, 0, 8.0], [0, 1.0, 0]]))
        self.seen = 0

    def logits(self, images):
        self.seen += len(images)
        return images.mean((2, 3)) @ self.w.T


def frames():
    """Frame 0 red on the left, frame 1 blue on the left; both green on the right (never classified)."""
    x = torch.zeros(2, 3, 16, 16)
    x[0, 0, :, :8], x[1, 2, :, :8], x[:, 1, :, 8:] = 1.0, 1.0, 1.0
    return x


def test_the_stack_answers_the_detectors_boxes_with_the_classifiers_labels_and_probabilities():
    classifier = Colour()
    stack = StackVictim(TwoBoxes(), classifier, crop_frame=1.0, crop_px=8)
    out = stack(frames()).detections
    assert classifier.seen == 2                                   # the box below the detector's threshold is not read
    for d, want in zip(out, ("stop", "yield")):
        assert torch.equal(d.boxes, torch.tensor([[0.0, 0.0, 8.0, 16.0]]).expand(len(d), 4))
        best = int(d.labels[d.scores.argmax()])
        assert stack.labels[best] == want and float(d.scores.max()) > 0.9
        assert float(d.scores.sum()) == pytest.approx(1.0, abs=0.02)   # every class down to min_score, one box
    assert stack.label_index("stop") == 0 and stack.score_threshold == 0.5


def test_through_a_query_door_labels_only_are_the_classifiers_majority_label_and_gradients_are_refused():
    stack = StackVictim(TwoBoxes(), Colour(), crop_frame=1.0, crop_px=8)
    door = QueryVictim(stack, "labels", budget=4)
    out = door(frames())
    assert door.is_detector and door.images == 2
    assert [d.labels.tolist() for d in out] == [[0], [1]] and all(d.scores.tolist() == [1.0] for d in out)
    with pytest.raises(VictimError, match="answers through queries only"):
        stack(frames().requires_grad_(True))
    with pytest.raises(VictimError, match="victim.classifier must be one classifier"):
        StackVictim(TwoBoxes(), TwoBoxes())


def test_square_crops_centre_the_box_at_its_share_of_the_crop():
    image = torch.zeros(1, 3, 40, 40)
    image[:, :, 10:20, 10:20] = 1.0                              # a 10-px square at (10, 10)
    crop = square_crops(image, torch.tensor([[10.0, 10.0, 20.0, 20.0]]), crop_frame=0.5, crop_px=20)[0, 0]
    assert crop.shape == (20, 20)
    assert float(crop[5:15, 5:15].mean()) > 0.95 and float(crop[:4].mean()) < 0.05
