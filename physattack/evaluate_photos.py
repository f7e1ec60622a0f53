"""``python -m physattack.evaluate_photos <folder> [victim=signnet] [true_label=stop] [target=yield] ...``:
ask a victim about every photo of a real print and report the attack's success with its interval.

Options (key=value; ``victim`` and ``victim.*`` are the usual ``conf/victim`` group and its keys):
``run_dir=<run>`` takes the victim, true label and target from an attack run; ``true_label``/``target``
name them otherwise (no target: untargeted). Cropping for classifiers: ``boxes=<csv|json>`` (drawn
boxes), ``detector=<victim option>`` (a detector's most confident box, ``detector_label=`` to pick a
class), or the whole photo; ``context`` widens boxes about their centre. Writes ``photos.csv``,
``summary.json`` and ``contact_sheet.png`` to ``out=`` (refused if it exists unless ``overwrite=true``)
or to ``<folder>/evaluation`` (``-2``, ``-3``, ... when taken). Wiring only: the work is in
``physattack.evaluate.photos``.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from hydra.utils import instantiate
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from physattack.errors import InputError, input_error
from physattack.evaluate.photos import BoxFile, DetectorCropper, WholePhoto, evaluate_photo_folder
from physattack.printing.export import free_folder

USAGE = ("usage: python -m physattack.evaluate_photos <folder> [victim=signnet] [victim.weights=<file>] "
         "[run_dir=<run>] [true_label=stop] [target=yield] [boxes=<csv|json> | detector=<victim option> "
         "[detector_label=stop]] [context=1.0] [out=<folder>] [overwrite=false] [device=cpu]")


@dataclass
class PhotosCommand:
    run_dir: str | None = None
    true_label: str | None = None
    target: str | None = None
    boxes: str | None = None
    detector: str | None = None
    detector_label: str | None = None
    context: float = 1.0
    out: str | None = None
    overwrite: bool = False
    device: str = "cpu"


def victim_config(victim_args: list[str], run_dir: Path | None):
    """The victim's config node: the run's, unless victim= / victim.* say otherwise."""
    chosen = [a for a in victim_args if a.startswith("victim=")]
    if run_dir is not None and not chosen:
        node = OmegaConf.load(run_dir / "config.yaml").victim
        return OmegaConf.merge(node, OmegaConf.from_dotlist([a[len("victim."):] for a in victim_args]))
    if GlobalHydra.instance().is_initialized():          # called from inside another Hydra app or test
        return compose(config_name="config", overrides=victim_args).victim
    with initialize_config_module(config_module="physattack.conf", version_base="1.3"):
        return compose(config_name="config", overrides=victim_args).victim


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or "=" in argv[0] or argv[0] in {"-h", "--help"}:
        print(USAGE, file=sys.stderr)
        return 2
    folder, rest = Path(argv[0]), argv[1:]
    try:
        bad = [a for a in rest if "=" not in a]
        if bad:
            raise InputError(f"Unexpected argument(s) {bad}; options are key=value.\n{USAGE}")
        victim_args = [a for a in rest if a.startswith("victim")]
        try:
            cmd = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(PhotosCommand), OmegaConf.from_dotlist(
                [a for a in rest if not a.startswith("victim")])))
        except OmegaConfBaseException as e:
            raise InputError(f"{str(e).splitlines()[0]}.\n{USAGE}") from None
        run_dir = Path(cmd.run_dir) if cmd.run_dir else None
        true_label, target = cmd.true_label, cmd.target
        if run_dir is not None:
            if not (run_dir / "metrics.json").is_file():
                raise InputError(f"{run_dir} has no metrics.json; give run_dir= a finished attack run, or name "
                                 "true_label= and target= instead.")
            metrics = json.loads((run_dir / "metrics.json").read_text())
            true_label, target = true_label or metrics["true_label"], target or metrics.get("target_label")
        if not true_label:
            raise InputError("Name the sign's true class with true_label=stop (or give run_dir= of the attack run).")
        try:
            victim_node = victim_config(victim_args, run_dir)
            victim = instantiate(victim_node).to(cmd.device)
            if cmd.boxes and cmd.detector:
                raise InputError("Give boxes= or detector=, not both.")
            cropper = WholePhoto()
            if cmd.boxes:
                cropper = BoxFile(cmd.boxes, cmd.context)
            elif cmd.detector:
                detector = instantiate(victim_config([f"victim={cmd.detector}"], None)).to(cmd.device)
                cropper = DetectorCropper(detector, cmd.detector_label, cmd.context)
        except (OmegaConfBaseException, HydraException) as e:
            lines = str(e).split("Config search path")[0].splitlines()
            options = ", ".join(ln.strip() for ln in lines if ln.startswith("\t"))
            raise InputError(f"{str(e).splitlines()[0]}; victim= and detector= take an option of conf/victim"
                             + (f" ({options})." if options else ".")) from None
        except Exception as e:
            if isinstance(e.__cause__, InputError):
                raise e.__cause__ from None
            raise
        if cmd.out:
            out = Path(cmd.out)
            if out.exists() and any(out.iterdir()) and not cmd.overwrite:
                raise InputError(f"{out} already exists; choose another out= or add overwrite=true.")
        else:
            out = free_folder(folder / "evaluation")
        summary = evaluate_photo_folder(folder, victim, true_label=true_label, target_label=target, out_dir=out,
                                        cropper=cropper, victim_name=str(victim_node.get("_target_")),
                                        device=cmd.device)
    except Exception as exc:        # an InputError, possibly wrapped by hydra.utils.instantiate
        err = input_error(exc)
        if err is None:
            raise
        print(f"error: {err}", file=sys.stderr)
        return 2
    asr = summary["attack_success_rate"]
    print(f"{summary['attack']}: success on {asr['count']}/{asr['n']} photos = {asr['rate']:.1%} "
          f"(95% CI {asr['ci95'][0]:.1%}-{asr['ci95'][1]:.1%}); {summary['photos'] - asr['n']} without a sign found; "
          f"table, summary and contact sheet in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
