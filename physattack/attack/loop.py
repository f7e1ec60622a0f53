"""The EOT loop: one optimizer over patch parameters, a batch of sampled views per step.

The batch dimension is the expectation: each step renders ``batch_size`` fresh draws of the
sampler, asks the frozen victim, and steps the patch on the mean objective plus printability priors.

With an ``Ensemble`` victim the views are rendered once per step and the members are asked one
after another: each member's loss is differentiated to the rendered images alone (its activations
are freed before the next member runs, so peak memory stays near one victim's), the members'
image gradients are weighted (``Ensemble.weights``) and summed, and one backward takes the sum
through the camera effects, the renderer and the patch.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor, nn
from tqdm import tqdm

from physattack.config import RunConfig
from physattack.attack.signals import StopSignals
from physattack.attack.checkpoint import LoopState, load_checkpoint, save_checkpoint
from physattack.attack.errors import AttackError
from physattack.attack.intermediate import FeatureLevel, Guide, tap
from physattack.attack.mask_search import MaskSearch, search_sticker_mask
from physattack.attack.detection_objectives import check_threshold_scale, reads_sign, sign_labels, sign_probability
from physattack.attack.objectives import DETECTOR_OBJECTIVES, DETECTOR_ONLY, OBJECTIVES, Objective, backward
from physattack.attack.restarts import best_start, check_restarts
from physattack.attack.seen import add_projected
from physattack.patch.base import Patch
from physattack.patch.placement import PlacementError, place_stickers, sticker_pieces, texels_per_mm
from physattack.printing import non_printability_score, total_variation
from physattack.scene.scene import Scene
from physattack.victims.ensemble import Ensemble


#: How an attack reaches its victim: through its gradient, or only through queries (``physattack.attack.query``).
METHODS = ("gradient", "query")


@dataclass
class AttackSetup:
    """The built parts one attack optimizes over."""

    scene: Scene
    patch: Patch
    victim: nn.Module
    pipeline: Callable          # ViewPipeline-like: (scene, texture, params) -> views
    sampler: object             # .sample(n, generator) -> SceneParams
    palette: Tensor
    colour_model: object | None = None
    judge: Callable | None = None       # texture -> success on the quick grid (a query attack's plot; never its guide)
    victim_name: str | None = None      # what reports call the victim (a query attack's headline)
    placed: bool = False                # the patch's stickers are placed already (init=): no mask search
    guide: nn.Module | None = None      # the init= run's victim(s), held white-box: a query attack's keep
    seen: Callable | None = None        # approach windows: the stack detector's term (physattack.attack.seen.SeenTerm;
                                        # with a true .project its gradient is projected off the attack's)
    validation: Callable | None = None  # printed texture -> {member: share of the red team's own drives run}


@dataclass
class AttackResult:
    """What an attack leaves: the best patch's state, the step reached, the per-step history, and
    whether a signal stopped it early (``signal``: its number, e.g. 2 for SIGINT, 15 for SIGTERM)."""

    best_state: dict
    best_step: int
    steps_done: int
    history: list[dict] = field(default_factory=list)
    interrupted: bool = False
    zero_grad_steps: int = 0
    signal: int | None = None
    queries: dict | None = None     # a query attack's record: images asked, answers, the success-vs-queries curve
    restarts: list[dict] | None = None  # attack.restarts: each start's seed and running success, and the one chosen


@dataclass
class Draw:
    """One step's batch: the views' SceneParams, the base texture(s) the patch goes on (3×H×W, or
    B×3×H×W when each view shows its own), the objective's label(s), and for a sampler of approach
    windows (``physattack.drive.approach``) the windows the views make up (the decision-level loss)."""

    params: Any
    base: Tensor
    label: Any
    windows: Any = None


@dataclass
class Member:
    """One ensemble member as the loop asks it: its name, the victim, its objective and its own index
    of the objective's label (members may order their labels differently)."""

    name: str
    victim: nn.Module
    objective: Objective
    label: int
    signs: tuple[int, ...] = ()     # its labels of the scene's class (approach windows)


