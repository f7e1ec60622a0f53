"""Feature-level transfer terms (``attack.features``): losses on a surrogate's mid-layer features, added to each
member's objective, which the literature finds other models share more than they share logits.

- ``ila``, the intermediate-level attack (Huang et al., "Enhancing Adversarial Example Transferability with an
  Intermediate Level Attack", ICCV 2019): refine a finished patch (the ``init=`` run's, the *guide*, frozen) by
  pushing the features further along the direction that patch moved them. For each view, with ``f`` the member's
  features at its named layer, ``f0`` those of the clean sign and ``fg`` those of the guide under the same draw, the
  term is ``-<f - f0, g> / |g|²`` with ``g = fg - f0``: minus the projection of the features' change onto the
  guide's, in units of the guide's own (1 at the guide).
- ``fia``, the feature importance-aware attack (Wang et al., "Feature Importance-aware Transferable Adversarial
  Attacks", ICCV 2021): weight the features by their aggregate gradient ``Δ``, the gradient of the source class's
  logit (minus the target's, for a targeted attack) with respect to the features, summed over ``masks`` copies of
  the clean view with a share ``drop`` of its pixels dropped (which keeps the object-level importance and averages
  out the model-specific detail), and minimise ``<Δ/|Δ|, f> / |f0|``: the features that make the sign read as
  itself go down, those of the target up. Needs no ``init=`` run.

The term's ``weight`` is added to each member's objective (0: off), so the members stay fooled while the features
move. Both render the draw's clean views once per step, without a graph (``ila`` the guide's too).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping

import torch
from torch import Tensor, nn

from physattack.attack.errors import AttackError

METHODS = ("ila", "fia")


@dataclass(frozen=True)
class FeatureLevel:
    """The term's settings: ``method`` (``ila`` or ``fia``), its ``weight`` in each member's loss (0: off), ``layers``
    (member name, or ``victim`` for one victim -> the module whose output is the feature map, a ``named_modules``
    path), and for ``fia`` the number of ``masks`` and the share of pixels each ``drop``s."""

    method: str = "ila"
    weight: float = 0.0
    layers: Mapping[str, str] = field(default_factory=dict)
    masks: int = 8
    drop: float = 0.3

    @classmethod
    def of(cls, value) -> "FeatureLevel":
        if isinstance(value, cls):
            return value
        value = dict(value or {})
        unknown = set(value) - {"method", "weight", "layers", "masks", "drop"}
        if unknown:
            raise AttackError(f"attack.features has no key {sorted(unknown)[0]!r}; its keys are method, weight, "
                              "layers, masks and drop.")
        term = cls(**{**value, "layers": dict(value.get("layers") or {})})
        if term.method not in METHODS:
            raise AttackError(f"attack.features.method must be ila or fia, not {term.method!r}.")
        AttackError.check_range("attack.features.weight", term.weight, 0,
                                why="the feature-level term's weight in each member's loss; 0 turns it off")
        AttackError.check_range("attack.features.masks", term.masks, 1, integer=True,
                                why="masked copies of each clean view whose gradients fia sums")
        AttackError.check_range("attack.features.drop", term.drop, 0, 1, hi_open=True,
                                why="the share of a masked copy's pixels fia drops")
        return term

    @property
    def on(self) -> bool:
        return self.weight > 0


def feature_module(victim: nn.Module, name: str, layers: Mapping[str, str]) -> nn.Module:
    """The module of ``victim`` (called ``name``) that ``layers`` names, or one sentence saying what to give."""
    if name not in layers:
        raise AttackError(f"attack.features.layers names no layer for {name}; add attack.features.layers.{name}=<a "
                          "module of it, e.g. model.layer2 for a timm ResNet>.")
    modules = dict(victim.named_modules())
    if layers[name] not in modules:
        shown = ", ".join(n for n in modules if n and n.count(".") <= 2)
        raise AttackError(f"attack.features.layers.{name}={layers[name]} is not a module of {name}; give one of: "
                          f"{shown}.")
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


@contextmanager
def cut(module: nn.Module) -> Iterator[list]:
    """Within the block, ``module``'s outputs are cut from what came before (leaves that require a gradient) and
    appended to the yielded list: the gradient of what follows with respect to the features."""
    seen: list = []

    def leaf(_m, _i, output):
        seen.append(output.detach().requires_grad_())
        return seen[-1]

    handle = module.register_forward_hook(leaf)
    try:
        yield seen
    finally:
        handle.remove()


def tap(guide: "Guide | None", name: str):
    """``tapped`` on the feature layer of the victim called ``name`` when there is a guide; otherwise a block that
    taps nothing."""
    return nullcontext([]) if guide is None else tapped(guide.modules[name])


def projection(features: Tensor, clean: Tensor, guide: Tensor) -> Tensor:
    """Per view: the features' change from ``clean``, projected onto the guide's change, over the guide's own
    length squared (1 where ``features`` are the guide's, 0 where they are the clean sign's)."""
    g = (guide - clean).flatten(1)
    return ((features - clean).flatten(1) * g).sum(1) / g.pow(2).sum(1).clamp_min(1e-12)


def importance(features: Tensor, weights: Tensor, clean: Tensor) -> Tensor:
    """Per view: the features weighted by their importance ``weights`` (normalized per view), over the clean
    features' length."""
    w = weights.flatten(1)
    w = w / w.norm(dim=1, keepdim=True).clamp_min(1e-12)
    return (features.flatten(1) * w).sum(1) / clean.flatten(1).norm(dim=1).clamp_min(1e-12)


