"""``python -m physattack.evaluate_photos <folder> [victim=signnet] [true_label=stop] [target=yield] ...``:
ask a victim about every photo of a real print and report the attack's success with its interval.

Options (key=value; ``victim`` and ``victim.*`` are the usual ``conf/victim`` group and its keys):
``run_dir=<run>`` takes the victim, true label and target from an attack run; ``true_label``/``target``
name them otherwise (no target: untargeted). Cropping for classifiers: ``boxes=<csv|json>`` (drawn
boxes), ``detector=<victim option>`` (a detector's most confident box, ``detector_label=`` to pick a
class), or the whole photo; ``context`` widens boxes about their centre. Writes ``photos.csv``,
``summary.json`` and ``contact_sheet.png`` to ``out=`` (refused if it exists unless ``overwrite=true``)
or to ``<folder>/evaluation`` (``-2``, ``-3``, ... when taken). A photo that cannot be decoded (truncated,
not an image) is skipped and the report says so.

The work: for a classifier each photo is cropped to the sign first, by a **cropper**: any object with
``box(image, name) -> (x0, y0, x1, y1) | None`` in the photo's pixels (None: no sign found). Three
ship: ``WholePhoto`` (the photo is the crop), ``BoxFile`` (boxes a person drew, from a CSV or JSON
file) and ``DetectorCropper`` (the most confident box of a detector, e.g. the bundled one). A detector
victim sees the whole photo and succeeds when its detections do what the attack wanted.

A photo that cannot be read (truncated, undecodable, transparent) is skipped with a warning and
listed in the report (``skipped`` in ``summary.json``, a grey tile in the contact sheet); it counts
in no rate.

Targeted success: the prediction is the target label; untargeted: it is not the true label. There
are no clean photos of the same views to condition on, so the rate is over all photos in which a sign
was found, with its 95 % Wilson interval.
"""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import cv2
import numpy as np
import torch
from omegaconf import OmegaConf

from physattack.atomic import save_json, save_rgb_png, save_text
from physattack.cli import build
from physattack.cli.door import compose_checked, key_value_command, parse_options
from physattack.cli.rundir import ensure_writable, free_folder, holds_files
from physattack.cli.runs import check_finished_run, open_run
from physattack.errors import InputError
from physattack.evaluate.metrics import wilson_interval
from physattack.imageio import read_rgb

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp"}


class PhotoError(InputError):
    """Photos, boxes or labels that cannot be evaluated; the message says what to do."""


class Cropper(Protocol):
    def box(self, image: np.ndarray, name: str) -> tuple[int, int, int, int] | None: ...


class WholePhoto:
    """The whole photo is the crop (photos already framed on the sign)."""

    description = "whole photo"

    def box(self, image: np.ndarray, name: str) -> tuple[int, int, int, int]:
        return 0, 0, image.shape[1], image.shape[0]


class BoxFile:
    """Boxes from a file: CSV with a header ``file,x0,y0,x1,y1`` or JSON ``{"file": [x0, y0, x1, y1]}``,
    in pixels of each photo; ``context`` widens each box about its centre (1.6 frames a tight box the
    way the bundled classifier's training renders do)."""

    def __init__(self, path: str | Path, context: float = 1.0):
        path = Path(path)
        if not path.is_file():
            raise PhotoError(f"The box file {path} does not exist; give a CSV (file,x0,y0,x1,y1) or JSON of boxes.")
        self.description = f"boxes from {path.name}" + (f" x{context:g}" if context != 1 else "")
        self.context = float(context)
        try:
            if path.suffix.lower() == ".json":
                self.boxes = {str(k): tuple(float(v) for v in b) for k, b in json.loads(path.read_text()).items()}
            else:
                with path.open(newline="") as f:
                    self.boxes = {r["file"]: tuple(float(r[k]) for k in ("x0", "y0", "x1", "y1"))
                                  for r in csv.DictReader(f)}
        except (KeyError, ValueError, TypeError, json.JSONDecodeError):
            raise PhotoError(f"{path} is not a box file; give a CSV with a header 'file,x0,y0,x1,y1' or JSON "
                             "mapping each photo's file name to [x0, y0, x1, y1].") from None
        bad = [k for k, b in self.boxes.items() if len(b) != 4 or b[2] <= b[0] or b[3] <= b[1]]
        if bad:
            raise PhotoError(f"{path}: the boxes of {bad[:3]} are not x0 < x1, y0 < y1; fix them.")

    def box(self, image: np.ndarray, name: str) -> tuple[int, int, int, int]:
        if name not in self.boxes:
            raise PhotoError(f"The box file has no box for {name}; add one or move the photo out of the folder.")
        x0, y0, x1, y1 = self.boxes[name]
        cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * self.context / 2, (y1 - y0) * self.context / 2
        h, w = image.shape[:2]
        return (max(0, int(round(cx - hw))), max(0, int(round(cy - hh))),
                min(w, int(round(cx + hw))), min(h, int(round(cy + hh))))


