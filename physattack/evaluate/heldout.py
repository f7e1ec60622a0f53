"""The held-out protocol: the clean and the attacked object through a configurable grid of views.

The grid (``physattack.eot.EvalGrid``: azimuth × elevation × distance × lighting presets × camera
effects × backgrounds, seeded apart from training) is never what the optimizer sampled. Per view the
victim reads the clean and the attacked render; from that come

- **clean accuracy**: the clean view lands in the true label set;
- **attack success** (targeted: the attacked view lands in the target set; untargeted: it leaves the
  true set) over the views whose clean render was correct (RP2's protocol), and the same over all
  views (unconditional);
- **mean target confidence**; a 95 % Wilson interval for every rate;
- the same per value of every grid axis (per-condition tables);
- **free successes**: successes on views the victim gets wrong without any patch, or whose
  conditions lie in a natural-failure region of the atlas (``physattack.evaluate.atlas``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from torch import Tensor

from physattack.evaluate.grid import Comparison, classify_clean_and_attacked
from physattack.evaluate.metrics import classification_metrics, in_label_set, rate

#: Grid axes a per-condition table is made for (those with more than one value).
AXES = ("azimuth_deg", "elevation_deg", "distance_m", "lighting", "effects", "background")


@dataclass
class HeldOutResult:
    """Per-view outcomes, in ``grid.conditions()`` order.

    Shape:
        clean_probs, adv_probs: V×K softmax of the victim's outputs. patch_visible: V share of each
        view's pixels that the patch changed. in_atlas_region: V bool (all False without an atlas).
    """

    conditions: list[dict]
    clean_probs: Tensor
    adv_probs: Tensor
    patch_visible: Tensor
    in_atlas_region: Tensor
    true_set: tuple[int, ...]
    target_set: tuple[int, ...] | None

    @property
    def clean_pred(self) -> Tensor:
        return self.clean_probs.argmax(1)

    @property
    def adv_pred(self) -> Tensor:
        return self.adv_probs.argmax(1)

    @property
    def clean_correct(self) -> Tensor:
        return in_label_set(self.clean_pred, self.true_set)

    @property
    def success(self) -> Tensor:
        """Per view: the attacked render reads as the target set (targeted) or outside the true set."""
        if self.target_set is not None:
            return in_label_set(self.adv_pred, self.target_set)
        return ~in_label_set(self.adv_pred, self.true_set)

    @property
    def target_confidence(self) -> Tensor | None:
        return None if self.target_set is None else self.adv_probs[:, list(self.target_set)].sum(1)

    @property
    def true_confidence_attacked(self) -> Tensor:
        return self.adv_probs[:, list(self.true_set)].sum(1)


@torch.no_grad()
def evaluate_heldout(cmp: Comparison, victim, grid, label_sets: tuple[Sequence[int], Sequence[int] | None],
                     batch_size: int = 64, region_mask=None) -> HeldOutResult:
    """Classify every grid view with the clean and the attacked texture.

    Args:
        cmp: the scene, both textures and the held-out view pipeline.
        label_sets: the true class's and the target's label indices (a victim's ``label_set``); the
            target's None = untargeted.
        region_mask: optional ``SceneParams -> V bool``, True where the view's conditions lie in a
            natural-failure region (``Atlas.contains``).
    """
    true_set, target_set = label_sets
    params = grid.params()
    clean_probs, adv_probs, visible = classify_clean_and_attacked(cmp, victim, params, batch_size)
    in_region = region_mask(params).cpu() if region_mask is not None else torch.zeros(len(params), dtype=torch.bool)
    return HeldOutResult(grid.conditions(), clean_probs, adv_probs, visible, in_region,
                         tuple(true_set), tuple(target_set) if target_set is not None else None)


def _rates(result: HeldOutResult, keep: Tensor) -> dict:
    """Overall rates over the views in ``keep``."""
    return classification_metrics(result.clean_pred[keep], result.adv_pred[keep], result.adv_probs[keep],
                                  list(result.true_set), list(result.target_set) if result.target_set else None)


def condition_masks(conditions: list[dict]) -> dict[str, list[tuple[object, Tensor]]]:
    """For every grid axis with more than one value among ``conditions`` (a grid's, in view order):
    each value, in order, with the V-bool mask of its views."""
    masks = {}
    for axis in AXES:
        values = sorted({c[axis] for c in conditions if axis in c}, key=_sort_key)
        if len(values) >= 2:
            masks[axis] = [(v, torch.tensor([c.get(axis) == v for c in conditions])) for v in values]
    return masks


def per_condition_tables(result: HeldOutResult) -> dict[str, list[dict]]:
    """For every grid axis with more than one value: one row per value with its rates."""
    return condition_rates(result.conditions, result.clean_probs, result.adv_probs, result.true_set,
                           result.target_set)


def condition_rates(conditions: list[dict], clean_probs: Tensor, adv_probs: Tensor, true_set: Sequence[int],
                    target_set: Sequence[int] | None) -> dict[str, list[dict]]:
    """One victim's rates per value of every grid axis with more than one value: ``{axis: [{"value",
    "views", "clean_accuracy", "attack_success_rate", "attack_success_rate_unconditional",
    ["mean_target_confidence"]}]}``. ``clean_probs``, ``adv_probs``: V×K, in ``conditions``' order."""
    clean_pred, adv_pred = clean_probs.argmax(1), adv_probs.argmax(1)
    target = list(target_set) if target_set else None
    tables = {}
    for axis, groups in condition_masks(conditions).items():
        rows = []
        for v, keep in groups:
            m = classification_metrics(clean_pred[keep], adv_pred[keep], adv_probs[keep], list(true_set), target)
            rows.append({"value": v, "views": m["views"], "clean_accuracy": m["clean_accuracy"],
                         "attack_success_rate": m["attack_success_rate"],
                         "attack_success_rate_unconditional": m["attack_success_rate_unconditional"],
                         **({"mean_target_confidence": m["mean_target_confidence"]}
                            if "mean_target_confidence" in m else {})})
        tables[axis] = rows
    return tables


