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


def test_wilson_interval_small_hand_computed_cases():
    # 1/4: p=0.25, z²=3.8415; centre=(0.25+0.4802)/1.9604=0.3725, half=1.96*sqrt(0.046875+0.0600)/1.9604=0.3268
    lo, hi = wilson_interval(1, 4)
    assert lo == pytest.approx(0.04559, abs=1e-4) and hi == pytest.approx(0.69936, abs=1e-4)
    lo, hi = wilson_interval(3, 3)
    assert lo == pytest.approx(0.43850, abs=1e-4) and hi == 1.0


def test_conditional_rate_with_label_sets_hand_computed():
    # an ImageNet-like victim: the true set is {3, 4}, the target set {7}
    clean = torch.tensor([3, 4, 4, 0, 3, 3])        # view 3 is clean-wrong
    adv = torch.tensor([7, 3, 7, 7, 5, 4])
    probs = torch.nn.functional.one_hot(adv, 8).float()
    m = classification_metrics(clean, adv, probs, true_label=[3, 4], target_label=[7])
    assert (m["clean_accuracy"]["count"], m["clean_accuracy"]["n"]) == (5, 6)
    assert (m["attack_success_rate"]["count"], m["attack_success_rate"]["n"]) == (2, 5)   # views 0, 2
    assert m["attack_success_rate"]["ci95"][0] == pytest.approx(wilson_interval(2, 5)[0])
    assert m["attack_success_rate_unconditional"]["count"] == 3
    assert m["attacked_accuracy"]["count"] == 2                                        # views 1, 5 stay in the set
    assert m["mean_target_confidence"] == pytest.approx(3 / 6)
    u = classification_metrics(clean, adv, probs, true_label=[3, 4], target_label=None)
    # untargeted: leaving the whole set; views 0, 2, 4 of the clean-correct five
    assert (u["attack_success_rate"]["count"], u["attack_success_rate"]["n"]) == (3, 5)
