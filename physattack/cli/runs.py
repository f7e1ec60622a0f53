"""Finished runs: the one reader of a run folder.

Every command that reads a finished run — ``evaluate``, ``export``, ``drive``, ``transfer``, the photo
evaluation, ``resume=`` — opens it with ``open_run``: its ``config.yaml`` (with the class paths of
earlier versions mapped to today's), its run report (``metrics.json``, any schema version this
physattack reads) and, on demand, its rebuilt parts (``RunFolder.rebuild``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from physattack.atomic import load_torch
from physattack.attack.objectives import OBJECTIVES
from physattack.cli import build
from physattack.eot import ViewPipeline
from physattack.errors import InputError
from physattack.run_report import RunReport, read_report

RUN_FILES = ("config.yaml", "patch.pt")

#: Class paths earlier versions wrote into config.yaml, and where those classes live now.
MOVED = {"physattack.eot.drive.": "physattack.drive.", "physattack.evaluate.drive.": "physattack.drive."}

#: The run report kinds of runs whose victims are detectors (``physattack.cli.kinds``).
DETECTOR_KINDS = ("detector", "query_detector")


@dataclass(frozen=True)
class Prior:
    """The victims an ``init=`` run (and the runs it started from) attacked: by gradient, and by queries with the
    images those queries cost. All of them are reported as attacked, never as held out."""

    by_gradient: tuple[str, ...] = ()
    by_queries: tuple[str, ...] = ()
    images: int = 0

    @classmethod
    def from_record(cls, init: dict) -> Prior:
        """Read back a run report's ``init`` record (``record``)."""
        return cls(tuple(init.get("attacked_by_gradient") or ()), tuple(init.get("query_attacked") or ()),
                   int(init.get("query_images") or 0))

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys([*self.by_gradient, *self.by_queries]))

    def record(self, run: str) -> dict:
        """The run report's ``init`` record."""
        out = {"run": run, "attacked_by_gradient": list(self.by_gradient)}
        if self.by_queries:
            out.update(query_attacked=list(self.by_queries), query_images=self.images)
        return out


