"""Each finished drive's per-frame results, written as it finishes, so that a drive report stopped part
way keeps every drive it judged and a run of the same command continues where it stopped.

``<report>/per_drive/drive_<i>.pt`` (data only: tensors, numbers, lists) holds drive ``i``'s readings with
each texture, its recognition frames and a key of everything its verdict depends on (the drive, the
judge's settings, the stack and its panel, the textures, the dashcam); a file whose key differs is
judged again, never reused. ``per_drive/command.json`` identifies the command that wrote the folder
(``continuing``: a later run of the same command takes the folder over).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path

import torch

from physattack.atomic import load_torch, save_json, save_torch
from physattack.drive.judge import DriveOutcome, Judging
from physattack.drive.stacks import Readings
from physattack.errors import InputError
from physattack.victims.detection import Detections

FOLDER = "per_drive"
COMMAND_FILE = "command.json"


def judging_key(judging: Judging) -> str:
    """A digest of what every drive's verdict depends on besides the drive itself."""
    digest = hashlib.sha256()
    for name, texture in judging.textures.items():
        digest.update(name.encode())
        digest.update(texture.detach().float().cpu().contiguous().numpy().tobytes())
    stack = judging.stack
    parts = {"settings": {f.name: getattr(judging.settings, f.name) for f in fields(judging.settings)
                          if f.name not in ("timelines", "videos", "video_scale")},
             "stack": [stack.kind, stack.names, stack.labels, sorted(stack.panel), list(stack.region)],
             "search": asdict(search) if is_dataclass(search := getattr(getattr(stack, "tiled", None), "settings", None))
             else None,
             "crops": [getattr(stack, "crop_frame", None), getattr(stack, "crop_px", None)],
             "dashcam": asdict(judging.renderer.dashcam) if is_dataclass(judging.renderer.dashcam) else None,
             "scene": judging.scene.name, "photographed": judging.photograph is not None, "chunk": judging.chunk}
    digest.update(json.dumps(parts, sort_keys=True, default=str).encode())
    return digest.hexdigest()


class DriveStore:
    """Per-drive results of one drive report in ``folder`` (see the module)."""

    def __init__(self, folder: str | Path, key: str):
        self.folder, self.key = Path(folder) / FOLDER, key

    def path(self, index: int) -> Path:
        return self.folder / f"drive_{index}.pt"

    def kept(self) -> int:
        return len(list(self.folder.glob("drive_*.pt"))) if self.folder.is_dir() else 0

    def save(self, outcome: DriveOutcome) -> None:
        save_torch(self.path(outcome.index), {
            "key": self.key + _drive_key(outcome.drive), "index": outcome.index, "judged": outcome.judged,
            "braking_m": outcome.braking_m, "recognised": outcome.recognised,
            "panel_recognised": outcome.panel_recognised,
            "readings": {n: _readings_data(r) for n, r in outcome.readings.items()}})

    def load(self, index: int, drive, frames) -> DriveOutcome | None:
        """Drive ``index``'s outcome as an earlier run of this very report judged it, or None."""
        path = self.path(index)
        if not path.is_file():
            return None
        try:
            data = load_torch(path, "per-drive result")
        except InputError:
            return None                              # damaged: judge it again
        if not isinstance(data, dict) or data.get("key") != self.key + _drive_key(drive):
            return None
        readings = {n: _readings_of(r) for n, r in data["readings"].items()}
        return DriveOutcome(index, drive, frames, data["braking_m"], data["judged"], readings, data["recognised"],
                            data["panel_recognised"])


def _drive_key(drive) -> str:
    return json.dumps(drive.describe(), sort_keys=True, default=str)


def _readings_data(r: Readings) -> dict:
    return {"correct": r.correct, "label": r.label, "score": r.score, "box": r.box, "panel": r.panel,
            "detections": [[d.boxes, d.scores, d.labels] for d in r.detections]}


def _readings_of(data: dict) -> Readings:
    return Readings(data["correct"], data["label"], data["score"], data["box"],
                    [Detections(torch.as_tensor(b), torch.as_tensor(s), torch.as_tensor(lab))
                     for b, s, lab in data["detections"]], dict(data["panel"]))


def write_command(folder: str | Path, identity: dict) -> None:
    """Record which command wrote the drive report in ``folder`` (``continuing`` reads it)."""
    save_json(Path(folder) / FOLDER / COMMAND_FILE, identity)


def continuing(candidates: list[Path], identity: dict) -> Path | None:
    """The first of ``candidates`` that an interrupted run of the command ``identity`` left unfinished (it
    holds per-drive results and no ``drive.json``), or None."""
    for folder in candidates:
        marker = folder / FOLDER / COMMAND_FILE
        if not marker.is_file() or (folder / "drive.json").exists():
            continue
        try:
            if json.loads(marker.read_text()) == json.loads(json.dumps(identity, default=str)):
                return folder
        except (OSError, json.JSONDecodeError):
            continue
    return None


__all__ = ["DriveStore", "continuing", "judging_key", "write_command"]