class DetectorCropper:
    """The most confident box of a detector (a ``physattack.victims.detection.Detector``) above its
    threshold, optionally of one label, widened by ``context``; None when it finds nothing."""

    def __init__(self, detector, label: str | None = None, context: float = 1.6, max_side: int = 640):
        self.detector, self.context, self.max_side = detector, float(context), max_side
        self.label = None if label is None else detector.label_index(label)
        self.description = f"detector {type(detector).__name__}" + (f" ({label})" if label else "")

    @torch.no_grad()
    def box(self, image: np.ndarray, name: str) -> tuple[int, int, int, int] | None:
        h, w = image.shape[:2]
        scale = min(1.0, self.max_side / max(h, w))
        small = image if scale >= 1 else cv2.resize(image, (round(w * scale), round(h * scale)),
                                                    interpolation=cv2.INTER_AREA)
        out = self.detector(to_tensor(small)[None])
        det = out.detections[0]
        keep = det.scores >= out.score_threshold
        if self.label is not None:
            keep &= det.labels == self.label
        if not bool(keep.any()):
            return None
        boxes, scores = det.boxes[keep], det.scores[keep]
        x0, y0, x1, y1 = (boxes[int(scores.argmax())] / scale).tolist()
        cx, cy, hw, hh = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) * self.context / 2, (y1 - y0) * self.context / 2
        return (max(0, int(cx - hw)), max(0, int(cy - hh)),
                min(w, int(math.ceil(cx + hw))), min(h, int(math.ceil(cy + hh))))


@dataclass
class PhotoResult:
    """One photo's outcome. ``box`` is None when the cropper found no sign (then it has no prediction),
    or when the photo could not be read: then ``skipped`` says why."""

    file: str
    box: tuple[int, int, int, int] | None
    prediction: str
    confidence: float
    true_confidence: float
    target_confidence: float
    success: bool
    skipped: str = ""


