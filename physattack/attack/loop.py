"""The EOT loop: one optimizer over patch parameters, a batch of sampled views per step.

The batch dimension is the expectation: each step renders ``batch_size`` fresh draws of the
sampler, asks the frozen victim, and steps the patch on the mean objective plus printability priors.
"""

from __future__ import annotations

import copy
import math
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tqdm import tqdm

from physattack.atomic import save_torch
from physattack.errors import InputError
from physattack.attack.mask_search import search_sticker_mask
from physattack.attack.objectives import DETECTOR_OBJECTIVES, OBJECTIVES, Objective
from physattack.printing import non_printability_score, total_variation


class AttackError(InputError):
    """An attack that cannot run as configured; the message says what to do."""


@dataclass
class AttackResult:
    """What an attack leaves: the best patch's state, the step reached, the per-step history."""

    best_state: dict
    best_step: int
    steps_done: int
    history: list[dict] = field(default_factory=list)
    interrupted: bool = False
    zero_grad_steps: int = 0


class EOTAttack:
    """Expectation-over-transformation patch optimization (Athalye et al. 2018; RP2, Eykholt et al. 2018).

    Args:
        objective: ``targeted`` (towards ``target``) or ``untargeted`` (away from the scene's class).
        target: the target label's name, for targeted attacks.
        steps, batch_size, lr: Adam on the patch parameters for ``steps`` steps of ``batch_size`` views.
        lr_schedule: ``cosine`` (to 5 % of lr) or ``constant``.
        nps_weight, tv_weight: weights of the non-printability score and total variation.
        checkpoint_every: steps between checkpoints (``checkpoint.pt`` in the run directory).
        ema: smoothing of the running success rate that picks the best patch.
        mask_search_steps: steps of the sticker mask search, for patches that ask for one.
    """

    def __init__(self, objective: str = "targeted", target: str | None = "yield", steps: int = 200,
                 batch_size: int = 24, lr: float = 0.1, lr_schedule: str = "cosine", nps_weight: float = 0.05,
                 tv_weight: float = 0.5, checkpoint_every: int = 50, ema: float = 0.9,
                 mask_search_steps: int = 40):
        if objective not in OBJECTIVES:
            raise AttackError(f"Unknown objective '{objective}'; choose one of {sorted(OBJECTIVES)}.")
        if OBJECTIVES[objective].targeted and not target:
            raise AttackError("A targeted attack needs attack.target, the label to aim for (e.g. yield).")
        if lr_schedule not in {"cosine", "constant"}:
            raise AttackError(f"attack.lr_schedule must be cosine or constant, not '{lr_schedule}'.")
        self.objective, self.target, self.steps, self.batch_size = objective, target, steps, batch_size
        self.lr, self.lr_schedule, self.nps_weight, self.tv_weight = lr, lr_schedule, nps_weight, tv_weight
        self.checkpoint_every, self.ema, self.mask_search_steps = checkpoint_every, ema, mask_search_steps
        self._stop = False

    needs_true_label = True     # the victim must know the scene's class (not so for reprogramming)

    @property
    def targeted(self) -> bool:
        return OBJECTIVES[self.objective].targeted

    def label(self, victim, scene) -> int:
        """The label the objective works with: the target (targeted) or the scene's true class."""
        return victim.label_index(self.target if self.objective_for(victim).targeted else scene.class_name)

    def objective_for(self, victim) -> Objective:
        """This attack's objective in the form ``victim``'s outputs need (detectors have their own)."""
        if getattr(victim, "is_detector", False):
            return DETECTOR_OBJECTIVES[self.objective]
        if self.objective not in {"targeted", "untargeted"} and self.objective in DETECTOR_OBJECTIVES:
            raise AttackError(f"attack={self.objective} needs a detector victim (victim=detnet or a torchvision "
                              "detector); this victim is a classifier, so use attack=yield or attack=untargeted.")
        return OBJECTIVES[self.objective]

    def run(self, *, patch, scene, pipeline, sampler, victim, palette, generator: torch.Generator,
            run_dir: str | Path, tracker=None, resume: str | Path | None = None, progress: bool = True,
            amp: bool = False, channels_last: bool = False, colour_model=None) -> AttackResult:
        """Optimize ``patch`` in place and return the best state seen (by running success, then loss).

        ``colour_model`` (a ``physattack.printing.ColourModel``) turns the patch's texels into their
        printed colours before rendering; a patch with ``anneal`` (palette stickers) is annealed by the
        share of steps done, and only its final (hard) colours can make the best state.
        """
        label = self.label(victim, scene)
        objective = self.objective_for(victim)
        run_dir = Path(run_dir)
        opt = torch.optim.Adam(patch.parameters(), lr=self.lr)
        sched = (torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, self.steps), eta_min=0.05 * self.lr)
                 if self.lr_schedule == "cosine" else torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0))
        state = {"step": 0, "ema_success": 0.0, "ema_loss": math.inf, "best_key": (-1.0, -math.inf),
                 "best_state": copy.deepcopy(patch.state_dict()), "best_step": 0, "history": [], "zero_grad": 0}
        if resume:
            state = self._load(resume, patch, opt, sched, generator, state)
        elif getattr(patch, "mask_search", None) and self.mask_search_steps > 0:
            patch.set_mask(search_sticker_mask(
                scene=scene, pipeline=pipeline, sampler=sampler, victim=victim, objective=objective, label=label,
                area=patch.mask_search["area"], cell_px=patch.mask_search["cell_px"], steps=self.mask_search_steps,
                batch_size=self.batch_size, generator=generator))
            state["best_state"] = copy.deepcopy(patch.state_dict())
        palette = palette.to(scene.texture.device)
        previous = self._install_signals()
        bar = tqdm(total=self.steps, initial=state["step"], desc="attack", unit="step", disable=not progress)
        try:
            while state["step"] < self.steps and not self._stop:
                self.progress = state["step"] / max(1, self.steps)     # for draws that follow training (a curriculum)
                params, base, target = self.draw(sampler, generator, scene, label)
                if hasattr(patch, "anneal"):
                    patch.anneal(state["step"] / max(1, self.steps))
                texture = patch.apply(base)
                if colour_model is not None:
                    texture = colour_model.print_patch(texture, patch.mask)
                views = pipeline(scene, texture, params)
                images = views.images.contiguous(memory_format=torch.channels_last) if channels_last else views.images
                with torch.autocast(images.device.type, dtype=torch.bfloat16, enabled=amp):
                    output = victim(images)
                if amp and isinstance(output, torch.Tensor):
                    output = output.float()
                adv = objective.loss(output, target, views).mean()
                colors = patch.colors()
                nps = non_printability_score(colors, palette, patch.mask)
                tv = total_variation(colors, patch.mask)
                loss = adv + self.nps_weight * nps + self.tv_weight * tv
                loss_v = float(loss.detach())
                opt.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = sum(float(p.grad.abs().sum()) for p in patch.parameters() if p.grad is not None)
                state["zero_grad"] += int(grad_norm == 0.0)
                opt.step()
                sched.step()
                state["step"] += 1
                with torch.no_grad():
                    success = float(objective.success(output, target, views).float().mean())
                a = self.ema if state["step"] > 1 else 0.0
                state["ema_success"] = a * state["ema_success"] + (1 - a) * success
                state["ema_loss"] = loss_v if not math.isfinite(state["ema_loss"]) else \
                    a * state["ema_loss"] + (1 - a) * loss_v
                key = (round(state["ema_success"], 3), -state["ema_loss"])
                if key > state["best_key"] and getattr(patch, "colors_final", True) and self.draws_final:
                    state["best_key"], state["best_step"] = key, state["step"]
                    state["best_state"] = copy.deepcopy(patch.state_dict())
                record = {"step": state["step"], "loss": loss_v, "adv_loss": float(adv.detach()),
                          "nps": float(nps.detach()), "tv": float(tv.detach()), "batch_success": success, "running_success": state["ema_success"],
                          "lr": sched.get_last_lr()[0], "grad_norm": grad_norm}
                state["history"].append(record)
                if tracker is not None:
                    tracker.log({f"train/{k}": v for k, v in record.items() if k != "step"}, step=state["step"])
                bar.update(1)
                bar.set_postfix(loss=f"{loss_v:.3f}", success=f"{state['ema_success']:.2f}")
                if self.checkpoint_every and state["step"] % self.checkpoint_every == 0:
                    self._save(run_dir / "checkpoint.pt", patch, opt, sched, generator, state, tracker)
        finally:
            bar.close()
            if hasattr(patch, "anneal"):
                patch.anneal(1.0)
            if state["best_step"] == 0 and state["step"] > 0 and (hasattr(patch, "anneal") or not self.draws_final):
                # stopped before colours (or the draws) were final: the last state is the best there is
                state["best_state"], state["best_step"] = copy.deepcopy(patch.state_dict()), state["step"]
            self._save(run_dir / "checkpoint.pt", patch, opt, sched, generator, state, tracker)
            self._restore_signals(previous)
        return AttackResult(best_state=state["best_state"], best_step=state["best_step"], steps_done=state["step"],
                            history=state["history"], interrupted=self._stop, zero_grad_steps=state["zero_grad"])

    @property
    def draws_final(self) -> bool:
        """Whether this step's draws are the full distribution (not a curriculum's easier one), so that its
        running success may pick the best state."""
        return True

    def draw(self, sampler, generator: torch.Generator, scene, label):
        """One step's batch: the views' SceneParams, the base texture(s) the patch goes on, and the
        objective's label(s). Here every view shows the scene's own texture; a task whose input
        changes per view (reprogramming) overrides this."""
        return sampler.sample(self.batch_size, generator), scene.texture, label

    # -- checkpoints -------------------------------------------------------------------------------
    def _save(self, path, patch, opt, sched, generator, state, tracker) -> None:
        save_torch(path, {"patch": patch.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                          "generator": generator.get_state(), "torch_rng": torch.get_rng_state(), "state": state,
                          "attack": self.checkpoint_state(), "wandb_run_id": getattr(tracker, "run_id", None)})

    def _load(self, path, patch, opt, sched, generator, state) -> dict:
        path = Path(path)
        if path.is_dir():
            path = path / "checkpoint.pt"
        if not path.is_file():
            raise AttackError(f"No checkpoint at {path}; give resume= a run directory or its checkpoint.pt.")
        ckpt = torch.load(path, map_location="cpu", weights_only=False)
        try:
            patch.load_state_dict(ckpt["patch"])
        except RuntimeError as e:
            raise AttackError(f"The checkpoint {path} holds a different patch (shape or type) than this run's "
                              f"configuration; resume with the patch it was made with. ({str(e).splitlines()[0]})") from None
        opt.load_state_dict(ckpt["optimizer"])
        sched.load_state_dict(ckpt["scheduler"])
        generator.set_state(ckpt["generator"])
        torch.set_rng_state(ckpt["torch_rng"])
        self.load_checkpoint_state(ckpt.get("attack", {}))
        return ckpt["state"]

    def checkpoint_state(self) -> dict:
        """What an attack learns besides the patch (reprogramming's label map), kept in checkpoints."""
        return {}

    def load_checkpoint_state(self, state: dict) -> None:
        """Restore what ``checkpoint_state`` returned."""

    # -- signals: Ctrl-C, SIGTERM and SIGUSR2 (Slurm's pre-emption warning) stop after the current
    # step and the checkpoint is saved; then a handler that was there before (submitit's requeue on
    # SIGUSR2) still runs.
    def _install_signals(self):
        self._stop = False
        self._signal = None
        if threading.current_thread() is not threading.main_thread():
            return None

        def handler(signum, frame):
            self._stop, self._signal = True, signum
            tqdm.write(f"received signal {signum}: stopping after this step and saving the checkpoint")
        sigs = [signal.SIGINT, signal.SIGTERM] + ([signal.SIGUSR2] if hasattr(signal, "SIGUSR2") else [])
        return {s: signal.signal(s, handler) for s in sigs}

    def _restore_signals(self, previous) -> None:
        for s, h in (previous or {}).items():
            signal.signal(s, h)
        before = (previous or {}).get(self._signal)
        if self._signal is not None and callable(before) and self._signal != signal.SIGINT:
            before(self._signal, None)
