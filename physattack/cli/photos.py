"""``python -m physattack.evaluate_photos <folder> [victim=signnet] [true_label=stop] [target=yield] ...``:
ask a victim about every photo of a real print and report the attack's success with its interval.

Options (key=value; ``victim`` and ``victim.*`` are the usual ``conf/victim`` group and its keys):
``run_dir=<run>`` takes the victim, true label and target from an attack run; ``true_label``/``target``
name them otherwise (no target: untargeted). Cropping for classifiers: ``boxes=<csv|json>`` (drawn
boxes), ``detector=<victim option>`` (a detector's most confident box, ``detector_label=`` to pick a
class), or the whole photo; ``context`` widens boxes about their centre. Writes ``photos.csv``,
``summary.json`` and ``contact_sheet.png`` to ``out=`` (refused if it exists unless ``overwrite=true``)
or to ``<folder>/evaluation`` (``-2``, ``-3``, ... when taken). A photo that cannot be decoded (truncated,
not an image) is skipped and the report says so. The work is in ``physattack.evaluate.photos``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from physattack.cli import build
from physattack.cli.door import compose_checked, key_value_command, parse_options
from physattack.cli.rundir import ensure_writable, free_folder, holds_files
from physattack.errors import InputError
from physattack.evaluate.photos import BoxFile, DetectorCropper, WholePhoto, evaluate_photo_folder

USAGE = ("python -m physattack.evaluate_photos <folder> [victim=signnet] [victim.weights=<file>] "
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
        node = build.run_config_file(run_dir).victim
        return OmegaConf.merge(node, OmegaConf.from_dotlist([a[len("victim."):] for a in victim_args]))
    return compose_checked("config", victim_args).victim


@key_value_command(
    "physattack.evaluate_photos", "ask a victim about every photo of a real print and report the attack's success "
    "with its 95 % interval, a table and a contact sheet.",
    [USAGE, "python -m physattack.evaluate_photos photos/ run_dir=outputs/<date>/<time>"],
    ["run_dir: take the victim, true label and target from an attack run",
     "victim, victim.*: a conf/victim option and its keys", "true_label, target: the labels",
     "boxes: a csv/json of drawn boxes; or detector (a conf/victim detector) and detector_label",
     "context: widen boxes about their centre", "out, overwrite: where the report goes", "device: cpu or cuda"])
def main(argv: list[str]) -> int:
    if not argv or "=" in argv[0]:
        raise InputError(f"Name the folder of photos first ({USAGE}).")
    folder, rest = Path(argv[0]), argv[1:]
    if not folder.is_dir():
        raise InputError(f"{folder} is not a folder; give the folder that holds the photos of the print.")
    victim_args = [a for a in rest if a.startswith("victim")]
    cmd = parse_options(PhotosCommand, [a for a in rest if not a.startswith("victim")], USAGE)
    run_dir = build.check_finished_run(cmd.run_dir) if cmd.run_dir else None
    true_label, target = cmd.true_label, cmd.target
    if run_dir is not None:
        if not (run_dir / "metrics.json").is_file():
            raise InputError(f"{run_dir} has no metrics.json; give run_dir= a finished attack run, or name "
                             "true_label= and target= instead.")
        metrics = json.loads((run_dir / "metrics.json").read_text())
        true_label, target = true_label or metrics["true_label"], target or metrics.get("target_label")
    if not true_label:
        raise InputError("Name the sign's true class with true_label=stop (or give run_dir= of the attack run).")
    if cmd.boxes and cmd.detector:
        raise InputError("Give boxes= or detector=, not both.")
    victim_node = victim_config(victim_args, run_dir)
    victim = build.victim(victim_node, build.device_of(cmd.device))
    cropper = WholePhoto()
    if cmd.boxes:
        cropper = BoxFile(cmd.boxes, cmd.context)
    elif cmd.detector:
        detector = build.victim(victim_config([f"victim={cmd.detector}"], None), cmd.device)
        cropper = DetectorCropper(detector, cmd.detector_label, cmd.context)
    if cmd.out:
        out = Path(cmd.out)
        if holds_files(out) and not cmd.overwrite:
            raise InputError(f"{out} already holds files; choose another out= or add overwrite=true.")
    else:
        out = free_folder(folder / "evaluation")
    ensure_writable(out, "out")
    summary = evaluate_photo_folder(folder, victim, true_label=true_label, target_label=target, out_dir=out,
                                    cropper=cropper, victim_name=str(victim_node.get("_target_")), device=cmd.device)
    asr = summary["attack_success_rate"]
    skipped = summary.get("skipped") or []
    print(f"{summary['attack']}: success on {asr['count']}/{asr['n']} photos = {asr['rate']:.1%} "
          f"(95% CI {asr['ci95'][0]:.1%}-{asr['ci95'][1]:.1%}); {summary['photos'] - asr['n']} without a sign found"
          + (f"; {len(skipped)} unreadable photo(s) skipped ({', '.join(Path(str(s.get('file', s))).name for s in skipped[:5])})"
             if skipped else "")
          + f"; table, summary and contact sheet in {out}")
    return 0
