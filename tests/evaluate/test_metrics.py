import pytest
import torch

from physattack.evaluate.metrics import classification_metrics, wilson_interval


def test_wilson_interval_matches_hand_computed_values():
    lo, hi = wilson_interval(5, 10)
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(0.1611, abs=1e-4)
    lo, hi = wilson_interval(20, 20)
    assert lo == pytest.approx(0.8389, abs=1e-4) and hi == 1.0
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_targeted_success_counts_only_clean_correct_views():
    clean = torch.tensor([0, 0, 2, 0, 0])
    adv = torch.tensor([1, 1, 1, 0, 2])
    probs = torch.nn.functional.one_hot(adv, 3).float()
    m = classification_metrics(clean, adv, probs, true_label=0, target_label=1)
    assert m["clean_accuracy"]["count"] == 4 and m["clean_accuracy"]["n"] == 5
    # views 0, 1, 3, 4 were clean-correct; of those 0 and 1 read as the target
    assert m["attack_success_rate"]["count"] == 2 and m["attack_success_rate"]["n"] == 4
    assert m["attack_success_rate_unconditional"]["count"] == 3
    assert m["mean_target_confidence"] == pytest.approx(3 / 5)


def test_untargeted_success_means_leaving_the_true_label():
    clean = torch.tensor([0, 0, 0])
    adv = torch.tensor([0, 2, 1])
    m = classification_metrics(clean, adv, torch.ones(3, 3) / 3, true_label=0, target_label=None)
    assert m["attack_success_rate"]["rate"] == pytest.approx(2 / 3)
    assert "mean_target_confidence" not in m
