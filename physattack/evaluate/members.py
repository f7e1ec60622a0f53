"""Transfer in every report: the final patch on the attacked victims and on held-out victims.

A **held-out** victim is one the optimizer never called: its success is what a red team without the
car's weights can expect. After every attack the held-out protocol (``protocol.evaluate_attack``)
renders each grid batch once — clean and attacked — and hands the same images to every victim
(each resizes and normalizes for itself), so K victims cost one render of the grid, not K.

Per victim, with that victim's own label sets (``victim.label_set``) and RP2's rule: clean
accuracy, attack success over its clean-correct views, success over all views, attacked accuracy
(each a rate with a 95 % Wilson interval, ``physattack.evaluate.metrics``) and the mean target
confidence (a mean, so no Wilson interval). Targeted when the attack has a target, else untargeted.

A victim is **skipped**, with the reason recorded, when its labels lack the scene's class or the
target, when the target's label set overlaps the true class's (success would be indistinguishable
from a correct reading), or when it is a detector (classifier victims only, for now).

``members_table`` returns what ``metrics.json`` holds under ``heldout.victims``::

    {"members": {name: {"role", "mode", "true_label_set", "target_label_set", "views", "clean_accuracy",
                        "attack_success_rate", "attack_success_rate_unconditional", "attacked_accuracy",
                        ["mean_target_confidence"], "per_condition": {axis: [{"value", "views",
                        "clean_accuracy", "attack_success_rate", ...}]}}},
     "skipped": {name: {"role", "reason"}},
     "held_out_mean": {"mode", "victims", "attack_success_rate", "attack_success_rate_min",
                       "attack_success_rate_unconditional", "clean_accuracy"},
     "held_out_families": {"attacked_families", "families", "victims", "attack_success_rate",
                           "attack_success_rate_min", "clean_accuracy"},
     "held_out_other_data": {"data", "victims", "attack_success_rate", "attack_success_rate_min", "clean_accuracy"},
     "scope": "classifier victims only"}

``held_out_mean`` averages the per-victim rates over the held-out victims whose rate is defined
(each victim weighs the same, whatever its number of clean-correct views); None when there is none.

Each victim may carry its architecture **family** (``evaluation.families`` in the config: ``signnet``
and its seeds are ``vgg``, ``zoo_resnet10t`` is ``resnet``, ...). A held-out victim of a family that
an attacked victim shares (a sibling seed) says little about a model the attacker does not hold, so
``held_out_families`` averages only the held-out victims of families **no attacked victim belongs to**
— the number issue 14's goal is about; its rates are None when there is none.

Each victim may also carry the **data** it learned from (``evaluation.data``: ``render``, the default,
for this pipeline's renders, which every bundled victim but the ``warp_*`` ones learned from; ``warp``
for ``python -m physattack.train zoo source=warp``'s OpenCV warps onto photographs). Held-out victims
that learned from other data than the renders the attack optimizes through are their own group,
``held_out_other_data``, and left out of ``held_out_mean`` and ``held_out_families``: those two measure
transfer across models on shared data, this one across the image path too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from torch import Tensor

from physattack.errors import InputError
from physattack.evaluate.heldout import condition_rates
from physattack.evaluate.metrics import classification_metrics
from physattack.victims.base import VictimError

Role = Literal["attacked", "held-out"]
#: The data every victim learned from unless ``evaluation.data`` says otherwise: this pipeline's renders.
RENDER = "render"
ATTACKED: Role = "attacked"
HELD_OUT: Role = "held-out"
SCOPE = "classifier victims only"


@dataclass(frozen=True)
class Member:
    """A victim in the members table and its role: ``attacked`` (the optimizer called it) or
    ``held-out`` (the optimizer never called it)."""

    victim: object
    role: Role
    family: str | None = None
    data: str = RENDER

    def __post_init__(self) -> None:
        if self.role not in (ATTACKED, HELD_OUT):
            raise ValueError(f"a member's role is '{ATTACKED}' or '{HELD_OUT}', not {self.role!r}")


def tag_members(attacked: dict[str, object] | None = None, held_out: dict[str, object] | None = None,
                families: dict[str, str] | None = None, data: dict[str, str] | None = None) -> dict[str, Member]:
    """``{name: Member}`` from the attacked and the held-out victims (a name in both is an error);
    ``families`` maps a victim's name to its architecture family (a name not in it has none), ``data``
    to the data it learned from (a name not in it learned from the renders)."""
    attacked, held_out = attacked or {}, held_out or {}
    both = sorted(set(attacked) & set(held_out))
    if both:
        raise InputError(f"The victims {', '.join(both)} are listed both as attacked and as held out; a held-out "
                         "victim is one the optimizer never calls: remove it from one of the two lists.")
    families = {str(k): str(v) for k, v in (families or {}).items()}
    data = {str(k): str(v) for k, v in (data or {}).items()}
    return {**{n: Member(v, ATTACKED, families.get(n), data.get(n, RENDER)) for n, v in attacked.items()},
            **{n: Member(v, HELD_OUT, families.get(n), data.get(n, RENDER)) for n, v in held_out.items()}}


@dataclass(frozen=True)
class LabelSets:
    """How one victim is scored: its true label set and target label set (None: untargeted)."""

    true_set: tuple[int, ...]
    target_set: tuple[int, ...] | None

    @property
    def mode(self) -> str:
        return "untargeted" if self.target_set is None else "targeted"


def label_sets(victim, scene_class: str, target: str | None) -> LabelSets | str:
    """The victim's label sets for this attack, or the reason it cannot be scored (a sentence)."""
    if getattr(victim, "is_detector", False):
        return f"a detector; the members table covers {SCOPE}"
    try:
        true_set = tuple(victim.label_set(scene_class))
    except VictimError:
        return f"its labels lack the scene's class '{scene_class}'"
    if target is None:
        return LabelSets(true_set, None)
    try:
        target_set = tuple(victim.label_set(target))
    except VictimError:
        return f"its labels lack the target '{target}'"
    if set(target_set) & set(true_set):
        return f"its label set for the target '{target}' overlaps that of '{scene_class}'"
    return LabelSets(true_set, target_set)