@dataclass
class RunFolder:
    """A finished (or interrupted) attack run as its folder holds it."""

    path: Path
    cfg: DictConfig
    report: RunReport | None

    @property
    def target(self) -> str | None:
        """The target label of a targeted run, None for an untargeted one."""
        objective = OBJECTIVES.get(self.cfg.attack.get("objective", "targeted"), OBJECTIVES["targeted"])
        return self.cfg.attack.get("target") if objective.targeted else None

    @property
    def victim_names(self) -> list[str]:
        names = (self.report.summary.get("victim_names") if self.report is not None else None)
        return list(names) if names else []

    @property
    def init(self) -> dict:
        """The ``init=`` record of the run: the run it started from and what that run's chain attacked ({} if none)."""
        return dict((self.report.summary.get("init") if self.report is not None else None) or {})

    @property
    def prior(self) -> tuple[str, ...]:
        """The victims the run this one started from (``init=``) attacked, by gradient or by queries: attacked here
        too, never held out."""
        return Prior.from_record(self.init).names

    @property
    def queried(self) -> tuple[str, ...]:
        """The victims this run (a query run) and the runs it started from asked by queries: () for a run that
        asked none."""
        return self.as_prior.by_queries

    @property
    def as_prior(self) -> Prior:
        """What this run and the runs it started from attacked, as a run started from it (``init=``) reports them. A
        query run's own victim was asked, not differentiated: it (and any its chain asked) is query-attacked; by
        gradient are only the victims of the chain's gradient run."""
        q = (self.report.query if self.report is not None else None) or {}
        before = Prior.from_record(self.init)
        if q.get("victim"):
            asked = tuple(dict.fromkeys([q["victim"], *(q.get("stack_parts") or ()), *before.by_queries]))
            return Prior(before.by_gradient, asked, int(q.get("images") or 0) + before.images)
        if self.victim_names:
            return Prior(tuple(self.victim_names))
        node = self.cfg.get("victim") or {}
        return Prior(tuple(str(n) for n in (node.get("members") or {})) or (str(node.get("name") or "victim"),))

    def gradient_run(self) -> RunFolder | None:
        """The run of this one's chain whose victims were attacked by gradient: this run, or for a query run the run it
        started from (followed back through query runs); None when a query run started from no run."""
        if not self.queried:
            return self
        first = self.init.get("run")
        return open_run(str(first)).gradient_run() if first else None

    def victim_configs(self) -> dict[str, object]:
        """Name -> victim config of the victims this run attacked, as its config.yaml built them (an ensemble's
        members, or the one victim under the name the run's report gives it)."""
        node = self.cfg.get("victim") or {}
        if node.get("members"):
            return {str(name): member for name, member in node.members.items()}
        return {(self.victim_names or [str(node.get("name") or "victim")])[0]: node}

    def scene_and_patch(self, device="cpu"):
        """The run's scene and its patch, with ``patch.pt`` loaded as data only."""
        scene = build.scene(self.cfg, device)
        patch = build.make(self.cfg.patch, scene=scene).to(device)
        load_patch(patch, self.path / "patch.pt", device)
        return scene, patch

    def rebuild(self, device="cpu", victim_node=None) -> FinishedRun:
        """The run's parts rebuilt from its own configuration and patch."""
        scene, patch = self.scene_and_patch(device)
        victim = build.victim(victim_node if victim_node is not None else self.cfg.victim, device)
        renderer = build.make(self.cfg.renderer)
        eval_bank = build.make(self.cfg.eot.eval_backgrounds)
        size = (int(self.cfg.image_size), int(self.cfg.image_size))
        palette, colour_model = build.printer(self.cfg, device)
        pipeline = ViewPipeline(renderer, eval_bank, size)
        with torch.no_grad():
            adv = patch.apply(scene.texture)
        if "model" in (self.cfg.get("printer") or {}):          # the run printed its patch: evaluate the print
            with torch.no_grad():
                adv = colour_model.print_patch(adv, patch.mask)
            pipeline = build.photographed(pipeline, colour_model)
        names = self.victim_names or build.victim_names(self.cfg, victim)
        return FinishedRun(self, scene, victim, patch, (renderer, eval_bank, size), adv.detach(), pipeline, names,
                           (palette, colour_model))


@dataclass
class FinishedRun:
    """A run's rebuilt parts: its scene, victim and patch, the view pipeline over held-out backgrounds, and
    its attacked texture (as printed, when the run printed it)."""

    folder: RunFolder
    scene: object
    victim: object
    patch: object
    rendering: tuple              # (renderer, held-out background bank, image size)
    adv_texture: torch.Tensor
    eval_pipeline: object
    victim_names: list[str]
    printer: tuple                # (palette, colour model)

    @property
    def run_dir(self) -> Path:
        return self.folder.path

    @property
    def cfg(self) -> DictConfig:
        return self.folder.cfg

    @property
    def target(self) -> str | None:
        return self.folder.target

    @property
    def renderer(self):
        return self.rendering[0]

    @property
    def eval_bank(self):
        return self.rendering[1]

    @property
    def image_size(self) -> tuple[int, int]:
        return self.rendering[2]

    def plain_pipeline(self) -> ViewPipeline:
        return ViewPipeline(self.renderer, self.eval_bank, self.image_size)


def check_finished_run(run_dir: str | Path) -> Path:
    """``run_dir`` holds a finished (or interrupted) attack run: its ``config.yaml`` and ``patch.pt``."""
    run_dir = Path(str(run_dir)).expanduser()
    for name in RUN_FILES:
        if not (run_dir / name).is_file():
            raise InputError(f"{run_dir} has no {name}; give run_dir= the output folder of a finished "
                             "`python -m physattack` run (outputs/<date>/<time>).")
    return run_dir