class Guide:
    """What the term needs besides the attacked views: the settings, each victim's labels (its target or true class
    and its labels of the scene's class), the frozen guide patch (``ila``) and a generator of its own for ``fia``'s
    masks (so the views drawn do not change), and each victim's feature module (``modules``, looked up once). Per
    step it renders the references of the draw (``references``), and per member it gives the term on the member's
    tapped features (``term``)."""

    def __init__(self, settings: FeatureLevel, patch: nn.Module, labels: dict, colour_model=None, seed: int = 0,
                 targeted: bool = True, modules: dict | None = None):
        self.term_settings = settings
        self.modules = modules or {}
        self.patch = copy.deepcopy(patch).requires_grad_(False) if settings.method == "ila" else None
        self.labels = labels
        self.colour_model = colour_model
        self.generator = torch.Generator().manual_seed(seed + 7_919)
        self.targeted = targeted

    @classmethod
    def of(cls, settings: FeatureLevel, setup, named: dict, seed: int, targeted: bool) -> "Guide":
        """The guide of an attack's ``setup`` after refusing what the term cannot serve: ``ila`` without an ``init=``
        run, a victim without a layer, or members that see views the references do not. ``named``: name -> (victim,
        its label, its labels of the scene's class)."""
        key = "attack.features"
        if settings.method == "ila" and not setup.placed:
            raise AttackError(f"{key}.method=ila refines a finished patch along the direction it moved the features; "
                              f"give init=<a finished run>, or use {key}.method=fia, or set {key}.weight=0.")
        modules = {}
        for name, (victim, _, _) in named.items():
            if getattr(victim, "is_detector", False):
                raise AttackError(f"{key} works on a classifier's features and logits; {name} is a detector, so set "
                                  f"{key}.weight=0 (or attack a classifier).")
            modules[name] = feature_module(victim, name, settings.layers)
        if getattr(setup.victim, "members", None) is not None and (setup.victim.diversity > 0
                                                                   or setup.victim.erosion > 0):
            raise AttackError(f"{key} compares each view with its clean copy as the member sees it; set "
                              f"victim.diversity=0 and victim.erosion=0, or {key}.weight=0.")
        labels = {name: (label, signs) for name, (_, label, signs) in named.items()}
        return cls(settings, setup.patch, labels, setup.colour_model, seed, targeted, modules)

    @torch.no_grad()
    def references(self, pipeline: Callable, scene, params, base: Tensor) -> tuple[Tensor, ...]:
        """The draw's views of the clean sign, and for ``ila`` of the guide patch (no graph)."""
        clean = pipeline(scene, base, params).images
        if self.patch is None:
            return (clean,)
        guided = self.patch.apply(base)
        if self.colour_model is not None:
            guided = self.colour_model.print_patch(guided, self.patch.mask)
        return clean, pipeline(scene, guided, params).images

    def term(self, name: str, features: list, forward: Callable[[Tensor], object],
             references: tuple[Tensor, ...]) -> Tensor:
        """``weight`` × the method's term on ``features`` (the tap's one output on the attacked views); ``forward``
        asks the victim called ``name`` as the attacked views were asked."""
        settings = self.term_settings
        attacked = list(features)
        module = self.modules[name]
        with torch.no_grad(), tapped(module) as seen:
            for images in references:
                forward(images)
        if len(attacked) != 1 or len(seen) != len(references):
            raise AttackError(f"attack.features.layers.{name}={settings.layers[name]} runs more than once per "
                              "forward; give a module that runs once (a stage or block, not a shared activation).")
        if settings.method == "ila":
            return -settings.weight * projection(attacked[0].float(), seen[0].float(), seen[1].float()).mean()
        weights = self.aggregate_gradient(module, forward, references[0], *self.labels[name])
        return settings.weight * importance(attacked[0].float(), weights, seen[0].float()).mean()

    def aggregate_gradient(self, module: nn.Module, forward: Callable[[Tensor], object], clean: Tensor, label: int,
                           signs: tuple[int, ...]) -> Tensor:
        """FIA's ``Δ``: the gradient of the scene's class's logit (minus the target's, targeted) with respect to the
        features, summed over ``masks`` copies of the clean views, each with a share ``drop`` of its pixels dropped."""
        settings = self.term_settings
        total = None
        for _ in range(settings.masks):
            keep = torch.rand(clean.shape[0], 1, *clean.shape[2:], generator=self.generator) >= settings.drop
            with torch.enable_grad(), cut(module) as leaves:
                logits = forward(clean * keep.to(clean))
                score = logits[:, list(signs)].logsumexp(1)
                if self.targeted:
                    score = score - logits[:, label]
                grad = torch.autograd.grad(score.sum(), leaves[0])[0]
            total = grad if total is None else total + grad
        return total.detach()
