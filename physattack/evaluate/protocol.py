"""The full held-out evaluation of one attack: protocol grid, natural-failure atlas, sanity flags,
the members table (the patch on the attacked and on held-out victims, ``evaluate/members.py``), the
placement-error table (the stickers stuck on a little off, ``evaluate/placement.py``), report. Run at
the end of every attack (``physattack.cli.attack``) and by ``python -m physattack.evaluate run_dir=<run>``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import torch

from physattack.errors import InputError
from physattack.evaluate.atlas import Atlas, AtlasDesign, build_atlas
from physattack.evaluate.grid import Comparison
from physattack.evaluate.heldout import HeldOutResult, heldout_metrics
from physattack.evaluate.heldout_report import ProtocolFindings, write_heldout_outputs
from physattack.evaluate.members import (ATTACKED, Member, check_members, classify_views, log_members,
                                         members_table)
from physattack.evaluate.metrics import in_label_set
from physattack.evaluate.placement import PlacementSettings, Scored, log_placement, placement_table
from physattack.evaluate.sanity import SanityThresholds, sanity_flags
from physattack.run_report import METRICS_FILE, read_report

log = logging.getLogger("physattack.evaluate")


@dataclass
class HeldOutSettings:
    """How the full held-out evaluation runs (``conf/evaluation/default.yaml``).

    Args:
        worst_views: views in each of the two worst-view galleries.
        atlas: build a natural-failure atlas of the clean object (or load ``atlas_path``, an
            ``atlas.json`` or a ``metrics.json`` holding one) to mark free successes.
        atlas_per_axis, atlas_pairs, atlas_per_pair, atlas_bins, atlas_pair_bins, atlas_max_accuracy,
            atlas_confidence: as in ``physattack.evaluate.atlas.build_atlas``.
        sanity: thresholds of the sanity flags.
        placement: the placement-error table (``physattack.evaluate.placement.PlacementSettings``).
    """

    worst_views: int = 8
    atlas: bool = True
    atlas_path: str | None = None
    atlas_per_axis: int = 24
    atlas_pairs: list[list[str]] = field(default_factory=list)
    atlas_per_pair: int = 32
    atlas_bins: int = 6
    atlas_pair_bins: int = 3
    atlas_max_accuracy: float = 0.5
    atlas_confidence: float = 0.5
    atlas_seed: int = 2000
    sanity: SanityThresholds = field(default_factory=SanityThresholds)
    placement: PlacementSettings = field(default_factory=PlacementSettings)

    def __post_init__(self) -> None:
        if not isinstance(self.sanity, SanityThresholds):      # a dict or DictConfig from the config
            self.sanity = SanityThresholds(**dict(self.sanity))
        if not isinstance(self.placement, PlacementSettings):
            node = dict(self.placement or {"enabled": False})
            known = PlacementSettings.__dataclass_fields__
            unknown = sorted(set(node) - set(known))
            if unknown:
                raise InputError(f"evaluation.settings.placement.{unknown[0]} is not a setting; the settings are "
                                 f"{', '.join(known)}.")
            self.placement = PlacementSettings(**node)


def load_atlas(path: str | Path) -> Atlas:
    """An atlas from ``atlas.json`` (``python -m physattack.atlas``) or a ``metrics.json`` holding one."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"No atlas at {path}; give evaluation.settings.atlas_path an atlas.json or metrics.json.")
    if path.name == METRICS_FILE:                       # a run's report: read as every report is
        report = read_report(path.parent)
        data = report.atlas if report is not None else None
    else:
        data = json.loads(path.read_text())
        data = data if isinstance(data, dict) and "regions" in data else None
    if not data:
        raise InputError(f"{path} holds no atlas; make one with `python -m physattack.atlas +scene=<scene>`.")
    return Atlas.from_dict(data)


@dataclass
class JudgedPatch:
    """What the protocol judges: the scene, the victim the attack used (an ensemble's mean, for an
    ensemble), the attacked texture as evaluated (printed, when the run prints), and the run's summary
    (scene, attack, ``target_label``, ``victim_names``: the head of the report). ``clean_texture``
    defaults to the scene's."""

    scene: object
    victim: object
    adv_texture: torch.Tensor
    summary: dict
    clean_texture: torch.Tensor | None = None

    @property
    def clean(self) -> torch.Tensor:
        return self.scene.texture if self.clean_texture is None else self.clean_texture

    @property
    def target(self) -> str | None:
        return self.summary.get("target_label")


