"""Grid evaluation: the clean and the attacked texture through the same held-out views."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from physattack.eot.grid import EvalGrid
from physattack.eot.pipeline import ViewPipeline
from physattack.evaluate.metrics import classification_metrics
from physattack.scene.scene import Scene


@dataclass
class GridResult:
    """Per-view outcomes on the grid, in ``grid.conditions()`` order."""

    conditions: list[dict]
    clean_pred: Tensor
    adv_pred: Tensor
    clean_probs: Tensor
    adv_probs: Tensor
    patch_visible: Tensor        # share of each attacked view's pixels that changed
    metrics: dict


@dataclass
class Comparison:
    """The same views of the sign with two textures: the scene, its clean and its attacked texture, and the
    pipeline that renders both (``(scene, texture, params) -> RenderedViews``, held-out backgrounds)."""

    scene: Scene
    clean_texture: Tensor
    adv_texture: Tensor
    pipeline: ViewPipeline

    def views(self, params):
        """The clean and the attacked ``RenderedViews`` of ``params``."""
        return (self.pipeline(self.scene, self.clean_texture, params),
                self.pipeline(self.scene, self.adv_texture, params))


@torch.no_grad()
def classify_clean_and_attacked(cmp: Comparison, victim, params, batch_size: int = 64) -> tuple[Tensor, Tensor, Tensor]:
    """Softmax of the victim on each view with the clean and the attacked texture (V×K each, CPU),
    and the share of each view's pixels the patch visibly changes (V)."""
    clean_p, adv_p, visible = [], [], []
    for s in range(0, len(params), batch_size):
        clean_views, adv_views = cmp.views(params[s:s + batch_size])
        clean, adv = clean_views.images, adv_views.images
        clean_p.append(torch.softmax(victim(clean).float(), 1).cpu())
        adv_p.append(torch.softmax(victim(adv).float(), 1).cpu())
        visible.append(((clean - adv).abs().amax(1) > 2 / 255).float().mean((1, 2)).cpu())
    return torch.cat(clean_p), torch.cat(adv_p), torch.cat(visible)


@torch.no_grad()
def evaluate_on_grid(cmp: Comparison, victim, grid: EvalGrid, labels: tuple[int, int | None], batch_size: int = 64,
                     keep_images: int = 0) -> tuple[GridResult, Tensor | None, Tensor | None]:
    """Classify every grid view with the clean and the attacked texture; ``labels``: the true label's index and
    the target's (None: untargeted).

    Returns the result, and (when ``keep_images``) the first clean and attacked images picked evenly
    across the grid for a picture of the views.
    """
    true_label, target_label = labels
    params = grid.params()
    clean_probs, adv_probs, visible = classify_clean_and_attacked(cmp, victim, params, batch_size)
    metrics = classification_metrics(clean_probs.argmax(1), adv_probs.argmax(1), adv_probs, true_label, target_label)
    result = GridResult(grid.conditions(), clean_probs.argmax(1), adv_probs.argmax(1), clean_probs, adv_probs,
                        visible, metrics)
    if not keep_images:
        return result, None, None
    pick = torch.linspace(0, len(params) - 1, keep_images).round().long()
    clean_views, adv_views = cmp.views(params[pick])
    return result, clean_views.images.cpu(), adv_views.images.cpu()
