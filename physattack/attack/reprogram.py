"""Physical adversarial reprogramming (Elsayed, Goodfellow, Sohl-Dickstein 2018): a printed frame
makes a frozen sign classifier read digits shown in the card's window.

The victim's own labels are remapped to the task's classes (``label_map[i]`` is the victim label
that means digit ``i``); the program is trained with the same EOT loop as any patch, each view
showing a different training digit in the window; evaluation uses held-out digits under held-out views.

With ``label_map: auto`` the map is learned with the program, as in iterative label mapping (ILM-VP,
Chen et al. 2023): every ``remap_every`` steps of the curriculum, each digit is matched one-to-one
(Hungarian matching) to the victim label the current program makes most likely for it, by the mean
log-probability over the training draws since the last matching; the map is then frozen, before
the best program is picked.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.attack.loop import AttackError, Draw, EOTAttack
from physattack.attack.objectives import Objective
from physattack.eot.tasks import DigitTask
from physattack.victims.base import remap_logits

log = logging.getLogger("physattack")

class ReprogramAttack(EOTAttack):
    """EOT training of a reprogramming frame.

    Args:
        label_map: victim label names, the i-th meaning digit i; ``"auto"`` learns the map during the
            curriculum (see the module's text); ``None``: the victim's first ``classes`` labels.
        classes: how many digits the task has.
        window: the scene region (``scene.yaml`` regions) that shows the task input.
        split_seed: seed of the train/held-out split of the digits.
        curriculum: share of the steps over which the EOT ranges widen, from ``curriculum_start`` of
            their width around an easy view (centred, no blur, noise or JPEG) to the sampler's full
            ranges; 0 trains on the full ranges from the first step. The best program is picked only
            from draws of the full ranges.
        curriculum_start: the ranges' width, as a share of the full width, at step 0.
        remap_every: with ``label_map="auto"``, steps between two matchings (during the curriculum, or
            the first 30 % of the steps without one).
        other arguments: as EOTAttack (steps, batch_size, lr, priors...).
    """

    needs_true_label = False

    def __init__(self, label_map: list[str] | str | None = None, classes: int = 5, window: str = "window",
                 split_seed: int = 0, curriculum: float = 0.3, curriculum_start: float = 0.1,
                 remap_every: int = 25, **kwargs):
        kwargs.setdefault("objective", "targeted")
        kwargs["target"] = kwargs.get("target") or "digits"
        kwargs.setdefault("mask_search_steps", 0)
        super().__init__(**kwargs)
        AttackError.check_range("attack.curriculum", curriculum, 0, 1,
                                why="the share of the steps the ranges widen over")
        AttackError.check_range("attack.curriculum_start", curriculum_start, 0, 1,
                                why="the ranges' width at the first step, a share of the full width")
        classes = AttackError.check_range("attack.classes", classes, 2, 10, integer=True, why="digits")
        split_seed = AttackError.check_range("attack.split_seed", split_seed, 0, integer=True)
        self.label_map_names, self.classes, self.window, self.split_seed = label_map, classes, window, split_seed
        self.curriculum, self.curriculum_start = curriculum, curriculum_start
        self.auto_map = isinstance(label_map, str)
        if self.auto_map and label_map != "auto":
            raise AttackError(f"attack.label_map is a list of victim labels, 'auto' or null; got '{label_map}'.")
        if self.auto_map:
            self.label_map_names = None           # the matching starts from the victim's first labels
        self.remap_every = AttackError.check_range("attack.remap_every", remap_every, 1, integer=True,
                                                   why="steps between two label matchings")
        self.task = DigitTask(classes, seed=split_seed)
        self.label_map: Tensor | None = None      # set by label(), then learned (auto) or restored on resume
        self._scores: Tensor | None = None        # auto: per digit, summed log-probability of each victim label
        self._counts: Tensor | None = None        # auto: per digit, views gathered since the last matching

    def resolve(self, victim, scene) -> Tensor:
        """Victim label indices for digits 0..classes-1; the scene must have the window region."""
        if self.window not in scene.regions:
            raise AttackError(f"attack=reprogram needs a scene with a '{self.window}' region (its scene.yaml "
                              "'regions'); use +scene=reprogram_board.")
        if self.auto_map and len(victim.labels) < self.classes:
            raise AttackError(f"attack.label_map=auto needs at least {self.classes} victim labels (one per digit); "
                              f"this victim has {len(victim.labels)}.")
        if self.auto_map and self.label_map is not None:
            return self.label_map                 # learned so far (or restored from a checkpoint)
        names = self.label_map_names or list(victim.labels[:self.classes])
        if len(names) != self.classes:
            raise AttackError(f"attack.label_map names {len(names)} labels but the task has {self.classes} "
                              "digits; give one victim label per digit.")
        return torch.tensor([victim.label_index(n) for n in names])

    def label(self, victim, scene) -> int:
        self.label_map = self.resolve(victim, scene)
        if self.auto_map and self._scores is None:
            self._scores = torch.zeros(self.classes, len(victim.labels), dtype=torch.float64)
            self._counts = torch.zeros(self.classes, dtype=torch.float64)
        return 0

    def objective_for(self, victim) -> Objective:
        self.resolve_map()
        return Objective(loss=self._loss, targeted=True, success=lambda out, labels, views: remap_logits(
            out, self.label_map.to(out.device)).argmax(1) == labels.to(out.device))

    def _loss(self, out: Tensor, labels: Tensor, views) -> Tensor:
        """Cross-entropy of the remapped logits (under the map of this step)."""
        labels = labels.to(out.device)
        return F.cross_entropy(remap_logits(out, self.label_map.to(out.device)), labels, reduction="none")

    def observe(self, output: Tensor, labels: Tensor, progress: float) -> None:
        """While the map is being learned, gather each digit's log-probability of every victim label."""
        if self.mapping(progress):
            with torch.no_grad():
                labels = labels.cpu()
                self._scores.index_add_(0, labels, output.detach().double().log_softmax(1).cpu())
                self._counts += torch.bincount(labels, minlength=self.classes).double()

    def mapping(self, progress: float) -> bool:
        """Whether the label map is still being learned at ``progress`` (``label_map="auto"``, before it is frozen)."""
        return self.auto_map and progress < self.map_frozen_at

    def rematch(self) -> None:
        """Match each digit to a distinct victim label by its mean log-probability since the last matching."""
        from scipy.optimize import linear_sum_assignment

        seen = self._counts > 0
        if not bool(seen.any()):
            return
        mean = self._scores / self._counts.clamp(min=1)[:, None]
        mean[~seen] = 0.0                         # an unseen digit keeps no preference
        rows, cols = linear_sum_assignment(mean.numpy(), maximize=True)
        new = torch.as_tensor(np.asarray(cols)[np.argsort(rows)], dtype=torch.long)
        if not torch.equal(new, self.label_map):
            log.debug("reprogram: label map now %s", new.tolist())
        self.label_map = new
        self._scores.zero_()
        self._counts.zero_()

    def checkpoint_state(self) -> dict:
        out = {"label_map": self.label_map} if self.label_map is not None else {}
        if self.auto_map and self._scores is not None:
            out.update(scores=self._scores, counts=self._counts)
        return out

    def load_checkpoint_state(self, state: dict) -> None:
        if "label_map" in state:
            self.label_map = state["label_map"]
        if "scores" in state:
            self._scores, self._counts = state["scores"], state["counts"]

    def resolve_map(self) -> Tensor:
        if self.label_map is None:
            raise AttackError("ReprogramAttack.label(victim, scene) must run before its objective is used.")
        return self.label_map

    def draw(self, sampler, generator, scene, label, progress: float) -> Draw:
        """A batch of views, each with its own training digit in the window (and that digit as its label);
        with ``label_map="auto"``, the map is matched again first every ``remap_every`` steps."""
        if self.auto_map:
            step = int(round(progress * self.steps))
            if step > 0 and step % self.remap_every == 0 and self.mapping(progress):
                self.rematch()
        params = self.sampler_now(sampler, progress).sample(self.batch_size, generator)
        digits, labels = self.task.sample(self.batch_size, generator, "train")
        base = DigitTask.print_into(scene.texture, digits, scene.regions[self.window])
        return Draw(params, base, labels)

    def draws_final(self, progress: float) -> bool:
        """After the curriculum and the label matching, once the running success has forgotten both."""
        start = max(self.curriculum, self.map_frozen_at)
        if start <= 0:
            return True
        settle = 2 / max(1e-3, 1 - self.ema)
        return (progress - start) * self.steps >= settle - 1e-6

    @property
    def map_frozen_at(self) -> float:
        """Share of the steps after which the label map no longer changes."""
        return (self.curriculum or 0.3) if self.auto_map else 0.0

    def sampler_now(self, sampler, progress: float):
        """The sampler at ``progress`` (0 to 1) of the attack: narrowed early in a curriculum."""
        if self.curriculum <= 0 or progress >= self.curriculum or not dataclasses.is_dataclass(sampler):
            return sampler
        return narrowed(sampler, self.curriculum_start + (1 - self.curriculum_start) * progress / self.curriculum)


DEGRADATIONS = ("blur_sigma_px", "noise_std")        # narrowed towards their lower end (a clean view)


def narrowed(sampler, width: float):
    """A copy of a ViewSampler whose ranges keep ``width`` (0..1) of their extent around an easy view:
    each range shrinks towards its middle (distance: its geometric middle), blur and noise towards none;
    motion blur and JPEG only come in with the full ranges."""
    changes = {}
    for f in dataclasses.fields(sampler):
        value = getattr(sampler, f.name)
        if f.name == "motion_px":
            changes[f.name] = tuple(value) if width >= 1 else (1,)
        elif f.name == "jpeg_share":
            changes[f.name] = value if width >= 1 else 0.0
        elif isinstance(value, (tuple, list)) and len(value) == 2 and all(type(v) in (int, float) for v in value):
            lo, hi = value
            if f.name in DEGRADATIONS:
                changes[f.name] = (lo, lo + width * (hi - lo))
            elif f.name == "distance_m":
                mid, half = math.sqrt(lo * hi), math.sqrt(hi / lo) ** width
                changes[f.name] = (mid / half, mid * half)
            else:
                mid = (lo + hi) / 2
                changes[f.name] = (mid - width * (hi - lo) / 2, mid + width * (hi - lo) / 2)
    return dataclasses.replace(sampler, **changes)