def _sort_key(v):
    return (0, v, "") if isinstance(v, (int, float)) else (1, 0, str(v))


def free_successes(result: HeldOutResult) -> dict:
    """Which successes the patch did not have to earn.

    ``clean_wrong``: successes on views the clean sign already got wrong (they count only in the
    unconditional rate). ``atlas_region``: successes on clean-correct views whose conditions lie in
    a natural-failure region, where the victim fails often without a patch.
    ``attack_success_rate_outside_atlas``: the conditional rate over clean-correct views outside
    every atlas region — the rate no natural failure can explain.
    """
    hit, ok, region = result.success, result.clean_correct, result.in_atlas_region
    free_clean = hit & ~ok
    free_region = hit & ok & region
    return {
        "successes": int(hit.sum()),
        "free_clean_wrong": int(free_clean.sum()),
        "free_atlas_region": int(free_region.sum()),
        "free_share_of_successes": rate((free_clean | free_region)[hit]),
        "views_in_atlas_regions": int(region.sum()),
        "attack_success_rate_outside_atlas": rate(hit[ok & ~region]),
    }


def heldout_metrics(result: HeldOutResult) -> dict:
    """Everything the held-out protocol reports, ready for ``metrics.json``."""
    m = _rates(result, torch.ones(len(result.conditions), dtype=torch.bool))
    return {**m, "per_condition": per_condition_tables(result), "free_successes": free_successes(result),
            "true_label_set": list(result.true_set),
            "target_label_set": list(result.target_set) if result.target_set is not None else None,
            "grid_axes": {axis: sorted({c[axis] for c in result.conditions if axis in c}, key=_sort_key)
                          for axis in AXES}}


def worst_views(result: HeldOutResult, k: int) -> dict[str, list[int]]:
    """Indices of two galleries: ``victim`` — the clean-correct views where the attacked render's
    true-set confidence is lowest (where the patch hurts most); ``attack`` — the clean-correct views
    where the attack is weakest (lowest target confidence, or highest true-set confidence)."""
    ok = torch.nonzero(result.clean_correct).flatten()
    if len(ok) == 0 or k <= 0:
        return {"victim": [], "attack": []}
    true_conf = result.true_confidence_attacked[ok]
    attack_score = result.target_confidence[ok] if result.target_set is not None else 1 - true_conf
    k = min(k, len(ok))
    return {"victim": ok[true_conf.argsort()[:k]].tolist(), "attack": ok[attack_score.argsort()[:k]].tolist()}