@dataclass
class RunFacts:
    """Where the protocol writes its outputs (``out_dir``) and logs them (``tracker``), what it knows of the
    optimization (for the zero-gradient sanity flag), its batch size, and whether raised sanity flags
    are warned about (``quiet``: they are in the result either way)."""

    out_dir: Path
    tracker: object | None = None
    zero_grad_steps: int | None = None
    steps_done: int | None = None
    batch_size: int = 64
    quiet: bool = False


def evaluate_attack(protocol: HeldOutRun, judged: JudgedPatch, facts: RunFacts) -> dict:
    """Evaluate ``judged.adv_texture`` against the clean texture on ``protocol``'s grid and write the report.

    The grid is rendered once for the victim and every member of ``protocol.members`` (the attacked and
    the held-out victims, ``physattack.evaluate.members.tag_members``); their table goes under
    ``heldout["victims"]`` (``members.members_table``), into report.md and to the tracker. With
    ``settings.placement.enabled`` and a sticker patch the placement-error table is made for the
    attacked victims (``evaluate/placement.py``).

    Returns:
        the run report's sections ``{"heldout": ..., "sanity": [...], "atlas": ..., "placement": ... or
        None, "report": <report.md>}`` (the caller prints ``heldout_line`` — and
        ``members.members_line(heldout["victims"])`` when there are members, ``placement.placement_line``
        when there is a table — where a person reads it).
    """
    settings, members, batch_size = protocol.settings, protocol.members or {}, facts.batch_size
    scene, victim, target = judged.scene, judged.victim, judged.target
    cmp = Comparison(scene, judged.clean, judged.adv_texture, protocol.pipeline)
    true_set = victim.label_set(scene.class_name)
    target_set = victim.label_set(target) if target is not None else None
    if target_set is not None and set(target_set) & set(true_set):
        log.warning("the target %s shares labels %s with the true class's set; targeted success is then "
                    "indistinguishable from a correct reading", target, sorted(set(target_set) & set(true_set)))
    atlas_pipeline = protocol.atlas_pipeline or protocol.pipeline
    atlas = samples = probs = None
    if settings.atlas_path:
        atlas = load_atlas(settings.atlas_path)
    elif settings.atlas:
        design = AtlasDesign(per_axis=settings.atlas_per_axis, pairs=tuple(tuple(p) for p in settings.atlas_pairs),
                             per_pair=settings.atlas_per_pair, bins=settings.atlas_bins,
                             pair_bins=settings.atlas_pair_bins, max_accuracy=settings.atlas_max_accuracy,
                             confidence=settings.atlas_confidence, seed=settings.atlas_seed, batch_size=batch_size)
        atlas, samples, probs = build_atlas(scene, victim, atlas_pipeline, design, true_set=true_set)
    # One render of the grid for the run's victim and every member (evaluate/members.py).
    member_sets, member_skipped = check_members(members, scene.class_name, target)
    grid = protocol.grid
    params = grid.params()
    view_probs, visible = classify_views(scene, cmp.clean_texture, cmp.adv_texture, cmp.pipeline, params,
                                         [victim] + [members[n].victim for n in member_sets], batch_size)
    in_region = atlas.contains(params).cpu() if atlas is not None else torch.zeros(len(params), dtype=torch.bool)
    result = HeldOutResult(grid.conditions(), view_probs[0].clean, view_probs[0].attacked, visible, in_region,
                           tuple(true_set), tuple(target_set) if target_set is not None else None)
    heldout = heldout_metrics(result)
    if members:
        heldout["victims"] = members_table(dict(zip(member_sets, view_probs[1:])), members, member_sets,
                                           member_skipped, result.conditions)
    placement = None
    sticker_mask = sticker_mask_of(protocol.patch)
    if settings.placement.enabled and sticker_mask is not None:
        scored, head = _attacked(victim, result, members, member_sets, view_probs[1:])
        placement = placement_table(cmp, sticker_mask, params, scored, settings.placement, head)
    probe = cmp.pipeline(scene, cmp.clean_texture, params[torch.arange(min(8, len(grid)))]).images
    sanity = sanity_flags(victim=victim, probe_images=probe, patch_visible=result.patch_visible,
                          clean_correct=result.clean_correct, zero_grad_steps=facts.zero_grad_steps,
                          steps_done=facts.steps_done, thresholds=settings.sanity, warn=not facts.quiet)
    summary = {**judged.summary, "victim": judged.summary.get("victim", type(victim).__name__)}
    findings = ProtocolFindings(cmp, grid, victim, result, heldout, sanity, summary, (atlas, samples, probs),
                                atlas_pipeline, settings.worst_views, placement)
    paths, per_view = write_heldout_outputs(facts.out_dir, findings, facts.tracker)
    if facts.tracker is not None and members:
        log_members(facts.tracker, heldout["victims"])
    if facts.tracker is not None and placement is not None:
        log_placement(facts.tracker, placement)
    return {"heldout": {**heldout, "per_view": per_view}, "sanity": sanity,
            "atlas": atlas.to_dict() if atlas is not None else None, "placement": placement,
            "report": str(paths["report"])}