@dataclass
class ViewProbs:
    """One victim's softmax on every grid view. Shape: clean, attacked: V×K (CPU)."""

    clean: Tensor
    attacked: Tensor


@torch.no_grad()
def classify_views(scene, clean_texture: Tensor, adv_texture: Tensor, pipeline, params, victims: Sequence,
                   batch_size: int = 64) -> tuple[list[ViewProbs], Tensor]:
    """Render each batch of ``params`` once with the clean and once with the attacked texture and
    classify both with every victim (a victim object listed twice runs once).

    Returns:
        one ``ViewProbs`` per victim, in order, and the share of each view's pixels the patch
        visibly changes (V).
    """
    unique = {id(v): v for v in victims}
    clean_p: dict[int, list[Tensor]] = {k: [] for k in unique}
    adv_p: dict[int, list[Tensor]] = {k: [] for k in unique}
    visible = []
    for s in range(0, len(params), batch_size):
        p = params[s:s + batch_size]
        clean = pipeline(scene, clean_texture, p).images
        adv = pipeline(scene, adv_texture, p).images
        for k, victim in unique.items():          # one after another: peak memory stays near one victim's
            dev = _device(victim, clean.device)
            clean_p[k].append(torch.softmax(victim(clean.to(dev)).float(), 1).cpu())
            adv_p[k].append(torch.softmax(victim(adv.to(dev)).float(), 1).cpu())
        visible.append(((clean - adv).abs().amax(1) > 2 / 255).float().mean((1, 2)).cpu())
    probs = {k: ViewProbs(torch.cat(clean_p[k]), torch.cat(adv_p[k])) for k in unique}
    return [probs[id(v)] for v in victims], torch.cat(visible)


