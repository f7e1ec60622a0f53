"""Physical adversarial reprogramming (Elsayed, Goodfellow, Sohl-Dickstein 2018): a printed frame
makes a frozen sign classifier read digits shown in the card's window.

The victim's own labels are remapped to the task's classes (``label_map[i]`` is the victim label
that means digit ``i``); the program is trained with the same EOT loop as any patch, each view
showing a different training digit in the window; evaluation uses held-out digits under held-out views.
"""

from __future__ import annotations

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
        other arguments: as EOTAttack (steps, batch_size, lr, priors...).
    """

    needs_true_label = False

    def __init__(self, label_map: list[str] | None = None, classes: int = 9, window: str = "window",
                 split_seed: int = 0, **kwargs):
        kwargs.setdefault("objective", "targeted")
        kwargs["target"] = kwargs.get("target") or "digits"
        kwargs.setdefault("mask_search_steps", 0)
        super().__init__(**kwargs)
        self.label_map_names, self.classes, self.window, self.split_seed = label_map, classes, window, split_seed
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
        params = sampler.sample(self.batch_size, generator)
        digits, labels = self.task.sample(self.batch_size, generator, "train")
        base = DigitTask.print_into(scene.texture, digits, scene.regions[self.window])
        return params, base, labels