def check_run_dir(cfg: DictConfig) -> None:
    """A command's ``run_dir=`` is given and holds a finished run, before any folder is made inside it."""
    if OmegaConf.is_missing(cfg, "run_dir"):
        raise InputError("Give run_dir= the output folder of a finished `python -m physattack` run "
                         "(outputs/<date>/<time>).")
    check_finished_run(cfg.run_dir)


#: Keys earlier versions wrote at the top of a node of this ``_target_``, and the group they live in now.
GROUPED = {"physattack.patch.sticker_for_scene": ("palette_options", ("palette", "temperature", "hard_from")),
           "physattack.victims.timm.load_timm_classifier": (
               "preprocessing", ("input_size", "mean", "std", "interpolation", "crop_pct"))}


def read_config(path: Path) -> DictConfig:
    """A run's ``config.yaml``, in today's layout: the class paths of earlier versions (``MOVED``) mapped to
    today's, and keys that have moved into a group since (``GROUPED``) moved there."""
    try:
        text = path.read_text()
        for old, new in MOVED.items():
            text = text.replace(old, new)
        return OmegaConf.create(_regrouped(OmegaConf.to_container(OmegaConf.create(text), resolve=False)))
    except Exception as e:
        raise InputError(f"{path} is not a readable config ({str(e).splitlines()[0]}).") from None


def _regrouped(node):
    if isinstance(node, list):
        return [_regrouped(v) for v in node]
    if not isinstance(node, dict):
        return node
    node = {k: _regrouped(v) for k, v in node.items()}
    group, keys = GROUPED.get(str(node.get("_target_")), (None, ()))
    flat = {k: node.pop(k) for k in keys if k in node}
    if flat:
        node[group] = {**(node.get(group) or {}), **flat}
    return node


def open_run(run_dir: str | Path, need_patch: bool = True) -> RunFolder:
    """The finished run in ``run_dir``: its configuration and its report. ``need_patch=False`` opens a run
    that has no ``patch.pt`` yet (a checkpoint to resume from)."""
    path = check_finished_run(run_dir) if need_patch else Path(str(run_dir)).expanduser()
    return RunFolder(path, read_config(path / "config.yaml"), read_report(path))


def prior_victims(init, names, detectors: bool) -> dict[str, object]:
    """Name -> victim config of those of ``names`` that the ``init=`` run's chain attacked by gradient, as its gradient
    run built them: a protocol whose pool lacks them scores them beside the rest (attacked, never held out). {} when
    there is no such run (its folder gone: the protocol then scores the pool alone) or it attacked the other kind of
    model (``detectors``: detectors, else classifiers)."""
    if not init or not names:
        return {}
    try:
        first = open_run(str(init)).gradient_run()
    except InputError:
        return {}
    if first is None or (first.report is not None and first.report.kind in DETECTOR_KINDS) != detectors:
        return {}
    return {name: node for name, node in first.victim_configs().items() if name in names}


def pool_with_prior(pool, attacked, prior, init, detectors: bool) -> dict:
    """``pool`` (a protocol's name -> victim config) with the victims of ``prior`` that neither it nor ``attacked``
    holds, as the ``init=`` run's chain built them (``prior_victims``)."""
    pool = dict(pool or {})
    missing = [n for n in prior if n not in pool and n not in attacked]
    return {**prior_victims(init, missing, detectors), **pool}


def load_patch(patch, path: Path, device="cpu") -> None:
    """Load ``patch.pt`` (data only) into ``patch``; one sentence when it does not fit."""
    state = load_torch(path, "patch file", map_location=device)
    try:
        patch.load_state_dict(state["patch"] if isinstance(state, dict) and "patch" in state else state)
    except (RuntimeError, KeyError, TypeError, AttributeError) as e:
        raise InputError(f"{path} does not fit the patch its config.yaml builds; was the run folder edited? "
                         f"({str(e).strip().splitlines()[0]})") from None


__all__ = ["FinishedRun", "MOVED", "RunFolder", "check_finished_run", "check_run_dir", "load_patch", "open_run",
           "pool_with_prior", "prior_victims", "read_config"]
