"""Ensemble: several frozen victims of one kind attacked at once, each with its own preprocessing.

An attack that holds on one surrogate rarely holds on a model it never saw; optimizing against an
ensemble of surrogates is the standard remedy (Liu et al., ICLR 2017, "Delving into Transferable
Adversarial Examples and Black-box Attacks"; Dong et al., CVPR 2018, for the averaged loss). The EOT
loop (``physattack.attack.loop``) renders each step's views once and feeds the members **one after
another**, each member's activations freed after its backward, so that peak memory stays near one
victim's. This module only holds the members, maps labels between them by name and says how their
losses are weighted; the loop does the stepping.

Each member keeps its own normalization and input size: it is handed the same B×3×H×W images in
[0, 1] and resizes them itself (every bundled adapter does; a classifier that declares an
``input_size`` it does not resize to is resized here, differentiably, as SignNet would).

Labels are the first member's. Every other member is asked for labels **by name** (members may order
or alias them differently: a COCO detector calls the scene's ``stop`` "stop sign"), so
``label_index(name)`` checks every member and says which one lacks the name. Held-out members are
never part of an ensemble: the config lists them by name for evaluation after the attack.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from physattack.victims.base import VictimError

WEIGHTINGS = ("mean", "hardest")
# the activation layers whose outputs ``erosion`` drops: every bundled architecture's nonlinearities
ERODED_LAYERS = (nn.ReLU, nn.ReLU6, nn.LeakyReLU, nn.GELU, nn.SiLU, nn.Hardswish)


class Ensemble(nn.Module):
    """K frozen victims of one kind (all classifiers or all detectors) behind one victim's interface.

    Args:
        members: the victims, in order; the first one's labels are the ensemble's.
        names: one unique name per member (what logs and reports call it); default ``member0``, ….
        weighting: ``mean`` (each member's loss weighs 1/K) or ``hardest`` (weights are a softmax over
            the members' current losses divided by ``temperature``, so the members the patch fools
            least weigh most: the entropy-smoothed worst case over members, i.e. the weights on the
            simplex that maximize the weighted loss plus ``temperature`` times their entropy, in the
            spirit of min-max ensemble attacks, Wang et al., NeurIPS 2021, "Adversarial Attack
            Generation Empowered by Min-Max Optimization").
        temperature: the ``hardest`` softmax's temperature, in loss units (large: towards ``mean``).
        diversity: probability that a member sees each attack view randomly shrunk and shifted inside its
            own input (input diversity, Xie et al., CVPR 2019, "Improving Transferability of Adversarial
            Examples with Input Diversity"): every member gets its own draw, so the patch cannot lean on
            one member's exact pixel grid. 0 (the default) turns it off and draws nothing.
        diversity_scale: the smallest relative size a diversified view is shrunk to, in (0, 1].
        erosion: model augmentation at attack time, the dropout erosion of ghost networks (Li et al.,
            AAAI 2020, "Learning Transferable Adversarial Examples via Ghost Networks"): each member's
            activations (every ReLU/GELU/SiLU/Hardswish layer) are dropped with this probability and the
            rest rescaled, a fresh draw per step and member, so each step attacks a slightly different
            network of the same weights. 0 (the default) turns it off and draws nothing.

    ``forward(images)``, for evaluation and the sticker mask search: for classifiers, logits whose
    softmax is the members' mean probability of each of the ensemble's labels (a member without a
    label gives it probability 0; labels only other members have are left out and the rest
    renormalized), centred to sum to 0 per view, since logits are defined up to a constant and
    normalized log-probabilities would read as a softmax left in the model; for detectors, the first
    member's output (boxes from several detectors do not average). Reports should show each member
    separately.
    """

    def __init__(self, members: Sequence[nn.Module], names: Sequence[str] | None = None, weighting: str = "mean",
                 temperature: float = 1.0, diversity: float = 0.0, diversity_scale: float = 0.8,
                 erosion: float = 0.0):
        super().__init__()
        members = list(members)
        if not members:
            raise VictimError("An ensemble needs at least one member; list the victims to attack under "
                              "victim.members (for example signnet and signnet_seed1).")
        names = [f"member{k}" for k in range(len(members))] if names is None else [str(n) for n in names]
        if len(names) != len(members):
            raise VictimError(f"The ensemble has {len(members)} members but {len(names)} names; give one name per "
                              "member.")
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise VictimError(f"Ensemble member name {twice[0]!r} is used twice; give every member its own name.")
        kinds = [bool(getattr(m, "is_detector", False)) for m in members]
        for name, member, kind in zip(names, members, kinds):
            if not isinstance(member, nn.Module) or not hasattr(member, "label_index"):
                raise VictimError(f"Ensemble member '{name}' is a {type(member).__name__}, not a victim; give a "
                                  "classifier or detector built by physattack.victims.")
            if kind != kinds[0]:
                what = lambda d: "a detector" if d else "a classifier"  # noqa: E731
                raise VictimError(f"Ensemble member '{name}' is {what(kind)} but '{names[0]}' is {what(kinds[0])}; "
                                  "an ensemble's members must all be classifiers or all detectors, so remove one "
                                  "kind from victim.members.")
        if weighting not in WEIGHTINGS:
            raise VictimError(f"victim.weighting must be one of {', '.join(WEIGHTINGS)}, not '{weighting}'.")
        VictimError.check_range("victim.temperature", temperature, 0.0, lo_open=True,
                                why="the hardest weighting's softmax temperature, in loss units")
        VictimError.check_range("victim.diversity", diversity, 0.0, 1.0,
                                why="the probability that a member sees an attack view shrunk and shifted")
        VictimError.check_range("victim.diversity_scale", diversity_scale, 0.0, 1.0, lo_open=True,
                                why="the smallest relative size of a diversified view")
        VictimError.check_range("victim.erosion", erosion, 0.0, 1.0, hi_open=True,
                                why="the probability that an activation of a member is dropped during the attack")
        self.members = nn.ModuleList(members)
        self.names = tuple(names)
        self.weighting, self.temperature = weighting, float(temperature)
        self.diversity, self.diversity_scale = float(diversity), float(diversity_scale)
        self.erosion = float(erosion)
        self.is_detector = kinds[0]
        self.emphasis = torch.ones(len(members), dtype=torch.float64)  # ``emphasize``: 1 each, the weighting alone

    def emphasize(self, factors: Mapping[str, float] | None) -> "Ensemble":
        """Multiply named members' weights by these factors (``victim.emphasis``), the weights renormalized to sum
        to 1 after the weighting: a member the red team needs the patch to fool more weighs more whatever its
        loss. None or {}: every factor 1. Returns the ensemble."""
        emphasis = torch.ones(len(self.members), dtype=torch.float64)
        for name, factor in dict(factors or {}).items():
            if name not in self.names:
                raise VictimError(f"victim.emphasis names {name!r}, which is not a member of the ensemble "
                                  f"({', '.join(self.names)}); name a member of victim.members.")
            emphasis[self.names.index(name)] = VictimError.check_range(
                f"victim.emphasis.{name}", factor, 0.0, lo_open=True, why="the factor that member's weight is "
                "multiplied by (1: as the weighting gives it)")
        self.emphasis = emphasis
        return self

    # -- one victim's interface: the first member's labels, every member checked by name -------------
    @property
    def labels(self) -> tuple[str, ...]:
        return tuple(self.members[0].labels)

    @property
    def label_sets(self) -> dict:
        return dict(getattr(self.members[0], "label_sets", {}))

    @property
    def aliases(self) -> dict:
        return dict(getattr(self.members[0], "aliases", {}))

    @property
    def input_size(self) -> int | None:
        """The largest member input size (detector frames are rendered at it; smaller members shrink them)."""
        sizes = [int(s) for s in (getattr(m, "input_size", None) for m in self.members) if s]
        return max(sizes) if sizes else None

    @property
    def score_threshold(self) -> float | None:
        return getattr(self.members[0], "score_threshold", None)

    def label_index(self, name: str) -> int:
        """The first member's index of ``name``, after checking that every member has it (one
        sentence naming the first member that does not)."""
        return self.member_label_indices(name)[0]

    def label_set(self, name: str) -> tuple[int, ...]:
        """The first member's label set for ``name``, after checking every member has the label."""
        self.member_label_indices(name)
        first = self.members[0]
        return tuple(first.label_set(name)) if hasattr(first, "label_set") else (first.label_index(name),)

    def member_label_indices(self, name: str) -> list[int]:
        """``name``'s index in each member's own labels, in member order."""
        indices = []
        for member_name, member in zip(self.names, self.members):
            try:
                indices.append(member.label_index(name))
            except VictimError:
                shown = [lab for lab in member.labels if lab not in {"__background__", "N/A"}]
                raise VictimError(f"Ensemble member '{member_name}' has no label '{name}' (its labels are: "
                                  f"{', '.join(shown)}); remove it from victim.members or give it weights trained "
                                  "with that label.") from None
        return indices

    # -- the attack's side ---------------------------------------------------------------------------
    def member_inputs(self, member: nn.Module, images: Tensor) -> Tensor:
        """``images`` as ``member`` takes them: a classifier with a declared ``input_size`` gets them at
        that size (bilinear, antialiased, as the bundled adapters do; a no-op for those that already
        do it); detectors resize themselves and answer in the pixels of the images they were given."""
        size = getattr(member, "input_size", None)
        if getattr(member, "is_detector", False) or not size or images.shape[-2:] == (size, size):
            return images
        return F.interpolate(images, size=(size, size), mode="bilinear", antialias=True, align_corners=False)

    def attack_inputs(self, member: nn.Module, images: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``images`` as ``member`` takes them during the attack: ``member_inputs``, then input diversity
        (``diversity``) drawn from ``generator``. Evaluation never calls this."""
        x = self.member_inputs(member, images)
        if self.diversity <= 0 or generator is None or getattr(member, "is_detector", False):
            return x
        return diverse_inputs(x, self.diversity, self.diversity_scale, generator)

    @contextmanager
    def eroded(self, member: nn.Module, generator: torch.Generator | None = None) -> Iterator[int]:
        """Within the block, ``member``'s activations are dropped with probability ``erosion`` (ghost
        networks' dropout erosion), the masks drawn from ``generator``; yields the number of layers
        eroded. A no-op when ``erosion`` is 0 or there is no generator. Evaluation never calls this.

        On the CPU the masks come from ``generator`` itself; on another device they are drawn where the
        activations are, from a generator of that device seeded once per block from ``generator``, so
        no mask is made on the host and copied per layer, and a seeded run still repeats itself."""
        if self.erosion <= 0 or generator is None:
            yield 0
            return
        keep = 1.0 - self.erosion
        on_device: dict[torch.device, torch.Generator] = {}

        def drop(module, inputs, output):
            if not isinstance(output, Tensor):
                return output
            if output.device.type == "cpu":
                mask = torch.bernoulli(torch.full(output.shape, keep), generator=generator).to(output.dtype)
            else:
                if output.device not in on_device:
                    seed = int(torch.randint(2**62, (1,), generator=generator))
                    on_device[output.device] = torch.Generator(device=output.device).manual_seed(seed)
                mask = torch.empty_like(output).bernoulli_(keep, generator=on_device[output.device])
            return output * (mask / keep)

        handles = [m.register_forward_hook(drop) for m in member.modules() if isinstance(m, ERODED_LAYERS)]
        try:
            yield len(handles)
        finally:
            for handle in handles:
                handle.remove()

    def weights(self, losses: Sequence[float] | Tensor) -> Tensor:
        """K weights summing to 1 for the members' current (mean) losses."""
        losses = torch.as_tensor([float(v) for v in losses], dtype=torch.float64)
        if self.weighting == "mean" or len(losses) == 1:
            weights = torch.full_like(losses, 1.0 / len(losses))
        else:
            weights = torch.softmax(torch.nan_to_num(losses, nan=0.0, posinf=1e6, neginf=-1e6) / self.temperature, 0)
        if bool((self.emphasis != 1).any()):          # none: the weighting's own weights, to the bit
            weights = weights * self.emphasis
            weights = weights / weights.sum()
        return weights

    # -- evaluation: one output for the whole ensemble -------------------------------------------------
    def forward(self, images: Tensor):
        if self.is_detector:
            return self.members[0](images)
        return self.combine([member(self.member_inputs(member, images)) for member in self.members])

    def combine(self, outputs: Sequence[Tensor]) -> Tensor:
        """A classifier ensemble's logits (``forward``'s) from its members' own logits on the same images, one per
        member in order: whoever has already asked every member (a drive's panel) need not ask them again."""
        labels = self.labels
        total = None
        for member, output in zip(self.members, outputs, strict=True):
            mapped = _to_labels(torch.softmax(output.float(), dim=1), tuple(member.labels), labels)
            total = mapped if total is None else total + mapped
        log_mean = torch.log((total / len(self.members)).clamp(min=1e-12))
        return log_mean - log_mean.mean(dim=1, keepdim=True)

    def freeze(self) -> "Ensemble":
        self.eval()
        for p in self.parameters():
            p.requires_grad_(False)
        return self

    def extra_repr(self) -> str:
        return (f"names={list(self.names)}, weighting={self.weighting!r}, temperature={self.temperature:g}, "
                f"diversity={self.diversity:g}, erosion={self.erosion:g}")


def diverse_inputs(images: Tensor, p: float, min_scale: float, generator: torch.Generator) -> Tensor:
    """Input diversity (Xie et al., CVPR 2019): each image, with probability ``p``, shrunk to a random
    size in [``min_scale``, 1] of its side and put at a random place inside the same frame, the rest
    zero — DI's random resize-and-pad, drawn per image from ``generator`` and differentiable (one
    bilinear ``grid_sample``). The draws are made on the CPU generator whatever the images' device."""
    b = images.shape[0]
    u = torch.rand(b, 4, generator=generator, dtype=torch.float64)
    on = u[:, 0] < p
    scale = torch.where(on, min_scale + (1 - min_scale) * u[:, 1], torch.ones(b, dtype=torch.float64))
    room = 1 - scale                      # the shrunk image stays inside the frame: |shift| <= 1 - scale
    tx, ty = (2 * u[:, 2] - 1) * room, (2 * u[:, 3] - 1) * room
    theta = torch.zeros(b, 2, 3, dtype=torch.float64)
    theta[:, 0, 0], theta[:, 1, 1] = 1 / scale, 1 / scale       # output coords -> input coords
    theta[:, 0, 2], theta[:, 1, 2] = -tx / scale, -ty / scale
    theta = theta.to(images.device, images.dtype)
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    out = F.grid_sample(images, grid, mode="bilinear", padding_mode="zeros", align_corners=False)
    keep = (~on).to(images.device).view(b, 1, 1, 1)
    return torch.where(keep, images, out)


def _to_labels(probs: Tensor, member_labels: tuple[str, ...], labels: tuple[str, ...]) -> Tensor:
    """B×K_member probabilities -> B×K over ``labels`` by name (0 for a label the member lacks)."""
    if member_labels == labels:
        return probs
    index = {lab: i for i, lab in enumerate(member_labels)}
    columns = [probs[:, index[lab]] if lab in index else probs.new_zeros(probs.shape[0]) for lab in labels]
    return torch.stack(columns, dim=1)


def build_ensemble(members: Mapping[str, nn.Module], weighting: str = "mean", temperature: float = 1.0,
                   diversity: float = 0.0, diversity_scale: float = 0.8, erosion: float = 0.0,
                   emphasis: Mapping[str, float] | None = None) -> Ensemble:
    """The ensemble ``conf/victim/ensemble.yaml`` describes.

    Args:
        members: name -> built victim (Hydra instantiates each member's own victim config first), in
            the config's order; the first member's labels are the ensemble's.
        weighting, temperature, diversity, diversity_scale, erosion: as ``Ensemble``.
        emphasis: member name -> the factor its weight is multiplied by (``Ensemble.emphasize``); None: none.

    The victims held out of the attack are not the ensemble's business: the held-out protocol scores
    every victim of ``evaluation.victims`` that is not a member (``physattack.cli.build.protocol_victims``).
    """
    if not isinstance(members, Mapping):
        raise VictimError("victim.members must map each member's name to its victim config (for example signnet: "
                          "{_target_: physattack.victims.load_signnet}).")
    ensemble = Ensemble(list(members.values()), names=list(members.keys()), weighting=weighting,
                        temperature=temperature, diversity=diversity, diversity_scale=diversity_scale,
                        erosion=erosion)
    return ensemble.emphasize(emphasis).freeze()


__all__ = ["ERODED_LAYERS", "Ensemble", "WEIGHTINGS", "build_ensemble", "diverse_inputs"]