@dataclass
class _Loop:
    """What every step of one run shares: the parts, the run's switches, the objective and its label,
    the palette on the scene's device, the optimizer, its schedule and the sampler's generator; for
    an ``Ensemble`` victim, its members (``None`` for one victim)."""

    setup: AttackSetup
    run: RunConfig
    objective: Objective
    label: Any
    palette: Tensor
    opt: torch.optim.Optimizer
    sched: torch.optim.lr_scheduler.LRScheduler
    generator: torch.Generator
    members: list[Member] | None = None
    sign_labels: tuple[int, ...] = ()      # the victim's labels of the scene's class (approach windows)
    guide: Guide | None = None             # attack.features: what the feature-level term needs


@dataclass(eq=False)
class EOTAttack:
    """Expectation-over-transformation patch optimization (Athalye et al. 2018; RP2, Eykholt et al. 2018).

    The attack is its settings (``conf/attack/*.yaml`` names them; each is checked when the attack is
    made) and the loop that runs on them.

    Args:
        objective: ``targeted`` (towards ``target``) or ``untargeted`` (away from the scene's class).
        target: the target label's name, for targeted attacks.
        steps, batch_size, lr: Adam on the patch parameters for ``steps`` steps of ``batch_size`` views.
        lr_schedule: ``cosine`` (to 5 % of lr) or ``constant``.
        nps_weight, tv_weight: weights of the non-printability score and total variation.
        checkpoint_every: steps between checkpoints (``checkpoint.pt`` in the run directory); 0: only at the end.
        ema: smoothing of the running success rate that picks the best patch (from step 1 / (1 - ema) on), in [0, 1).
        mask_search_steps: steps of the sticker mask search, for patches that ask for one.
        placement: the placement error of the deployed stickers (``physattack.patch.placement.PlacementError``,
            or its arguments as a dict), or None (off). When set, every view of every step shows the
            stickers as placed with an error drawn for that view (after printing, before rendering),
            so the patch learns to survive being stuck on by hand; the gradient reaches the design
            through the warp. Draws come from the run's generator, after the views'.
        method: ``gradient`` (Adam through the victim) or ``query``: the victim is seen only through queries
            (``physattack.victims.query.QueryVictim``: labels or scores, each image counted) and a gradient-free
            optimizer refines the patch's sticker colours (``physattack.attack.query``).
        queries: a query attack's budget, in images asked about.
        query: a query attack's settings (``physattack.attack.query.QuerySettings``, or its keys as a dict).
        features: a feature-level transfer term on the members' mid-layer features (``ila``: refine the ``init=``
            run's patch along the direction it moved them; ``fia``: feature importance), added to each member's
            objective (``physattack.attack.intermediate.FeatureLevel``, or its keys as a dict).
        restarts, restart_steps, restart_judge: random restarts (``physattack.attack.restarts``): ``restarts``
            starts from seeds of their own, each through the mask search and ``restart_steps`` steps; the best, as
            ``restart_judge`` compares them (``RestartJudge``), carries on to ``steps``. 1: one start, the run's seed.
    """

    objective: str = "targeted"
    target: str | None = "yield"
    steps: int = 200
    batch_size: int = 24
    lr: float = 0.1
    lr_schedule: str = "cosine"
    nps_weight: float = 0.05
    tv_weight: float = 0.5
    checkpoint_every: int = 50
    ema: float = 0.9
    mask_search_steps: int = 40
    placement: PlacementError | dict | None = None
    method: str = "gradient"
    queries: int = 50_000
    query: object = None
    features: object = None
    restarts: int = 1
    restart_steps: int = 50
    restart_judge: object = None

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise AttackError(f"Unknown objective '{self.objective}'; choose one of {sorted(OBJECTIVES)}.")
        if OBJECTIVES[self.objective].targeted and not self.target:
            raise AttackError("A targeted attack needs attack.target, the label to aim for (e.g. yield).")
        if self.lr_schedule not in {"cosine", "constant"}:
            raise AttackError(f"attack.lr_schedule must be cosine or constant, not '{self.lr_schedule}'.")
        self.steps = AttackError.check_range("attack.steps", self.steps, 1, integer=True, why="optimizer steps")
        self.batch_size = AttackError.check_range("attack.batch_size", self.batch_size, 1, integer=True,
                                                  why="views per step")
        AttackError.check_range("attack.lr", self.lr, 0, lo_open=True, why="Adam's learning rate")
        AttackError.check_range("attack.nps_weight", self.nps_weight, 0)
        AttackError.check_range("attack.tv_weight", self.tv_weight, 0)
        AttackError.check_range("attack.ema", self.ema, 0, 1, hi_open=True, why="the running success's smoothing")
        self.checkpoint_every = AttackError.check_range("attack.checkpoint_every", self.checkpoint_every, 0,
                                                        integer=True,
                                                        why="steps between checkpoints; 0 saves only at the end")
        self.mask_search_steps = AttackError.check_range("attack.mask_search_steps", self.mask_search_steps, 0,
                                                         integer=True)
        if self.placement is not None and not isinstance(self.placement, PlacementError):
            self.placement = PlacementError(**dict(self.placement))
        if self.method not in METHODS:
            raise AttackError(f"attack.method must be gradient or query, not {self.method!r}.")
        self.queries = AttackError.check_range("attack.queries", self.queries, 1, integer=True,
                                               why="a query attack's budget in images")
        from physattack.attack.query import QuerySettings

        self.query = QuerySettings.of(self.query)
        if self.method == "query" and self.placement is not None:
            raise AttackError("attack.placement is a gradient attack's setting; a query attack (attack.method=query) "
                              "judges the patch as designed: set attack.placement=null.")
        self.features = FeatureLevel.of(self.features)
        if self.features.on and (self.method == "query" or self.placement is not None):
            raise AttackError("attack.features works through the victims' gradients on the patch as designed: use it "
                              "with attack.method=gradient and attack.placement=null, or set attack.features.weight=0.")
        check_restarts(self)
        self._signals = StopSignals()

    needs_true_label = True     # the victim must know the scene's class (not so for reprogramming)

    @property
    def targeted(self) -> bool:
        return OBJECTIVES[self.objective].targeted

    def label(self, victim, scene) -> int:
        """The label the objective works with: the target (targeted) or the scene's true class."""
        return victim.label_index(self.target if self.objective_for(victim).targeted else scene.class_name)

    def objective_for(self, victim) -> Objective:
        """This attack's objective in the form ``victim``'s outputs need (detectors have their own)."""
        if self.method == "query":
            from physattack.attack.query import check_victim

            check_victim(victim, self.objective)
        if getattr(victim, "is_detector", False):
            return DETECTOR_OBJECTIVES[self.objective]
        if self.objective in DETECTOR_ONLY:
            raise AttackError(f"attack={self.objective} needs a detector victim (victim=detnet or a torchvision "
                              "detector); this victim is a classifier, so use attack=yield or attack=untargeted.")
        return OBJECTIVES[self.objective]

    def run(self, setup: AttackSetup, run: RunConfig, run_dir: str | Path, tracker=None) -> AttackResult:
        """Optimize ``setup.patch`` in place and return the best state seen (by running success, then loss).

        ``run`` gives the seed (torch's global seed, then the sampler's generator, in that order),
        ``resume`` (a run directory or its checkpoint.pt), ``progress`` (a progress bar) and the device
        switches ``amp`` and ``channels_last``. ``setup.colour_model`` (a
        ``physattack.printing.ColourModel``) turns the patch's texels into their printed colours before
        rendering. The patch is annealed by the share of steps done, and only a state whose colours
        are final (``patch.colors_final``) and whose draws are the full distribution can be the best. With
        ``restarts`` > 1 a fresh run first tries its starts (``physattack.attack.restarts``); a resumed one has chosen.
        """
        if self.method == "query":
            if run.resume:
                raise AttackError("A query attack (attack.method=query) keeps no checkpoint to resume; start it again "
                                  "with init= the patch to refine.")
            from physattack.attack.query import run_query

            self.check_patch(setup.patch, setup.placed)
            torch.manual_seed(run.seed)
            return run_query(self, setup, run, run_dir, tracker)
        checkpoint = Path(run_dir) / "checkpoint.pt"
        extra = 0 if run.resume else (self.restarts - 1) * self.restart_steps      # the losing starts' steps
        bar = tqdm(total=self.steps + extra, desc="attack", unit="step", disable=not run.progress)

        def step(loop: _Loop, state: LoopState, restart: int | None = None) -> None:
            record = self._step(loop, state)
            if tracker is not None and restart is None:
                tracker.log(self.tracked(record), step=state.step)
            bar.update(1)
            bar.set_postfix(loss=f"{record['loss']:.3f}", success=f"{state.ema_success:.2f}",
                            **({} if restart is None else {"start": f"{restart + 1}/{self.restarts}"}))

        self._signals.install()
        loop, state = None, None
        try:
            torch.manual_seed(run.seed)
            if run.resume or self.restarts == 1:
                loop = self._start(setup, run, torch.Generator().manual_seed(run.seed))
                state = load_checkpoint(self, run.resume, loop) if run.resume else self._place(loop)
                bar.update(state.step)
            else:
                loop, state = best_start(self, setup, run, step, lambda: self._signals.stop, tracker)
                bar.total -= (self.restarts - len(state.starts)) * self.restart_steps   # starts not tried: off the bar
            while state.step < self.steps and not self._signals.stop:
                step(loop, state)
                if self.checkpoint_every and state.step % self.checkpoint_every == 0:
                    save_checkpoint(self, checkpoint, loop, state, tracker)
        finally:
            bar.close()
            if state is not None:
                self._finish(setup.patch, state)
                save_checkpoint(self, checkpoint, loop, state, tracker)
            self._signals.restore()
        return AttackResult(best_state=state.best_state, best_step=state.best_step, steps_done=state.step,
                            history=state.history, interrupted=self._signals.stop, zero_grad_steps=state.zero_grad,
                            signal=self._signals.signal, restarts=state.starts or None)

    @staticmethod
    def tracked(record: dict) -> dict:
        """A step's record as the tracker logs it: ``train/<key>`` for each number, and per ensemble
        member ``train/success/<name>``, ``train/member_loss/<name>`` (and ``train/member_weight/<name>``)."""
        out = {}
        for key, value in record.items():
            if isinstance(value, dict):
                prefix = "success" if key == "member_success" else key
                out.update({f"train/{prefix}/{name}": v for name, v in value.items()})
            elif key != "step":
                out[f"train/{key}"] = value
        return out

    def check_patch(self, patch: Patch, placed: bool = False) -> None:
        """Refuse a patch this attack cannot optimize: placement error needs stickers to move; a query attack needs
        stickers, placed already (``placed``: from ``init=``) unless the patch's own layout is fixed (a mask search
        needs a gradient). The run calls it before its first step; a builder may call it earlier."""
        if self.placement is not None and not patch.cut_as_stickers:
            raise AttackError(f"attack.placement moves stickers, but a {type(patch).__name__} is not cut into "
                              "stickers; use patch=sticker or set attack.placement=null.")
        if self.method == "query" and not patch.cut_as_stickers:
            raise AttackError(f"attack.method=query refines sticker colours, but a {type(patch).__name__} has no "
                              "stickers; use patch=sticker.")
        if self.method == "query" and patch.mask_search is not None and not placed:
            raise AttackError("attack.method=query starts from stickers already placed, and patch.shape=search "
                              "places them with a gradient; give init=<a finished run> (its stickers), or "
                              "patch.shape=bars or patch.mask_png.")

    def check_budget(self, sampler) -> None:
        """Refuse a query budget below one step's images (the builder calls it, before any query)."""
        if self.method == "query":
            from physattack.attack.query import check_budget

            check_budget(self.query, self.queries, sampler)

    def _start(self, setup: AttackSetup, run: RunConfig, generator: torch.Generator) -> _Loop:
        self.check_patch(setup.patch, setup.placed)
        label = self.label(setup.victim, setup.scene)
        objective = self.objective_for(setup.victim)
        opt = torch.optim.Adam(setup.patch.parameters(), lr=self.lr)
        sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.steps, eta_min=0.05 * self.lr)
                 if self.lr_schedule == "cosine" else torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0))
        members = self.members_of(setup.victim, setup.scene) if isinstance(setup.victim, Ensemble) else None
        signs = ()
        if hasattr(setup.sampler, "windows"):
            signs = self.check_windows(setup.victim, setup.scene, setup.sampler)
        guide = None
        if self.features.on:
            named = ({"victim": (setup.victim, label, sign_labels(setup.victim, setup.scene))} if members is None
                     else {m.name: (m.victim, m.label, m.signs) for m in members})
            guide = Guide.of(self.features, setup, named, run.seed, objective.targeted)
        return _Loop(setup, run, objective, label, setup.palette.to(setup.scene.texture.device), opt, sched, generator,
                     members, signs, guide)

    def check_windows(self, victim, scene, sampler=None) -> tuple[int, ...]:
        """Refuse what approach windows cannot serve (an attack that learns from one victim's outputs; a
        stricter reading threshold for a classifier, which has none); returns the victim's labels of the
        scene's class, those that stop the car."""
        if type(self).observe is not EOTAttack.observe:
            raise AttackError(f"{type(self).__name__} learns from one victim's outputs, not from drives: use "
                              "eot=default.")
        check_threshold_scale(getattr(getattr(sampler, "decision", None), "threshold_scale", 1.0),
                              is_detector=getattr(victim, "is_detector", False))
        return sign_labels(victim, scene)

    def members_of(self, ensemble: Ensemble, scene) -> list[Member]:
        """Each member with its objective and its own index of the label, looked up by name; an
        attack that cannot split its steps over members, or a member without the label, is refused
        here (the run calls it before its first step; a builder may call it earlier)."""
        if type(self).observe is not EOTAttack.observe:
            raise AttackError(f"{type(self).__name__} learns from one victim's outputs (observe), so it cannot "
                              "split its steps over an ensemble; use a single victim (for example victim=signnet).")
        name = self.target if self.targeted else scene.class_name
        indices = ensemble.member_label_indices(name)
        signs = [sign_labels(m, scene) for m in ensemble.members]
        return [Member(n, m, self.objective_for(m), i, s)
                for n, m, i, s in zip(ensemble.names, ensemble.members, indices, signs)]

    def _place(self, loop: _Loop) -> LoopState:
        """A fresh run's state, after the mask search for a patch that asks for one (RP2's first stage)."""
        patch = loop.setup.patch
        if patch.mask_search is not None and self.mask_search_steps > 0 and not loop.setup.placed:
            s = loop.setup
            patch.set_mask(search_sticker_mask(
                scene=s.scene, pipeline=s.pipeline, sampler=s.sampler,
                adversarial=lambda views: self._adversarial(loop, views),
                search=MaskSearch(area=patch.mask_search["area"], cell_px=patch.mask_search["cell_px"],
                                  steps=self.mask_search_steps, batch_size=self.batch_size),
                generator=loop.generator))
        return LoopState(best_state=copy.deepcopy(patch.state_dict()))

    def _step(self, loop: _Loop, state: LoopState) -> dict:
        """One optimizer step on a fresh batch of draws; updates ``state`` and returns the step's record."""
        s, patch = loop.setup, loop.setup.patch
        progress = state.step / self.steps
        if hasattr(s.sampler, "refit") and s.sampler.refit_due(state.step):
            self._refit(loop, state)
        draw = self.draw(s.sampler, loop.generator, s.scene, loop.label, progress)
        patch.anneal(progress)
        texture = patch.apply(draw.base)
        if s.colour_model is not None:
            texture = s.colour_model.print_patch(texture, patch.mask)
        if self.placement is not None:
            texture = self._placed(loop, texture, draw.base, len(draw.params))
        views = s.pipeline(s.scene, texture, draw.params)
        refs = loop.guide.references(s.pipeline, s.scene, draw.params, draw.base) if loop.guide else None
        if loop.members is None:
            with tap(loop.guide, "victim") as features:
                output = self._victim_output(s.victim, views.images, loop.run)
            self.observe(output, draw.label, progress)
            adv = loop.objective.loss(output, draw.label, views).mean()
            if refs is not None:
                adv = adv + loop.guide.term("victim", features,
                                            lambda im: self._victim_output(s.victim, im, loop.run), refs)
            if draw.windows is not None:
                adv = adv + self._decision_loss(draw.windows, output, loop.sign_labels, views)
        else:
            adv, images_grad, per_member = self._ensemble_gradient(loop, views, draw.windows, refs)
        colors = patch.colors()
        nps = non_printability_score(colors, loop.palette, patch.mask)
        tv = total_variation(colors, patch.mask)
        loss = adv + self.nps_weight * nps + self.tv_weight * tv
        seen, side = None, None     # the stack detector's term (eot.sampler.seen): its loss and the tiles it read
        if s.seen is not None and draw.windows is not None and draw.windows.seen is not None:
            seen = s.seen(s.scene, texture, draw.windows.seen)
            side = seen[0] if getattr(s.seen, "project", False) else None   # its gradient projected
            loss = loss + seen[0] if side is None else loss
        if loop.members is None:
            grad_norm, cosine = self._descend(loop, loss, side=side)
            with torch.no_grad():
                success = self._success(loop.objective.success(output, draw.label, views), draw.windows, output,
                                        loop.sign_labels, views)
        else:
            grad_norm, cosine = self._descend(loop, loss, (views.images, images_grad), side)
            success = sum(per_member["member_success"].values()) / len(loop.members)
        loss = loss if side is None else loss + side
        state.step += 1
        state.zero_grad += int(grad_norm == 0.0)
        self._track_best(patch, state, success, float(loss.detach()), progress)
        record = {"step": state.step, "loss": float(loss.detach()), "adv_loss": float(adv.detach()),
                  "nps": float(nps.detach()), "tv": float(tv.detach()), "batch_success": success,
                  "running_success": state.ema_success, "lr": loop.sched.get_last_lr()[0], "grad_norm": grad_norm}
        if seen is not None:
            record.update(seen_loss=float(seen[0].detach()), detector_seen=seen[1])
        if cosine is not None:
            record["seen_cosine"] = cosine
        if loop.members is not None:
            record.update(per_member)
        state.history.append(record)
        return record

    def _refit(self, loop: _Loop, state: LoopState) -> None:
        """Let a sampler that frames its views by a detector measure it on the current (printed) patch when
        it is due; its draws come from a generator of their own (the run's seed and the step), so the
        views' draws are the same whether or not a run was resumed in between."""
        s = loop.setup
        with torch.no_grad():
            texture = s.patch.apply(s.scene.texture)
            if s.colour_model is not None:
                texture = s.colour_model.print_patch(texture, s.patch.mask)
        own = torch.Generator().manual_seed(loop.run.seed * 100_003 + state.step)
        s.sampler.refit(state.step, s.scene, texture, own)

    def _decision_loss(self, windows, output, signs: tuple[int, ...], views) -> Tensor:
        """``weight`` × the mean over the step's drives of their stop margin (``Windows.margin``)."""
        o = windows.objective
        return o.weight * windows.margin(sign_probability(output, signs, views, o.threshold_scale)).mean()

    @staticmethod
    def _success(per_view: Tensor, windows, output, signs: tuple[int, ...], views) -> float:
        """The step's success: the share of views won, or with approach windows the share of drives that run
        the sign (``Windows.success``)."""
        if windows is None:
            return float(per_view.float().mean())
        return float(windows.success(reads_sign(output, signs, views), per_view))

    def _placed(self, loop: _Loop, texture: Tensor, base: Tensor, views: int) -> Tensor:
        """views×3×H×W: the step's (printed) design as deployed, with one placement error drawn per view."""
        s = loop.setup
        pieces = sticker_pieces(s.patch.mask)
        draw = self.placement.sample(views, len(pieces), loop.generator)
        return place_stickers(texture, s.patch.mask, base, s.scene.face_mask, texels_per_mm(s.scene), draw, pieces)

    def _adversarial(self, loop: _Loop, views) -> tuple[Tensor, Tensor | None]:
        """The adversarial loss on ``views`` that the sticker mask search minimizes: ``(loss, None)``, a
        scalar with its graph, or ``(loss, images_grad)``, a number and the images' gradient.

        One victim, or a classifier ensemble: the objective on its output, for an ensemble the members'
        mean probability (``Ensemble.forward``). A detector ensemble: its members' weighted losses, asked
        one at a time as in a step, since its ``forward`` is the first member alone and would place the
        stickers for that detector only. Both measured (README, *Ensembles and held-out victims*): for
        detectors the members' losses took the held-out RetinaNet from 53 to 29 %; for classifiers the
        mean probability transferred better, on three runs out of three."""
        victim = loop.setup.victim
        if loop.members is None or not victim.is_detector:
            output = self._victim_output(victim, views.images, loop.run)
            return loop.objective.loss(output, loop.label, views).mean(), None
        adv, images_grad, _ = self._ensemble_gradient(loop, views)
        return adv, images_grad

    def _ensemble_gradient(self, loop: _Loop, views, windows=None, refs=None) -> tuple[Tensor, Tensor, dict]:
        """The members' weighted objective on the rendered views, asked one member at a time.

        Each member's mean loss is differentiated to a detached copy of the images only, so its
        activations are freed before the next member runs; the weighted sum of those image gradients
        is what the renderer's graph receives (``_descend``). Returns the weighted loss (a number, no
        graph), the images' gradient and the step's per-member record (success rates, losses, and
        the weights when they are not the mean). ``refs``: the reference views of ``attack.features``."""
        ensemble: Ensemble = loop.setup.victim
        x = views.images.detach().requires_grad_()
        grads, losses, success = [], [], {}
        for m in loop.members:
            with ensemble.eroded(m.victim, loop.generator), tap(loop.guide, m.name) as features:
                output = self._victim_output(m.victim, ensemble.attack_inputs(m.victim, x, loop.generator), loop.run)
                loss = m.objective.loss(output, m.label, views).mean()
                if refs is not None:
                    loss = loss + loop.guide.term(m.name, features, lambda im, v=m.victim: self._victim_output(
                        v, ensemble.member_inputs(v, im), loop.run), refs)
                if windows is not None:
                    loss = loss + self._decision_loss(windows, output, m.signs, views)
                grad = torch.autograd.grad(loss, x, allow_unused=True)[0] if loss.requires_grad else None
            grads.append(grad if grad is not None else torch.zeros_like(x))
            losses.append(float(loss.detach()))
            with torch.no_grad():
                success[m.name] = self._success(m.objective.success(output, m.label, views), windows, output,
                                                m.signs, views)
            del output, loss
        weights = ensemble.weights(losses)
        images_grad = sum(float(w) * g for w, g in zip(weights, grads))
        adv = views.images.new_tensor(sum(float(w) * v for w, v in zip(weights, losses)))
        record = {"member_success": success, "member_loss": dict(zip((m.name for m in loop.members), losses))}
        if ensemble.weighting != "mean":
            record["member_weight"] = {m.name: float(w) for m, w in zip(loop.members, weights)}
        return adv, images_grad, record

    @staticmethod
    def _descend(loop: _Loop, loss: Tensor, images_grad: tuple[Tensor, Tensor] | None = None,
                 side: Tensor | None = None) -> tuple[float, float | None]:
        """Backward, one optimizer and scheduler step; returns the gradient's L1 norm (0: no gradient) and, with a
        ``side`` loss, the cosine between its gradient and the loss's (else None).

        ``images_grad`` (the rendered images and their gradient, from an ensemble's members) joins
        the loss's backward, so the renderer and the patch are differentiated once. ``side`` (the stack
        detector's term, ``eot.sampler.seen.project``) joins less its part against the loss's gradient."""
        loop.opt.zero_grad(set_to_none=True)
        params = [p for p in loop.setup.patch.parameters() if p.requires_grad]
        side_grad = None if side is None else torch.autograd.grad(side, params, retain_graph=True, allow_unused=True)
        backward(loss, *(images_grad or ()))
        cosine = None if side_grad is None else add_projected(params, side_grad)
        grad_norm = sum(float(p.grad.abs().sum()) for p in params if p.grad is not None)
        loop.opt.step()
        loop.sched.step()
        return grad_norm, cosine

    @staticmethod
    def _victim_output(victim, images: Tensor, run: RunConfig):
        if run.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=run.amp):
            output = victim(images)
        return output.float() if run.amp and isinstance(output, torch.Tensor) else output

    def _track_best(self, patch: Patch, state: LoopState, success: float, loss: float, progress: float) -> None:
        """Update the running success and loss; keep the patch's state if it is the best so far, from the step the
        running figures span 1 / (1 - ema) steps (or the last): else an ``init=`` run's first batch outranks all."""
        a = self.ema if state.step > 1 else 0.0
        state.ema_success = a * state.ema_success + (1 - a) * success
        state.ema_loss = loss if not math.isfinite(state.ema_loss) else a * state.ema_loss + (1 - a) * loss
        key, settled = (round(state.ema_success, 3), -state.ema_loss), min(self.steps, round(1 / (1 - self.ema)))
        if key > state.best_key and state.step >= settled and patch.colors_final and self.draws_final(progress):
            state.best_key, state.best_step = key, state.step
            state.best_state = copy.deepcopy(patch.state_dict())

    @staticmethod
    def _finish(patch: Patch, state: LoopState) -> None:
        """Leave the patch final. A run stopped before its colours (or its draws) were final has kept no
        best state yet (any step with final ones is better than none): the last one is the best there is."""
        patch.anneal(1.0)
        if state.best_step == 0 and state.step > 0:
            state.best_state, state.best_step = copy.deepcopy(patch.state_dict()), state.step

    def draws_final(self, progress: float) -> bool:
        """Whether the draws at ``progress`` (0 to 1) of the attack are the full distribution (not a
        curriculum's easier one), so that their running success may pick the best state."""
        return True

    def draw(self, sampler, generator: torch.Generator, scene, label, progress: float) -> Draw:
        """One step's batch at ``progress`` (0 to 1) of the attack. Here every view shows the scene's own
        texture and the objective's label; a task whose input changes per view (reprogramming) overrides this."""
        if hasattr(sampler, "windows"):
            windows = sampler.windows(generator)
            return Draw(windows.params, scene.texture, label, windows)
        return Draw(sampler.sample(self.batch_size, generator), scene.texture, label)

    def observe(self, output, label, progress: float) -> None:
        """Learn from a step's victim output besides the gradient (reprogramming's label matching); nothing here."""

    def checkpoint_state(self) -> dict:
        """What an attack learns besides the patch (reprogramming's label map), kept in checkpoints as
        plain data (tensors, numbers, lists)."""
        return {}

    def load_checkpoint_state(self, state: dict) -> None:
        """Restore what ``checkpoint_state`` returned."""
