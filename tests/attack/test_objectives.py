"""The classifier objectives' losses: what each asks of the logits, and that they are wired by name."""

import pytest
import torch

from physattack.attack.objectives import DETECTOR_OBJECTIVES, OBJECTIVES, targeted_logit, targeted_margin


def test_the_margin_loss_is_the_best_other_logit_minus_the_targets_floored():
    logits = torch.tensor([[3.0, 1.0, 0.0], [0.0, 30.0, 1.0], [2.0, 2.5, 1.0]])
    loss = targeted_margin(logits, target=1, margin=10.0)
    assert loss.tolist() == pytest.approx([2.0, -10.0, -0.5])    # not yet fooled, floored, barely fooled
    logits.requires_grad_()
    targeted_margin(logits, 1)[1].backward()
    assert logits.grad[1].abs().sum() == 0                        # a confidently fooled view stops pulling


def test_the_logit_loss_keeps_pushing_after_the_surrogate_is_fooled():
    logits = torch.tensor([[0.0, 40.0, 1.0]], requires_grad=True)
    targeted_logit(logits, 1).sum().backward()
    assert logits.grad.tolist() == [[0.0, -1.0, 0.0]]
    ce = torch.nn.functional.cross_entropy(logits, torch.tensor([1]))
    assert ce.item() < 1e-12                                       # where cross-entropy has given up


@pytest.mark.parametrize("name", ["targeted_margin", "targeted_logit"])
def test_the_transfer_objectives_are_targeted_and_mean_mislabel_to_a_detector(name):
    assert OBJECTIVES[name].targeted
    assert DETECTOR_OBJECTIVES[name] is OBJECTIVES["mislabel"]
    out = torch.tensor([[0.0, 5.0], [5.0, 0.0]])
    assert OBJECTIVES[name].success(out, 1, None).tolist() == [True, False]


def test_a_classifier_attack_takes_the_transfer_objectives_and_refuses_the_detector_only_ones():
    from physattack.attack import AttackError, EOTAttack
    from physattack.victims import Classifier

    class Tiny(Classifier):
        labels = ("stop", "yield")

    for name in ("targeted_margin", "targeted_logit"):
        assert EOTAttack(objective=name, target="yield").objective_for(Tiny()) is OBJECTIVES[name]
    with pytest.raises(AttackError, match="needs a detector victim"):
        EOTAttack(objective="hide", target=None).objective_for(Tiny())
