"""Gradient-free EOT: refine a printable sticker patch through a victim seen only through queries.

The victim is a ``physattack.victims.query.QueryVictim``: images in, labels or probabilities out, each
image counted against ``attack.queries``. Nothing here differentiates anything: the patch is moved in
a low-dimensional colour basis (``ColourBlocks``: one RGB offset per square block of the sticker grid,
on top of the starting colours, so a transfer patch's detail is kept) and each candidate is judged on
the same step's EOT views (common random numbers), or on the step's approach windows when the run's
sampler draws them (the decision-level objective: the share of drives that run the sign; for a detector or a
stack, each window frame is the detector's tile around the sign, as ``physattack.drive.approach`` draws it).

Two optimizers:

- ``nes``: natural-evolution-strategy gradient estimates with antithetic pairs (Wierstra et al., JMLR 2014; as
  a black-box attack: Ilyas et al., "Black-box Adversarial Attacks with Limited Queries and Information", ICML
  2018), Adam on the estimate. With scores the loss is the log-probability margin of the target over the best
  other label (capped at ``margin``, so won views stop pulling), plus the drives' stop margin; with labels only
  it is minus the share of the step's views (and drives) won: EOT turns a hard label into a graded score, as
  Ilyas et al.'s label-only attack does with noise.
  With ``keep``, the step adds the gradient of the ``init=`` run's victims' own loss (the red team holds them:
  they are the ensemble it attacked by gradient), so the patch keeps fooling them, and with them much of the
  transfer it had, while it specializes to the victim asked.
- ``search``: a (1+λ) random search that redraws a shrinking share of the blocks per child and keeps the best
  child when it is no worse on the step's views, in the spirit of Square Attack (Andriushchenko et al., ECCV
  2020).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor
from tqdm import tqdm

from physattack.attack.detection_objectives import check_threshold_scale, odds_over, sign_labels
from physattack.attack.loop import AttackResult, Draw
from physattack.attack.query_layout import StickerLayout, layout_step
from physattack.attack.query_settings import (OPTIMIZERS, QueryAttackError, QuerySettings, check_budget,
                                              check_victim, views_per_step)
from physattack.patch.placement import texels_per_mm
from physattack.victims.detection import best_scores_on_boxes

class ColourBlocks:
    """The patch's colours as ``start`` plus one RGB offset per ``cell_px`` square block of the texture grid
    under ``mask``: ``dim`` = 3 × blocks numbers, each offset keeping its block's mean colour in [0, 1]; colours
    clipped to [0, 1] and, with a ``palette``, snapped to its nearest colour (what the printer can make)."""

    def __init__(self, start: Tensor, mask: Tensor, cell_px: int, palette: Tensor | None = None):
        on = mask[0] > 0.5
        ys, xs = torch.nonzero(on, as_tuple=True)
        cols = math.ceil(mask.shape[-1] / cell_px)
        cells = (ys // cell_px) * cols + xs // cell_px
        _, self.index = torch.unique(cells, return_inverse=True)
        self.blocks = int(self.index.max()) + 1 if len(self.index) else 0
        self.on, self.mask, self.palette = on, mask, palette
        self.start = start[:, on].clone()                                   # 3×N
        self.cell_px = int(cell_px)
        mean = torch.zeros(self.blocks, 3).index_add_(0, self.index, self.start.T.float())
        mean /= torch.bincount(self.index, minlength=self.blocks).clamp(min=1)[:, None]
        self.low, self.high = -mean, 1 - mean        # offsets beyond these only clip: a block's mean stays a colour

    def clamp(self, offset: Tensor) -> Tensor:
        """``offset`` kept where every block's mean colour stays in [0, 1] (no dead zone of clipped colours)."""
        return torch.maximum(torch.minimum(offset, self.high.to(offset)), self.low.to(offset))

    def free_colors(self, offset: Tensor) -> Tensor:
        """3×Ht×Wt: the colours at ``offset`` under the mask, before any palette snap (what a moved sticker takes)."""
        out = self.start.new_zeros(3, *self.mask.shape[1:])
        out[:, self.on] = (self.start + offset[self.index].T).clamp(0, 1)
        return out

    def colors(self, offset: Tensor) -> Tensor:
        """3×Ht×Wt: the colours at ``offset`` (blocks×3) under the mask, 0 elsewhere. Differentiable in ``offset``
        where it is asked to be (the init= run's victims' gradients): the palette's snap passes the gradient of
        the colour before it straight through."""
        c = (self.start + offset[self.index].T).clamp(0, 1)
        if self.palette is not None:
            snapped = self.palette[torch.cdist(c.T.detach(), self.palette).argmin(1)].T
            c = c + (snapped - c).detach()
        out = self.start.new_zeros(3, *self.mask.shape[1:])
        out[:, self.on] = c
        return out

    def texture(self, offset: Tensor, base: Tensor) -> Tensor:
        return base * (1 - self.mask) + self.colors(offset) * self.mask