def _device(victim, default: torch.device) -> torch.device:
    try:
        return next(victim.parameters()).device
    except (StopIteration, AttributeError):
        return default


def member_rates(probs: ViewProbs, sets: LabelSets) -> dict:
    """One victim's rates over the grid (``classification_metrics``: RP2's rule, Wilson intervals)."""
    target = list(sets.target_set) if sets.target_set is not None else None
    m = classification_metrics(probs.clean.argmax(1), probs.attacked.argmax(1), probs.attacked, list(sets.true_set),
                               target)
    return {"mode": sets.mode, "true_label_set": list(sets.true_set), "target_label_set": target, **m}


def member_conditions(probs: ViewProbs, sets: LabelSets, conditions: list[dict]) -> dict[str, list[dict]]:
    """One victim's rates per value of every grid axis with more than one value (``conditions``: the
    grid's, in view order), as the run's own victim gets them (``heldout.condition_rates``)."""
    return condition_rates(conditions, probs.clean, probs.attacked, sets.true_set, sets.target_set)


def members_table(probs: dict[str, ViewProbs], members: dict[str, Member], sets: dict[str, LabelSets],
                  skipped: dict[str, str], conditions: list[dict] | None = None) -> dict:
    """The ``heldout.victims`` entry of ``metrics.json`` (see the module docstring); with the grid's
    ``conditions`` (view order) each victim also gets its ``per_condition`` rates."""
    rows = {name: {"role": members[name].role, "family": members[name].family, "data": members[name].data,
                   **member_rates(probs[name], sets[name]),
                   **({"per_condition": member_conditions(probs[name], sets[name], conditions)}
                      if conditions is not None else {})} for name in sets}
    held = [n for n, r in rows.items() if r["role"] == HELD_OUT]
    attacked_families = sorted({m.family for m in members.values() if m.role == ATTACKED and m.family})
    defined, other = held_out_selection(rows, attacked_families)
    other_data = other_data_selection(rows)

    def mean(names, key):
        return sum(rows[n][key]["rate"] for n in names) / len(names) if names else None

    modes = sorted({rows[n]["mode"] for n in held})
    return {
        "members": rows,
        "skipped": {name: {"role": members[name].role, "reason": reason} for name, reason in skipped.items()},
        "held_out_mean": {
            "mode": modes[0] if len(modes) == 1 else None,
            "victims": defined,
            "attack_success_rate": mean(defined, "attack_success_rate"),
            "attack_success_rate_min": min((rows[n]["attack_success_rate"]["rate"] for n in defined), default=None),
            "attack_success_rate_unconditional": mean(held, "attack_success_rate_unconditional"),
            "clean_accuracy": mean(held, "clean_accuracy"),
        },
        "held_out_families": {
            "attacked_families": attacked_families,
            "families": sorted({rows[n]["family"] for n in other}),
            "victims": other,
            "attack_success_rate": mean(other, "attack_success_rate"),
            "attack_success_rate_min": min((rows[n]["attack_success_rate"]["rate"] for n in other), default=None),
            "clean_accuracy": mean(other, "clean_accuracy"),
        },
        "held_out_other_data": {
            "data": sorted({rows[n]["data"] for n in other_data}),
            "victims": other_data,
            "attack_success_rate": mean(other_data, "attack_success_rate"),
            "attack_success_rate_min": min((rows[n]["attack_success_rate"]["rate"] for n in other_data), default=None),
            "clean_accuracy": mean(other_data, "clean_accuracy"),
        },
        "scope": SCOPE,
    }


