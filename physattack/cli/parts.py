"""The parts of one attack run, built from its composed configuration (``attack_parts``).

The attack kind (``physattack.cli.kinds``) says how the views are framed and which held-out protocol
the run ends with; everything else is built the same way for every kind, with the builder's blocks
(``physattack.cli.build``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig

from physattack.cli import build
from physattack.cli.runs import Prior
from physattack.cli.kinds import AttackKind, ProtocolInputs, kind_for
from physattack.config import RunConfig
from physattack.errors import InputError
from physattack.eot import ViewPipeline


@dataclass
class AttackParts:
    """Everything one attack run is made of."""

    scene: object
    victim: object
    attack: object
    patch: object
    kind: AttackKind
    pipeline: object          # what the optimizer renders through (training backgrounds, printed patch)
    sampler: object
    eval_pipeline: object     # held-out backgrounds
    grid: object
    printer: tuple            # (palette K×3, colour model)
    export: object
    protocol: object | None   # the kind's held-out protocol (``AttackKind.protocol``), or None
    victim_names: list[str]   # what the attacked victim(s) are called in reports
    area: object | None = None    # the area frontier's settings (``evaluation.area``) when the run gets one
    init: tuple | None = None     # ``init=``: (the run, its Prior: the victims it and its chain attacked)
    guide: object | None = None   # ``init=``'s victim(s), built when a query attack keeps them (attack.query.keep)
    seen: object | None = None    # the stack detector's term of a classifier's windows (eot.sampler.seen)

    @property
    def palette(self) -> torch.Tensor:
        return self.printer[0]

    @property
    def colour_model(self):
        return self.printer[1]

    @property
    def members(self) -> dict | None:
        """The protocol's ``{name: Member}``, attacked and held out (the drive panel)."""
        return self.kind.members(self.protocol)


def attack_parts(cfg: DictConfig, run: RunConfig, device) -> AttackParts:
    """Build the parts of ``python -m physattack`` from its composed config; what the run cannot do
    (a label the victim lacks, a patch the attack cannot move) is refused here, before any step."""
    scene = build.scene(cfg, device)
    victim = build.victim(cfg.victim, device, run.channels_last)
    attack = build.make(cfg.attack)
    if attack.needs_true_label:
        victim.label_index(scene.class_name)
    attack.label(victim, scene)
    if getattr(victim, "members", None) is not None:
        attack.members_of(victim, scene)
    patch = build.make(cfg.patch, scene=scene).to(device)
    prior = start_from(run.init, cfg, patch, device) if run.init else Prior()
    attack.check_patch(patch, placed=bool(run.init))
    kind = kind_for(attack, victim)
    renderer = build.make(cfg.renderer)
    bank, eval_bank = build.make(cfg.eot.backgrounds), build.make(cfg.eot.eval_backgrounds)
    sampler = build.make(cfg.eot.sampler, background_count=len(bank), _convert_="all")
    grid = build.make(cfg.eot.grid, background_count=len(eval_bank), _convert_="all")
    sampler, grid, size = kind.views(sampler, grid, victim, (run.image_size, run.image_size))
    sampler = build.approach_framing(sampler, cfg, scene=scene, renderer=renderer, backgrounds=bank, device=device)
    attack.check_budget(sampler)
    palette, colour_model = build.printer(cfg, device)
    retro = build.print_retroreflects(cfg)
    pipeline = build.photographed(ViewPipeline(renderer, bank, size, print_retroreflects=retro), colour_model)
    eval_pipeline = build.photographed(ViewPipeline(renderer, eval_bank, size, print_retroreflects=retro), colour_model)
    seen = build.seen_term(sampler, attack, renderer=renderer, backgrounds=bank, colour_model=colour_model,
                           print_retroreflects=retro)
    names = build.victim_names(cfg, victim)
    protocol = None
    if cfg.get("evaluation") is not None and cfg.evaluation.enabled:
        protocol, names = kind.protocol(cfg, ProtocolInputs(victim, names, eval_pipeline, (renderer, eval_bank, size),
                                                            patch, device, prior.names))
    area = None
    if protocol is not None:
        area = build.make(cfg.evaluation.get("area") or {"_target_": "physattack.evaluate.area.AreaSettings"})
        area = area if area.wanted(patch) else None          # true for a paint patch is refused here
    query = getattr(attack, "query", None) if getattr(attack, "method", "gradient") == "query" else None
    guide = init_victims(run.init, device, run.channels_last) if query is not None and query.needs_members else None
    return AttackParts(scene, victim, attack, patch, kind, pipeline, sampler, eval_pipeline, grid,
                       (palette, colour_model), build.export_options(cfg), protocol, names, area,
                       (str(run.init), prior) if run.init else None, guide, seen)


def init_victims(init: str | None, device, channels_last: bool = False):
    """The victim(s) the ``init=`` run attacked, built as that run built them (its config.yaml), as an ensemble: a
    query attack's ``attack.query.keep`` differentiates through them, never through the victim asked."""
    from physattack.cli.runs import open_run
    from physattack.victims.ensemble import Ensemble

    if not init:
        raise InputError("attack.query.keep uses the gradients of the victims the init= run attacked; give "
                         "init=<a finished run>, or set attack.query.keep=0.")
    folder = open_run(init)
    if folder.queried:         # a query run's victim was asked, never differentiated: follow its chain to the
        first = folder.init.get("run")      # gradient run, whose victims the red team holds
        if not first:
            raise InputError(f"init={init} is a query run that started from no finished run, so no victim of its "
                             "was attacked by gradient; set attack.query.keep=0 or give init= a gradient run.")
        return init_victims(str(first), device, channels_last)
    node = folder.cfg.get("victim")
    if node is None:
        raise InputError(f"init={init} has no victim in its config.yaml, so attack.query.keep has no gradients to "
                         "follow; give init= a run of python -m physattack, or set attack.query.keep=0.")
    victim = build.victim(node, device, channels_last)
    if getattr(victim, "members", None) is None:           # one victim: named as the init run's report names it
        victim = Ensemble([victim], names=[(folder.victim_names or (str(node.get("name") or "victim"),))[0]])
    return victim


def start_from(init: str, cfg: DictConfig, patch, device) -> Prior:
    """Load the patch of the finished run ``init`` (``init=``) into ``patch``: the same scene and the same kind of
    patch, or one sentence naming the key. Returns what that run and the runs it started from attacked (by
    gradient or by queries), which this run reports as attacked, never as held out."""
    from physattack.cli.runs import load_patch, open_run

    folder = open_run(init)
    theirs, mine = (str((c.get("scene") or {}).get("name_or_path")) for c in (folder.cfg, cfg))
    if Path(theirs).name != Path(mine).name:
        raise InputError(f"init={init} is a run of the scene {theirs}, but this command's scene is {mine}; give init= "
                         f"a run of +scene={mine}.")
    if folder.cfg.patch.get("_target_") != cfg.patch.get("_target_"):
        raise InputError(f"init={init} holds a patch built by {folder.cfg.patch.get('_target_')}, but this command's "
                         f"patch is built by {cfg.patch.get('_target_')}; give init= a run of the same patch= (or "
                         "change patch= to the run's).")
    try:
        load_patch(patch, folder.path / "patch.pt", device)
    except InputError:
        raise InputError(f"init={init}'s patch does not fit this command's patch (another layout, area, texture size "
                         "or palette); give the run's own patch settings (its config.yaml) or another init=.") from None
    patch.anneal(1.0)
    return folder.as_prior


__all__ = ["AttackParts", "attack_parts"]