def to_tensor(image: np.ndarray) -> torch.Tensor:
    """H×W×3 uint8 RGB -> 3×H×W float in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float() / 255


def list_photos(folder: str | Path) -> list[Path]:
    folder = Path(folder)
    if not folder.is_dir():
        raise PhotoError(f"{folder} is not a folder; give the folder that holds the photos.")
    photos = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file())
    if not photos:
        raise PhotoError(f"{folder} holds no photos ({', '.join(sorted(IMAGE_SUFFIXES))}); put the photos of the "
                         "print there.")
    return photos


def read_photo(path: Path) -> np.ndarray:
    """H×W×3 uint8 RGB, or a PhotoError for a missing, truncated, undecodable or transparent file."""
    return read_rgb(path, "photo", error=PhotoError)


SKIPPED_TILE = np.full((8, 8, 3), 200, np.uint8)


@torch.no_grad()
def classify_photos(photos: list[Path], victim, true_index: int, target_index: int | None,
                    cropper: Cropper | None = None, max_side: int = 1024,
                    device: torch.device | str = "cpu") -> tuple[list[PhotoResult], list[np.ndarray]]:
    """Each photo's result, and the crop the victim saw (for the contact sheet). A photo that cannot
    be read is skipped with a warning: its result says why (``skipped``) and its crop is a grey tile.

    A classifier sees the crop, shrunk (area filter) to at most ``max_side`` pixels; a detector (an
    output with ``detections``) sees the whole photo, and its most confident detection is the prediction.
    """
    cropper = cropper or WholePhoto()
    results, crops = [], []
    labels = victim.labels
    for path in photos:
        try:
            image = read_photo(path)
        except PhotoError as exc:
            warnings.warn(f"Skipped {path.name}: {exc}", stacklevel=2)
            results.append(PhotoResult(path.name, None, "", 0.0, 0.0, 0.0, False, skipped=str(exc)))
            crops.append(SKIPPED_TILE)
            continue
        box = cropper.box(image, path.name)
        if box is None:
            results.append(PhotoResult(path.name, None, "", 0.0, 0.0, 0.0, False))
            crops.append(image)
            continue
        x0, y0, x1, y1 = box
        crop = image[y0:y1, x0:x1]
        if crop.size == 0:
            raise PhotoError(f"The box {box} is empty in {path.name} ({image.shape[1]}×{image.shape[0]} px); fix it.")
        scale = min(1.0, max_side / max(crop.shape[:2]))
        if scale < 1:
            crop = cv2.resize(crop, (max(1, round(crop.shape[1] * scale)), max(1, round(crop.shape[0] * scale))),
                              interpolation=cv2.INTER_AREA)
        out = victim(to_tensor(crop)[None].to(device))
        if hasattr(out, "detections"):
            pred, conf, conf_true, conf_target, success = _detector_outcome(out, victim, true_index, target_index)
        else:
            if not isinstance(out, torch.Tensor) or out.dim() != 2:
                raise PhotoError("evaluate_photos handles classifiers (B×K logits) and detectors (DetectorOutput); "
                                 f"this victim returned {type(out).__name__}.")
            probs = torch.softmax(out.float(), 1)[0].cpu()
            k = int(probs.argmax())
            pred, conf, conf_true = labels[k], float(probs[k]), float(probs[true_index])
            conf_target = float(probs[target_index]) if target_index is not None else float("nan")
            success = k == target_index if target_index is not None else k != true_index
        results.append(PhotoResult(path.name, (x0, y0, x1, y1), pred, conf, conf_true, conf_target, bool(success)))
        crops.append(crop)
    return results, crops


def _detector_outcome(out, victim, true_index: int, target_index: int | None):
    det = out.detections[0]
    keep = det.scores >= out.score_threshold
    scores, det_labels = det.scores[keep], det.labels[keep]
    names = getattr(victim, "labels", None)

    def best(label):
        s = scores[det_labels == label]
        return float(s.max()) if len(s) else 0.0

    if len(scores) == 0:
        pred, conf = "nothing", 0.0
    else:
        i = int(scores.argmax())
        pred, conf = (names[int(det_labels[i])] if names else str(int(det_labels[i]))), float(scores[i])
    conf_true = best(true_index)
    conf_target = best(target_index) if target_index is not None else float("nan")
    success = conf_target > 0 if target_index is not None else conf_true == 0
    return pred, conf, conf_true, conf_target, success


def summarize(results: list[PhotoResult], *, true_label: str, target_label: str | None, victim_name: str,
              cropper: str) -> dict:
    """Attack success over the photos where a sign was found, with its 95 % Wilson interval; photos that
    could not be read count nowhere and are listed under ``skipped``."""
    skipped = [{"file": r.file, "reason": r.skipped} for r in results if r.skipped]
    results = [r for r in results if not r.skipped]
    found = [r for r in results if r.box is not None]
    k, n = sum(r.success for r in found), len(found)
    lo, hi = wilson_interval(k, n)
    correct = sum(r.prediction == true_label for r in found)
    clo, chi = wilson_interval(correct, n)
    out = {
        "photos": len(results), "signs_found": n, "true_label": true_label, "target_label": target_label,
        "attack": f"targeted -> {target_label}" if target_label else "untargeted",
        "attack_success_rate": {"rate": k / n if n else float("nan"), "count": k, "n": n, "ci95": [lo, hi]},
        "true_label_rate": {"rate": correct / n if n else float("nan"), "count": correct, "n": n, "ci95": [clo, chi]},
        "skipped": skipped, "victim": victim_name, "cropper": cropper,
        "protocol": "success over every photo in which a sign was found (no clean photos of the same views to "
                    "condition on); 95 % Wilson interval",
    }
    if target_label and found:
        out["mean_target_confidence"] = float(np.mean([r.target_confidence for r in found]))
    return out


def contact_sheet(crops: list[np.ndarray], results: list[PhotoResult], thumb: int = 160,
                  max_cols: int = 8) -> np.ndarray:
    """Thumbnails of what the victim saw with its answer; a green frame marks success, red failure,
    grey a photo skipped as unreadable."""
    cols = max(1, min(max_cols, math.ceil(math.sqrt(len(crops)))))
    rows = math.ceil(len(crops) / cols)
    cap = 34
    sheet = np.full((rows * (thumb + cap), cols * thumb, 3), 255, np.uint8)
    for i, (crop, r) in enumerate(zip(crops, results)):
        y, x = (i // cols) * (thumb + cap), (i % cols) * thumb
        s = (thumb - 8) / max(crop.shape[:2])
        small = cv2.resize(crop, (max(1, round(crop.shape[1] * s)), max(1, round(crop.shape[0] * s))),
                           interpolation=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
        oy, ox = y + 4 + (thumb - 8 - small.shape[0]) // 2, x + 4 + (thumb - 8 - small.shape[1]) // 2
        sheet[oy:oy + small.shape[0], ox:ox + small.shape[1]] = small
        colour = (40, 170, 60) if r.success else (130, 130, 130) if r.skipped else (210, 40, 40)
        cv2.rectangle(sheet, (x + 1, y + 1), (x + thumb - 2, y + thumb - 2), colour, 3)
        caption = ("skipped: unreadable" if r.skipped else f"{r.prediction} {r.confidence:.2f}" if r.box is not None
                   else "no sign found")
        cv2.putText(sheet, r.file[:22], (x + 4, y + thumb + 12), cv2.FONT_HERSHEY_SIMPLEX, 0.36, (60, 60, 60), 1,
                    cv2.LINE_AA)
        cv2.putText(sheet, caption[:22], (x + 4, y + thumb + 27), cv2.FONT_HERSHEY_SIMPLEX, 0.45, colour, 1,
                    cv2.LINE_AA)
    return sheet


def evaluate_photo_folder(folder: str | Path, victim, *, true_label: str, target_label: str | None,
                          out_dir: str | Path, cropper: Cropper | None = None, victim_name: str = "",
                          device: torch.device | str = "cpu") -> dict:
    """Evaluate every photo in ``folder``; write ``photos.csv``, ``summary.json`` and ``contact_sheet.png``
    into ``out_dir`` and return the summary."""
    true_index = victim.label_index(true_label)
    target_index = victim.label_index(target_label) if target_label else None
    cropper = cropper or WholePhoto()
    results, crops = classify_photos(list_photos(folder), victim, true_index, target_index, cropper, device=device)
    if all(r.skipped for r in results):
        raise PhotoError(f"None of the photos in {folder} could be read ({results[0].skipped}); replace them with "
                         "complete JPEG or PNG files.")
    out_dir = Path(out_dir)
    summary = summarize(results, true_label=true_label, target_label=target_label,
                        victim_name=victim_name or type(victim).__name__,
                        cropper=getattr(cropper, "description", type(cropper).__name__))
    summary["folder"] = str(Path(folder))
    table = io.StringIO()
    writer = csv.writer(table, lineterminator="\n")
    writer.writerow(["file", "x0", "y0", "x1", "y1", "prediction", "confidence", "true_confidence",
                     "target_confidence", "success", "skipped"])
    for r in results:
        writer.writerow([r.file, *(r.box or ("", "", "", "")), r.prediction, f"{r.confidence:.4f}",
                         f"{r.true_confidence:.4f}", f"{r.target_confidence:.4f}", int(r.success), r.skipped])
    save_text(out_dir / "photos.csv", table.getvalue())
    save_json(out_dir / "summary.json", {**summary, "per_photo": [asdict(r) for r in results]})
    save_rgb_png(out_dir / "contact_sheet.png", contact_sheet(crops, results))
    return summary


__all__ = ["BoxFile", "Cropper", "DetectorCropper", "PhotoError", "PhotoResult", "WholePhoto", "classify_photos",
           "contact_sheet", "evaluate_photo_folder", "list_photos", "summarize"]


# -- the command ------------------------------------------------------------------------------------

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
        node = open_run(run_dir).cfg.victim
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
    run_dir = check_finished_run(cmd.run_dir) if cmd.run_dir else None
    true_label, target = cmd.true_label, cmd.target
    if run_dir is not None:
        report = open_run(run_dir).report
        if report is None:
            raise InputError(f"{run_dir} has no metrics.json; give run_dir= a finished attack run, or name "
                             "true_label= and target= instead.")
        true_label, target = true_label or report.summary["true_label"], target or report.summary.get("target_label")
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