def held_out_selection(rows: dict[str, dict], attacked_families: Sequence[str], key: str = "attack_success_rate"
                       ) -> tuple[list[str], list[str]]:
    """Which rows (name -> ``{"role", "family", "data", key: rate}``) the held-out means average: the
    held-out ones that learned from the renders and whose ``key`` rate is defined, and those of them of a
    family no attacked victim belongs to (``other_data_selection`` gives the rest)."""
    defined = [n for n, r in rows.items() if r["role"] == HELD_OUT and key in r and r[key]["n"]
               and r.get("data", RENDER) == RENDER]
    return defined, [n for n in defined if rows[n]["family"] and rows[n]["family"] not in attacked_families]


def other_data_selection(rows: dict[str, dict], key: str = "attack_success_rate") -> list[str]:
    """The held-out rows whose ``key`` rate is defined and that learned from other data than the renders."""
    return [n for n, r in rows.items() if r["role"] == HELD_OUT and key in r and r[key]["n"]
            and r.get("data", RENDER) != RENDER]


def other_data_phrase(group: dict, what: str = "read it", of: str = "") -> str:
    """The held-out victims trained on other data, in words (empty when none was scored), e.g. ``; the 2
    trained on other images (warp: no render of this pipeline) read it 12.0% (lowest 8.0%)``."""
    if not group or group.get("attack_success_rate") is None:
        return ""
    k = len(group["victims"])
    low = f" (lowest {group['attack_success_rate_min']:.1%})" if group.get("attack_success_rate_min") is not None else ""
    return (f"; the {k} trained on other images ({', '.join(group['data'])}: no render of this pipeline) {what} "
            f"{group['attack_success_rate']:.1%}{of}{low}")


def check_members(members: dict[str, Member], scene_class: str, target: str | None
                  ) -> tuple[dict[str, LabelSets], dict[str, str]]:
    """Each member's label sets, and the members that cannot be scored with their reasons."""
    sets, skipped = {}, {}
    for name, member in members.items():
        s = label_sets(member.victim, scene_class, target)
        if isinstance(s, str):
            skipped[name] = s
        else:
            sets[name] = s
    return sets, skipped


# -- what people read ---------------------------------------------------------------------------------

def _short(r: dict) -> str:
    if not r["n"]:
        return "n/a"
    return f"{r['rate']:.1%} [{r['ci95'][0]:.0%}-{r['ci95'][1]:.0%}]"


def members_line(table: dict) -> str:
    """The members table in one console line, e.g. ``victims (success over clean-correct views, 95 % CI):
    attacked signnet 99.2% [98%-100%]; held-out (never called by the optimizer) signnet_seed1 8.0% [5%-12%];
    held-out mean 8.0%``."""
    rows = table["members"]
    parts = []
    for role, head in ((ATTACKED, "attacked"), (HELD_OUT, "held-out (never called by the optimizer)")):
        names = [n for n, r in rows.items() if r["role"] == role]
        if names:
            parts.append(f"{head} " + ", ".join(f"{n} {_short(rows[n]['attack_success_rate'])}" for n in names))
    mean = table["held_out_mean"]
    if mean["attack_success_rate"] is not None:
        k = len(mean["victims"])
        parts.append(f"held-out mean {mean['attack_success_rate']:.1%} (min {mean['attack_success_rate_min']:.1%}, "
                     f"{k} victim{'' if k == 1 else 's'})")
    fam = table.get("held_out_families") or {}
    if fam.get("attack_success_rate") is not None:
        parts.append(f"held-out families ({', '.join(fam['families'])}; attacked: "
                     f"{', '.join(fam['attacked_families']) or 'none known'}) mean {fam['attack_success_rate']:.1%} "
                     f"(min {fam['attack_success_rate_min']:.1%}, {len(fam['victims'])} victims)")
    other = table.get("held_out_other_data") or {}
    if other.get("attack_success_rate") is not None:
        parts.append(f"held-out, trained on other images ({', '.join(other['data'])}) mean "
                     f"{other['attack_success_rate']:.1%} (min {other['attack_success_rate_min']:.1%}, "
                     f"{len(other['victims'])} victims)")
    if table["skipped"]:
        parts.append("skipped " + ", ".join(f"{n} ({s['reason']})" for n, s in table["skipped"].items()))
    return "victims (success over clean-correct views, 95% CI): " + ("; ".join(parts) or "none")