def _attacked(victim, result: HeldOutResult, members: dict[str, Member], member_sets: dict, member_probs: list
              ) -> tuple[dict[str, Scored], str | None]:
    """The victims the placement table scores — the attacked members, and the run's victim when it is
    none of them and no ensemble — and whose cell is the headline: the run's victim's, or for an
    ensemble None, which makes it the lowest member's (a car runs one model, not the members' mean)."""
    scored, head = {}, None
    for (name, sets), probs in zip(member_sets.items(), member_probs):
        if members[name].role != ATTACKED:
            continue
        clean, attacked = probs.clean.argmax(1), probs.attacked.argmax(1)
        hit = (in_label_set(attacked, sets.target_set) if sets.target_set is not None
               else ~in_label_set(attacked, sets.true_set))
        scored[name] = Scored(members[name].victim, sets.true_set, sets.target_set,
                              in_label_set(clean, sets.true_set), hit)
        if members[name].victim is victim:
            head = name
    if head is None and getattr(victim, "members", None) is not None and scored:
        return scored, None
    if head is None:
        head = "victim"
        scored = {head: Scored(victim, result.true_set, result.target_set, result.clean_correct, result.success),
                  **scored}
    return scored, head


def heldout_line(heldout: dict, victim_names: list[str] | None = None) -> str:
    """The protocol's rates in one console line, naming whose they are: the run's victim, or an
    ensemble's mean probability (``victim_names``: the attacked victims)."""
    names = list(victim_names or [])
    whose = (f", {names[0]}" if len(names) == 1 else
             f", the mean probability of {'+'.join(names)} (each member alone on the victims line)" if names else "")

    def pct(r):
        return f"{r['rate']:.1%} (95% CI {r['ci95'][0]:.1%}-{r['ci95'][1]:.1%}, {r['count']}/{r['n']})" if r["n"] else "n/a"
    free = heldout["free_successes"]
    return (f"held-out protocol ({heldout['views']} views){whose}: clean accuracy {pct(heldout['clean_accuracy'])}; "
            f"success over clean-correct views {pct(heldout['attack_success_rate'])}; over all views "
            f"{pct(heldout['attack_success_rate_unconditional'])}"
            + (f"; mean target confidence {heldout['mean_target_confidence']:.3f}" if "mean_target_confidence" in heldout else "")
            + f"; outside natural-failure regions {pct(free['attack_success_rate_outside_atlas'])}")


@dataclass
class HeldOutRun:
    """The parts of the held-out protocol an attack run hands over: its view pipeline(s), its grid, its
    settings, the victims of the members table (``{name: Member}``, attacked and held out; see
    ``physattack.evaluate.members``) and the attacked patch (its stickers' mask is read when it is
    evaluated). ``evaluate`` runs ``evaluate_attack`` on a finished attack."""

    pipeline: object
    grid: object
    settings: HeldOutSettings = field(default_factory=HeldOutSettings)
    atlas_pipeline: object | None = None
    members: dict[str, Member] = field(default_factory=dict)
    patch: object | None = None

    def evaluate(self, judged: JudgedPatch, facts: RunFacts) -> dict:
        return evaluate_attack(self, judged, facts)


def sticker_mask_of(patch) -> torch.Tensor | None:
    """A patch's sticker mask (1×Ht×Wt) when it is cut into stickers, else None (no placement table)."""
    return patch.mask if patch is not None and patch.cut_as_stickers else None
