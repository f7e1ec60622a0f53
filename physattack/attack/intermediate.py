"""Intermediate-level attack (ILA; Huang et al., "Enhancing Adversarial Example Transferability with an
Intermediate Level Attack", ICCV 2019): refine a finished patch by pushing a surrogate's mid-layer features
further along the direction that patch already moved them.

For each view, with ``f`` a member's features at its named layer, ``f0`` those of the clean sign and ``fg`` those
of the guide (the ``init=`` run's patch, frozen) under the same draw, the term is ``-<f - f0, g> / |g|²`` with
``g = fg - f0``: minus the projection of the features' change onto the guide's, in units of the guide's own
(1 at the guide). Huang et al. found that the direction a transferable attack moves a mid layer in is shared by
other models more than its logits are. The term is added, weighted, to each member's objective
(``attack.ila.weight``; 0: off), so the members stay fooled while the features move further.
"""

from __future__ import annotations

import copy
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

import torch
from torch import Tensor, nn

from physattack.attack.errors import AttackError


@dataclass(frozen=True)
class IntermediateLevel:
    """ILA's settings: ``weight`` of the term in each member's loss (0: off) and ``layers``, member name (or
    ``victim`` for one victim) -> the module whose output is the feature map (``named_modules`` path)."""

    weight: float = 0.0
    layers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, value) -> "IntermediateLevel":
        if isinstance(value, cls):
            return value
        value = dict(value or {})
        unknown = set(value) - {"weight", "layers"}
        if unknown:
            raise AttackError(f"attack.ila has no key {sorted(unknown)[0]!r}; its keys are weight and layers.")
        ila = cls(weight=value.get("weight", 0.0), layers=dict(value.get("layers") or {}))
        AttackError.check_range("attack.ila.weight", ila.weight, 0,
                                why="the intermediate-level term's weight in each member's loss; 0 turns it off")
        return ila

    @property
    def on(self) -> bool:
        return self.weight > 0


def feature_module(victim: nn.Module, name: str, layers: Mapping[str, str]) -> nn.Module:
    """The module of ``victim`` (called ``name``) that ``layers`` names, or one sentence saying what to give."""
    if name not in layers:
        raise AttackError(f"attack.ila.layers names no layer for {name}; add attack.ila.layers.{name}=<a module of it, "
                          "e.g. model.layer2 for a timm ResNet>.")
    modules = dict(victim.named_modules())
    if layers[name] not in modules:
        shown = ", ".join(n for n in modules if n and n.count(".") <= 2)
        raise AttackError(f"attack.ila.layers.{name}={layers[name]} is not a module of {name}; give one of: {shown}.")
    return modules[layers[name]]


@contextmanager
def tapped(module: nn.Module) -> Iterator[list]:
    """Within the block, every output of ``module`` is appended to the yielded list (with its graph)."""
    seen: list = []
    handle = module.register_forward_hook(lambda _m, _i, output: seen.append(output))
    try:
        yield seen
    finally:
        handle.remove()


def tap(guide: "Guide | None", victim: nn.Module, name: str):
    """``tapped`` on ``victim``'s feature layer when there is a guide; otherwise a block that taps nothing."""
    return nullcontext([]) if guide is None else tapped(feature_module(victim, name, guide.ila.layers))


def projection(features: Tensor, clean: Tensor, guide: Tensor) -> Tensor:
    """Per view: the features' change from ``clean``, projected onto the guide's change, over the guide's own
    length squared (1 where ``features`` are the guide's, 0 where they are the clean sign's)."""
    g = (guide - clean).flatten(1)
    return ((features - clean).flatten(1) * g).sum(1) / g.pow(2).sum(1).clamp_min(1e-12)


class Guide:
    """The frozen guide patch and the settings; per step it renders the clean and guided views of the draw
    (``references``), and per member it gives the term on the member's tapped features (``term``)."""

    def __init__(self, ila: IntermediateLevel, patch: nn.Module, colour_model=None):
        self.ila = ila
        self.patch = copy.deepcopy(patch).requires_grad_(False)
        self.colour_model = colour_model

    @classmethod
    def of(cls, ila: IntermediateLevel, setup, members) -> "Guide":
        """The guide of an attack's ``setup`` (its patch as ``init=`` left it), after refusing what the term cannot
        serve: no ``init=`` run, a member without a layer, or members that see views the references do not."""
        if not setup.placed:
            raise AttackError("attack.ila refines a finished patch along the direction it moved the features; give "
                              "init=<a finished run>, or set attack.ila.weight=0.")
        named = [("victim", setup.victim)] if members is None else [(m.name, m.victim) for m in members]
        for name, victim in named:
            feature_module(victim, name, ila.layers)
        if members is not None and (setup.victim.diversity > 0 or setup.victim.erosion > 0):
            raise AttackError("attack.ila compares each view with its clean and guided copies as the member sees them; "
                              "set victim.diversity=0 and victim.erosion=0, or attack.ila.weight=0.")
        return cls(ila, setup.patch, setup.colour_model)

    @torch.no_grad()
    def references(self, pipeline: Callable, scene, params, base: Tensor) -> tuple[Tensor, Tensor]:
        """The draw's views of the clean sign and of the guide patch (no graph)."""
        guided = self.patch.apply(base)
        if self.colour_model is not None:
            guided = self.colour_model.print_patch(guided, self.patch.mask)
        return pipeline(scene, base, params).images, pipeline(scene, guided, params).images

    def term(self, victim: nn.Module, name: str, features: list, forward: Callable[[Tensor], object],
             references: tuple[Tensor, Tensor]) -> Tensor:
        """``weight`` × minus the mean projection of ``features`` (the tap's one output on the attacked views)
        onto the guide's direction; ``forward`` asks ``victim`` as the attacked views were asked."""
        attacked = list(features)
        module = feature_module(victim, name, self.ila.layers)
        with torch.no_grad(), tapped(module) as seen:
            forward(references[0])
            forward(references[1])
        if len(attacked) != 1 or len(seen) != 2:
            raise AttackError(f"attack.ila.layers.{name}={self.ila.layers[name]} runs more than once per forward; "
                              "give a module that runs once (a stage or block, not a shared activation).")
        return -self.ila.weight * projection(attacked[0].float(), seen[0].float(), seen[1].float()).mean()
