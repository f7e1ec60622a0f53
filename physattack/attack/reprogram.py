"""Physical adversarial reprogramming (Elsayed, Goodfellow, Sohl-Dickstein 2018): a printed frame
makes a frozen sign classifier read digits shown in the card's window.

The victim's own labels are remapped to the task's classes (``label_map[i]`` is the victim label
that means digit ``i``); the program is trained with the same EOT loop as any patch, each view
showing a different training digit in the window; evaluation uses held-out digits under held-out views.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from physattack.attack.loop import AttackError, EOTAttack
from physattack.attack.objectives import Objective
from physattack.eot.tasks import DigitTask
from physattack.victims.base import remap_logits

class ReprogramAttack(EOTAttack):
    """EOT training of a reprogramming frame.

    Args:
        label_map: victim label names, the i-th meaning digit i (default: the victim's first ``classes``).
        classes: how many digits the task has.
        window: the scene region (``scene.yaml`` regions) that shows the task input.
        split_seed: seed of the train/held-out split of the digits.
        curriculum: share of the steps over which the EOT ranges widen, from ``curriculum_start`` of
            their width around an easy view (centred, no blur, noise or JPEG) to the sampler's full
            ranges; 0 trains on the full ranges from the first step. The best program is picked only
            from draws of the full ranges.
        curriculum_start: the ranges' width, as a share of the full width, at step 0.
        other arguments: as EOTAttack (steps, batch_size, lr, priors...).
    """

    needs_true_label = False

    def __init__(self, label_map: list[str] | None = None, classes: int = 5, window: str = "window",
                 split_seed: int = 0, curriculum: float = 0.3, curriculum_start: float = 0.1, **kwargs):
        kwargs.setdefault("objective", "targeted")
        kwargs["target"] = kwargs.get("target") or "digits"
        kwargs.setdefault("mask_search_steps", 0)
        super().__init__(**kwargs)
        self.label_map_names, self.classes, self.window, self.split_seed = label_map, classes, window, split_seed
        if not 0 <= curriculum <= 1 or not 0 <= curriculum_start <= 1:
            raise AttackError("attack.curriculum and attack.curriculum_start are shares of the steps and of the "
                              f"ranges, between 0 and 1; got {curriculum} and {curriculum_start}.")
        self.curriculum, self.curriculum_start = curriculum, curriculum_start
        self.task = DigitTask(classes, seed=split_seed)

    def resolve(self, victim, scene) -> Tensor:
        """Victim label indices for digits 0..classes-1; the scene must have the window region."""
        if self.window not in scene.regions:
            raise AttackError(f"attack=reprogram needs a scene with a '{self.window}' region (its scene.yaml "
                              "'regions'); use +scene=reprogram_board.")
        names = self.label_map_names or list(victim.labels[:self.classes])
        if len(names) != self.classes:
            raise AttackError(f"attack.label_map names {len(names)} labels but the task has {self.classes} "
                              "digits; give one victim label per digit.")
        return torch.tensor([victim.label_index(n) for n in names])

    def label(self, victim, scene) -> int:
        self.label_map = self.resolve(victim, scene)
        return 0

    def objective_for(self, victim) -> Objective:
        label_map = self.resolve_map()
        return Objective(
            loss=lambda out, labels, views: F.cross_entropy(remap_logits(out, label_map.to(out.device)),
                                                            labels.to(out.device), reduction="none"),
            success=lambda out, labels, views: remap_logits(out, label_map.to(out.device)).argmax(1)
            == labels.to(out.device),
            targeted=True)

    def resolve_map(self) -> Tensor:
        if not hasattr(self, "label_map"):
            raise AttackError("ReprogramAttack.label(victim, scene) must run before its objective is used.")
        return self.label_map

    def draw(self, sampler, generator, scene, label):
        """A batch of views, each with its own training digit in the window (and that digit as its label)."""
        params = self.sampler_now(sampler).sample(self.batch_size, generator)
        digits, labels = self.task.sample(self.batch_size, generator, "train")
        base = DigitTask.print_into(scene.texture, digits, scene.regions[self.window])
        return params, base, labels

    @property
    def draws_final(self) -> bool:
        """After the curriculum, and once the running success has forgotten its easier views."""
        if self.curriculum <= 0:
            return True
        settle = 2 / max(1e-3, 1 - self.ema)
        return (getattr(self, "progress", 1.0) - self.curriculum) * self.steps >= settle - 1e-6

    def sampler_now(self, sampler):
        """The sampler for the current step (``self.progress``, set by the loop): narrowed early in a curriculum."""
        progress = getattr(self, "progress", 1.0)
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