def headline_figures(victim_names: Sequence[str], heldout: dict | None = None, grid: dict | None = None) -> dict:
    """What a classifier run's headline quotes, and which victims the patch was and was not fitted to.

    The success and clean accuracy are the held-out protocol's when it ran (``heldout``: ``metrics.json``'s
    ``heldout``), else the quick grid's (``grid``: the top level of ``metrics.json``). For an ensemble
    they are its **lowest attacked member's**, each member scored with its own label sets: the success
    of the members' mean probability, which the protocol's own table reads, is a figure no model the
    patch will meet computes. The held-out figures are ``held_out_mean`` and ``held_out_families`` of
    the members table (None where no held-out victim was scored).

    Returns:
        ``{"fitted_to", "quoted", "source", "views", "success", "clean_accuracy", "members",
        "not_fitted_to", "held_out_scored", "held_out_mean", "held_out_min", "held_out_families"}``:
        ``quoted`` names the victim whose rates are quoted (``"mean probability"`` for an ensemble
        without a members table), ``members`` maps each attacked member to its success rate
        (ensembles only).
    """
    names = [str(n) for n in victim_names]
    source = heldout if heldout is not None else (grid or {})
    table = (heldout or {}).get("victims") or {}
    rows = table.get("members") or {}
    quoted = names[0] if len(names) == 1 else "mean probability"
    success, clean = source.get("attack_success_rate"), source.get("clean_accuracy")
    members = {}
    if len(names) > 1:
        attacked = [n for n in names if rows.get(n, {}).get("role") == ATTACKED]
        members = {n: rows[n]["attack_success_rate"]["rate"] if rows[n]["attack_success_rate"]["n"] else None
                   for n in attacked}
        if attacked:       # undefined (no clean-correct view) counts as the lowest
            quoted = min(attacked, key=lambda n: -1.0 if members[n] is None else members[n])
            success, clean = rows[quoted]["attack_success_rate"], rows[quoted]["clean_accuracy"]
    mean, fam = table.get("held_out_mean") or {}, table.get("held_out_families") or {}
    return {
        "fitted_to": names, "quoted": quoted,
        "source": "held-out protocol" if heldout is not None else "grid",
        "views": (clean or {}).get("n"), "success": success, "clean_accuracy": clean, "members": members,
        "not_fitted_to": [n for n, r in rows.items() if r["role"] == HELD_OUT],
        "held_out_scored": list(mean.get("victims") or []),
        "held_out_mean": mean.get("attack_success_rate"), "held_out_min": mean.get("attack_success_rate_min"),
        "held_out_families": {"mean": fam.get("attack_success_rate"), "min": fam.get("attack_success_rate_min"),
                              "victims": list(fam.get("victims") or []), "families": list(fam.get("families") or [])},
        "held_out_other_data": table.get("held_out_other_data") or {},
    }


def fitted_phrase(fig: dict) -> str:
    """Which victims ``headline_figures``' numbers were fitted to, e.g. ``fitted to signnet`` or
    ``fitted to signnet+zoo_resnet10t+zoo_convnext_atto (members 100.0/100.0/83.3%; the lowest,
    zoo_convnext_atto, is quoted)``."""
    names = fig["fitted_to"]
    if len(names) <= 1:
        return f"fitted to {names[0]}" if names else "fitted to the run's victim"
    if not fig["members"]:
        return f"fitted to {'+'.join(names)} (the success of their mean probability; no member scored alone)"
    rates = "/".join("n/a" if r is None else f"{r:.1%}".rstrip("%") for r in fig["members"].values())
    return f"fitted to {'+'.join(names)} (members {rates}%; the lowest, {fig['quoted']}, is quoted)"