@dataclass
class Goal:
    """What the victim's answers are judged by: the target's (or the true class's) label set, the labels that
    read as the sign (for drives), whether the attack is targeted, and the margin at which a view is won."""

    labels: tuple[int, ...]
    signs: tuple[int, ...]
    targeted: bool
    margin: float

    def view_loss(self, probs: Tensor) -> Tensor:
        """B: the capped log-probability margin (lower is better for the attacker)."""
        logp = probs.clamp(min=1e-12).log()
        inside = probs[:, list(self.labels)].sum(-1).clamp(min=1e-12).log()
        rest = logp.clone()
        rest[:, list(self.labels)] = -math.inf
        other = rest.max(-1).values
        margin = other - inside if self.targeted else inside - other
        return margin.clamp(min=-self.margin)

    def view_success(self, labels: Tensor) -> Tensor:
        hit = torch.isin(labels, torch.tensor(self.labels, device=labels.device))
        return hit if self.targeted else ~hit

    def reads_sign(self, labels: Tensor) -> Tensor:
        return torch.isin(labels, torch.tensor(self.signs, device=labels.device))


@dataclass
class DetectorGoal:
    """A detector made to miss the sign (``attack=hide``): a view is won when no detection of the sign's class at
    the detector's operating ``threshold`` overlaps the sign's box (IoU >= ``iou``, as the held-out frames count a
    detection); with scores the loss is that detection's log-odds over the threshold, capped at ``-margin``."""

    label: int
    threshold: float
    margin: float
    iou: float = 0.5

    def sign_scores(self, detections, boxes: Tensor) -> Tensor:
        """B: the best score of a detection of the sign's class on the sign (0: none)."""
        return best_scores_on_boxes(detections, boxes, self.label, iou=self.iou)

    def view_loss(self, scores: Tensor) -> Tensor:
        logit = torch.logit(scores.clamp(1e-6, 1 - 1e-6)) - math.log(self.threshold / (1 - self.threshold))
        return logit.clamp(min=-self.margin)

    def view_success(self, scores: Tensor) -> Tensor:
        return scores < self.threshold

    def reading(self, scores: Tensor, threshold_scale: float = 1.0) -> Tensor:
        """B in [0, 1]: how surely a frame reads the sign, 0.5 at the threshold (its odds over the threshold's), for
        the approach windows' stop margin; ``threshold_scale`` < 1 reads against the threshold times it, as the
        gradient attack's ``sign_reading`` does (``eot.sampler.decision.threshold_scale``)."""
        return odds_over(scores, self.threshold * threshold_scale)