def not_fitted_phrase(fig: dict) -> str:
    """How the patch does on the victims ``headline_figures``' numbers were not fitted to, in words."""
    if fig["held_out_mean"] is None:
        return ("not fitted to: no held-out victim scored, so this is a white-box figure only "
                "(name held-out victims in evaluation.victims)")
    k = len(fig["held_out_scored"])
    text = (f"not fitted to: {k} held-out victim{'' if k == 1 else 's'} read it {fig['held_out_mean']:.1%} on "
            f"average (lowest {fig['held_out_min']:.1%})")
    fam = fig["held_out_families"]
    if fam["mean"] is not None:
        n = len(fam["victims"])
        text += (f", the {n} of families it never saw ({', '.join(fam['families'])}) {fam['mean']:.1%} "
                 f"(lowest {fam['min']:.1%})")
    return text + other_data_phrase(fig.get("held_out_other_data") or {})


def per_condition_rows(table: dict, keys: Sequence[str]) -> list[list]:
    """``[name, role, axis, value, views, *rates of keys]`` for every per-condition row of a members
    (or detectors) table, for a tracker's table. Values as text: an axis holds numbers or preset names,
    and a W&B table column holds one type."""
    return [[n, r["role"], axis, str(row["value"]), row["views"], *(row[k]["rate"] for k in keys)]
            for n, r in table["members"].items() for axis, rows in (r.get("per_condition") or {}).items()
            for row in rows]


def log_members(tracker, table: dict) -> None:
    """The members table to the tracker: ``heldout/victims`` and ``heldout/victims_per_condition`` tables
    and ``heldout/<name>/...`` summaries."""
    columns = ["victim", "role", "family", "data", "mode", "clean_accuracy", "attack_success_rate", "attack_success_rate_ci_low",
               "attack_success_rate_ci_high", "attack_success_rate_unconditional", "mean_target_confidence"]
    rows = [[n, r["role"], r.get("family"), r.get("data", RENDER), r["mode"], r["clean_accuracy"]["rate"], r["attack_success_rate"]["rate"],
             r["attack_success_rate"]["ci95"][0], r["attack_success_rate"]["ci95"][1],
             r["attack_success_rate_unconditional"]["rate"], r.get("mean_target_confidence")]
            for n, r in table["members"].items()]
    tracker.log_table("heldout/victims", columns, rows)
    by_condition = per_condition_rows(table, ("clean_accuracy", "attack_success_rate"))
    if by_condition:
        tracker.log_table("heldout/victims_per_condition", ["victim", "role", "axis", "value", "views",
                                                            "clean_accuracy", "attack_success_rate"], by_condition)
    flat = {}
    for n, r in table["members"].items():
        for key in ("clean_accuracy", "attack_success_rate", "attack_success_rate_unconditional"):
            flat[f"heldout/{n}/{key}"] = r[key]["rate"]
    mean = table["held_out_mean"]
    if mean["attack_success_rate"] is not None:
        flat["heldout/held_out_mean_attack_success_rate"] = mean["attack_success_rate"]
        flat["heldout/held_out_min_attack_success_rate"] = mean["attack_success_rate_min"]
    fam = table.get("held_out_families") or {}
    if fam.get("attack_success_rate") is not None:
        flat["heldout/held_out_families_mean_attack_success_rate"] = fam["attack_success_rate"]
        flat["heldout/held_out_families_min_attack_success_rate"] = fam["attack_success_rate_min"]
    other = table.get("held_out_other_data") or {}
    if other.get("attack_success_rate") is not None:
        flat["heldout/held_out_other_data_mean_attack_success_rate"] = other["attack_success_rate"]
        flat["heldout/held_out_other_data_min_attack_success_rate"] = other["attack_success_rate_min"]
    tracker.summary(flat)