class QueryRun:
    """One query attack: the parts, the wrapped victim, the basis, the generator and the record."""

    def __init__(self, attack, setup, run, tracker, victim):
        self.attack, self.setup, self.run, self.tracker, self.victim = attack, setup, run, tracker, victim
        self.settings: QuerySettings = attack.query
        s = setup
        start = s.scene.texture if self.settings.start == "clean" else s.patch.colors().detach()
        cell = self.cell_px(s.patch, s.scene)
        palette = s.patch.palette if s.patch.palette_constrained else None
        self.blocks = ColourBlocks(start.detach(), s.patch.mask, cell, palette)
        sticker = self.sticker_px(s.patch, s.scene)
        self.layout = StickerLayout(s.patch.mask, s.scene.face_mask, sticker) if self.settings.layout_every else None
        self.moved = {"steps": 0, "taken": 0, "moved": 0, "refused": 0}   # layout steps, moves taken, cells moved,
                                                                           # best children a fresh draw refused
        check_threshold_scale(getattr(getattr(s.sampler, "decision", None), "threshold_scale", 1.0),
                              is_detector=victim.is_detector)     # a classifier has no threshold to read against
        self.label = attack.label(victim, s.scene)
        name = attack.target if attack.targeted else s.scene.class_name
        if victim.is_detector:
            self.goal = DetectorGoal(self.label, victim.score_threshold, self.settings.margin)
        else:
            self.goal = Goal(tuple(victim.label_set(name)), sign_labels(victim, s.scene), attack.targeted,
                             self.settings.margin)
        self.members = self.members_of(setup.guide, s.scene) if self.settings.needs_members else []
        self.generator = torch.Generator().manual_seed(run.seed)
        self.history: list[dict] = []
        self.curve: list[dict] = []
        self.checks: list[dict] = []
        self.best: tuple | None = None              # ((success, -loss), offset, check) of the best patch checked
        self.step = 0

    def members_of(self, guide, scene) -> list[tuple[str, object, Goal]]:
        """(name, victim, goal) of each victim of the ``init=`` run: the red team holds them, and their gradients
        steer the steps (``keep``); the victim asked is never among them."""
        if self.victim.is_detector:
            raise QueryAttackError("attack.query.keep steers a classifier's query run by the init= run's classifiers; "
                                   "for a detector set attack.query.keep=0.")
        if guide is None:
            raise QueryAttackError("attack.query.keep uses the gradients of the init= run's victims; give init= a "
                                   "finished run, or set attack.query.keep=0.")
        pairs = (list(zip(guide.names, guide.members)) if getattr(guide, "members", None) is not None
                 else [(getattr(guide, "name", None) or "init", guide)])
        name = self.attack.target if self.attack.targeted else scene.class_name
        return [(str(n), m, Goal(tuple(m.label_set(name)), (), self.attack.targeted, self.settings.margin))
                for n, m in pairs]

    @property
    def channels(self) -> int:
        """Free numbers per block in a perturbation: 3 (``rgb``) or 1 (``grey``: the same on R, G and B)."""
        return 1 if self.settings.basis == "grey" else 3

    def cell_px(self, patch, scene) -> int:
        """A block's side in texels: ``cell_mm``, or the patch's sticker cell (45 mm when it names none)."""
        if self.settings.cell_mm is not None:
            return max(1, round(self.settings.cell_mm * texels_per_mm(scene)[0]))
        return self.sticker_px(patch, scene)

    @staticmethod
    def sticker_px(patch, scene) -> int:
        """The patch's sticker cell in texels (45 mm when it names none)."""
        return int((patch.mask_search or {}).get("cell_px") or max(2, round(45.0 * texels_per_mm(scene)[0])))

    # -- asking the victim -----------------------------------------------------------------------------
    def texture(self, offset: Tensor, base: Tensor, blocks: ColourBlocks | None = None) -> Tensor:
        blocks = blocks or self.blocks
        texture = blocks.texture(offset, base)
        model = self.setup.colour_model
        return model.print_patch(texture, blocks.mask) if model is not None else texture

    def ask(self, offset: Tensor, draw, blocks: ColourBlocks | None = None) -> tuple[float, float]:
        """(loss, success) of the patch at ``offset`` (of ``blocks``: the run's, or a moved layout's) on ``draw``'s
        views, through the victim: loss is lower for the attacker; with labels only it is minus the success."""
        s = self.setup
        with torch.no_grad():
            views = s.pipeline(s.scene, self.texture(offset, draw.base, blocks), draw.params)
        images = views.images
        asked = torch.ones(len(images), dtype=torch.bool, device=images.device)
        if draw.windows is not None and not self.victim.is_detector:   # a classifier reads only the frames the
            asked[:draw.windows.frames] = draw.windows.found.to(images.device)   # stack's detector found
        answer = self.victim(images[asked])
        if self.victim.is_detector:                        # context frames or the windows' tiles: every one is asked
            won = self.goal.view_success(sign := self.goal.sign_scores(answer, views.boxes))
            success = float(won.float().mean())
            if draw.windows is not None:                   # the share of drives whose windows never hold k readings
                success = float(draw.windows.success(~won, won))
            if self.victim.answers == "labels":
                return -success - 1e-3 * float(won.float().mean()), success
            loss = self.goal.view_loss(sign).mean()
            if draw.windows is not None:                   # a frame reads the sign with the odds over the threshold
                o = draw.windows.objective
                loss = loss + o.weight * draw.windows.margin(self.goal.reading(sign, o.threshold_scale)).mean()
            return float(loss), success
        scores = self.victim.answers == "scores"
        full = (answer.new_zeros(len(images), answer.shape[-1]) if scores
                else answer.new_full((len(images),), -1))
        full[asked] = answer
        labels = full.argmax(-1) if scores else full
        won = self.goal.view_success(labels) & asked
        success = float(won[asked].float().mean()) if asked.any() else 0.0
        if draw.windows is not None:
            success = float(draw.windows.success(self.goal.reads_sign(labels) & asked, won))
        if not scores:
            return -success - 1e-3 * float(won.float().mean()), success
        loss = self.goal.view_loss(full[asked]).mean()
        if draw.windows is not None:
            p_sign = full[:, list(self.goal.signs)].sum(-1)
            loss = loss + draw.windows.objective.weight * draw.windows.margin(p_sign).mean()
        return float(loss), success

    # -- the steps -------------------------------------------------------------------------------------
    def draw(self, refit: bool = True):
        """(a step's draw, progress); ``refit=False``: a second draw of the same step, the framing as it is."""
        s, a = self.setup, self.attack
        progress = min(1.0, self.victim.images / max(1, self.victim.budget or 1))
        if refit and hasattr(s.sampler, "refit") and s.sampler.refit_due(self.step):
            with torch.no_grad():
                texture = self.texture(self.offset, s.scene.texture)
            own = torch.Generator().manual_seed(self.run.seed * 100_003 + self.step)
            s.sampler.refit(self.step, s.scene, texture, own)
        if hasattr(s.sampler, "windows"):
            return a.draw(s.sampler, self.generator, s.scene, self.label, progress), progress
        return Draw(s.sampler.sample(self.settings.views, self.generator), s.scene.texture, self.label), progress

    def kept(self, draw) -> Tensor:
        """blocks×3: the gradient of the ``init=`` run's victims' mean capped loss on ``draw``'s views, rendered
        from the current offset (``keep``). The victim asked is not called here."""
        s = self.setup
        offset = self.offset.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            images = s.pipeline(s.scene, self.texture(offset, draw.base), draw.params).images
            loss = sum(goal.view_loss(member(images).softmax(-1)).mean() for _, member, goal in self.members)
            return torch.autograd.grad(loss / len(self.members), offset)[0]

    def affords(self, draw) -> bool:
        """Whether the budget left answers every image a step on ``draw`` may ask about (a detector's approach
        windows draw a varying number of tiles a step) and still the last check on the held-aside draw."""
        return self.victim.can_answer(self.settings.images_per_step(len(draw.params)) + self.reserve)

    # -- keeping the best patch by a counted estimate ----------------------------------------------------
    def held_aside(self) -> list:
        """``select_draws`` draws like a step's (its views or approach windows, at the full distribution), from a
        generator of their own: the steps draw exactly what they would without selection."""
        st, s, a = self.settings, self.setup, self.attack
        own = torch.Generator().manual_seed(self.run.seed * 1_000_003 + 77)
        if hasattr(s.sampler, "windows"):
            return [a.draw(s.sampler, own, s.scene, self.label, 1.0) for _ in range(st.select_draws)]
        return [Draw(s.sampler.sample(st.views, own), s.scene.texture, self.label) for _ in range(st.select_draws)]

    def check(self) -> None:
        """The current patch asked about on the held-aside draws (counted); the best so far is kept."""
        answers = [self.ask(self.offset.detach(), draw) for draw in self.held]
        loss = sum(a[0] for a in answers) / len(answers)
        success = sum(a[1] for a in answers) / len(answers)
        entry = {"images": self.victim.images, "step": self.step, "success": success, "loss": loss}
        self.checks.append(entry)
        if self.tracker is not None:
            self.tracker.log({"query/held_aside_success": success}, step=self.step)
        if self.best is None or (success, -loss) > self.best[0]:
            self.best = ((success, -loss), (self.blocks, self.offset.detach().clone()), entry)

    def adopt(self, blocks: ColourBlocks, offset: Tensor | None = None) -> None:
        """Take ``blocks`` (a moved layout, or the best checked) at ``offset`` (0: its own colours); Adam restarts
        (keeping the moments of the blocks both layouts share measured worse on the 48-px MobileNetV3: README)."""
        self.blocks = blocks
        self.offset = torch.zeros(blocks.blocks, 3) if offset is None else offset.clone()
        if self.adam:
            self.adam = torch.optim.Adam([self.offset.requires_grad_()], lr=self.settings.lr)

    def nes_step(self) -> dict | None:
        draw, progress = self.draw()
        if not self.affords(draw):
            return None
        st = self.settings
        u = torch.randn(st.samples, self.blocks.blocks, self.channels, generator=self.generator).expand(-1, -1, 3)
        losses, wins = [], []
        for i in range(st.samples):
            for sign in (1.0, -1.0):
                f, w = self.ask(self.offset + sign * st.sigma * u[i], draw)
                losses.append(f)
                wins.append(w)
        plus, minus = torch.tensor(losses[0::2]), torch.tensor(losses[1::2])
        grad = ((plus - minus)[:, None, None] * u).sum(0) / (2 * st.sigma * st.samples)
        if self.members:
            grad = grad + st.keep * self.kept(draw).to(grad)
        for group in self.adam.param_groups:
            group["lr"] = st.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        self.offset.grad = grad.to(self.offset)
        self.adam.step()
        with torch.no_grad():
            self.offset.copy_(self.blocks.clamp(self.offset))
        return {"loss": sum(losses) / len(losses), "batch_success": sum(wins) / len(wins),
                "lr": self.adam.param_groups[0]["lr"], "grad_norm": float(grad.abs().sum())}

    def search_step(self) -> dict | None:
        draw, progress = self.draw()
        if not self.affords(draw):
            return None
        st = self.settings
        parent_loss, parent_win = self.ask(self.offset, draw)
        share = st.change * (1 - 0.75 * progress)
        k = max(1, round(share * self.blocks.blocks))
        best = (parent_loss, parent_win, None)
        for _ in range(st.samples):
            child = self.offset.detach().clone()
            pick = torch.randperm(self.blocks.blocks, generator=self.generator)[:k]
            step = (torch.rand(k, self.channels, generator=self.generator) * 2 - 1).expand(-1, 3) * st.epsilon
            child[pick] = child[pick] + step.to(child)
            child = self.blocks.clamp(child)
            loss, win = self.ask(child, draw)
            if loss <= best[0]:
                best = (loss, win, child)
        accepted = best[2] is not None
        if accepted:
            with torch.no_grad():
                self.offset.copy_(best[2])
        return {"loss": best[0], "batch_success": best[1], "parent_success": parent_win, "accepted": int(accepted),
                "blocks_changed": k}

    def judge(self) -> None:
        """The current patch on the quick grid through the victim itself (not counted), for the plot."""
        if self.setup.judge is None:
            return
        with torch.no_grad():
            rate = float(self.setup.judge(self.texture(self.offset, self.setup.scene.texture)))
        self.curve.append({"images": self.victim.images, "step": self.step, "success": rate})
        if self.tracker is not None:
            self.tracker.log({"query/images": self.victim.images, "query/judged_success": rate}, step=self.step)

    def go(self) -> dict:
        st, victim = self.settings, self.victim
        cost = check_budget(st, victim.budget, self.setup.sampler)
        self.adam = st.method == "nes"           # Adam's parameter is the offset; never part of a graph
        self.adopt(self.blocks)
        self.held = self.held_aside() if st.select else []
        self.reserve = sum(len(draw.params) for draw in self.held)      # the most images one check asks about
        if self.held and not victim.can_answer(cost + 2 * self.reserve):
            raise QueryAttackError(f"attack.queries={victim.budget} leaves no step between the first and last checks "
                                   f"on the held-aside draw ({self.reserve} images each, {cost} a step); raise "
                                   f"attack.queries or lower attack.query.select_draws.")
        self.judge()
        if self.held:
            self.check()
        next_judge = st.judge_every or math.inf
        next_check = st.select or math.inf
        bar = tqdm(total=victim.budget, desc=f"queries ({st.method}, {st.answers})", unit="img",
                   disable=not self.run.progress)
        ema = 0.0
        try:
            while victim.can_answer(cost + self.reserve) and not self.attack._signals.stop:
                before = victim.images
                layout = self.layout is not None and self.step % st.layout_every == st.layout_every - 1
                record = (layout_step(self) if layout else self.nes_step() if self.adam else self.search_step())
                if record is None:                    # this step's draw would overrun the budget
                    break
                self.step += 1
                ema = record["batch_success"] if self.step == 1 else 0.9 * ema + 0.1 * record["batch_success"]
                record.update(step=self.step, images=victim.images, running_success=ema, adv_loss=record["loss"])
                self.history.append(record)
                if self.tracker is not None:
                    self.tracker.log({f"train/{k}": v for k, v in record.items() if k != "step"}, step=self.step)
                bar.update(victim.images - before)
                bar.set_postfix(success=f"{ema:.2f}")
                if victim.images >= next_check and victim.can_answer(cost + 2 * self.reserve):
                    self.check()
                    next_check = victim.images + st.select
                if victim.images >= next_judge:
                    self.judge()
                    next_judge = (victim.images // st.judge_every + 1) * st.judge_every
        finally:
            bar.close()
        if self.held:                                 # the last patch checked too, then the best one handed back
            self.check()
            self.adopt(*self.best[1])
        if not self.curve or self.curve[-1]["images"] != victim.images:
            self.judge()
        return {"victim": victim.name, "answers": st.answers, "optimizer": st.method, "images": victim.images,
                "budget": victim.budget, "steps": self.step, "images_per_step": cost, "blocks": self.blocks.blocks,
                "block_px": self.blocks.cell_px, "basis": st.basis, "start": st.start, "curve": self.curve,
                "keep": st.keep, "kept": [n for n, _, _ in self.members], "select": st.select, "checks": self.checks,
                "selected": self.best[2] if self.best is not None else None, "gradient_calls": 0,
                "layout": {"every": st.layout_every, "cells": st.layout_cells, "confirm": st.layout_confirm,
                           **self.moved} if self.layout else None}


def run_query(attack, setup, run, run_dir: str | Path, tracker=None):
    """Run ``attack`` (an ``EOTAttack`` with ``method=query``) on ``setup``: wrap the victim, spend the budget,
    leave the patch at the final colours; returns the ``AttackResult`` with its ``queries`` record."""
    from physattack.victims.query import QueryVictim

    setup.patch.anneal(1.0)
    victim = QueryVictim(setup.victim, attack.query.answers, attack.queries, setup.victim_name)
    runner = QueryRun(attack, setup, run, tracker, victim)
    attack._signals.install()
    try:
        queries = runner.go()
    finally:
        attack._signals.restore()
    if getattr(setup.victim, "is_stack", False):
        queries["stack_parts"] = [setup.victim.detector_name, setup.victim.classifier_name]
    with torch.no_grad():
        setup.patch.mask.copy_(runner.blocks.mask)                    # where layout steps moved the stickers
        setup.patch.set_colors(runner.blocks.colors(runner.offset.detach()))
    state = {k: v.detach().clone() for k, v in setup.patch.state_dict().items()}
    return AttackResult(best_state=state, best_step=runner.step, steps_done=runner.step, history=runner.history,
                        interrupted=attack._signals.stop, signal=attack._signals.signal, queries=queries)


__all__ = ["ColourBlocks", "DetectorGoal", "Goal", "OPTIMIZERS", "QueryAttackError", "QuerySettings", "check_budget",
           "check_victim", "run_query", "views_per_step"]
