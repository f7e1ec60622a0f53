"""The run report: everything a run found, in sections, written once as ``metrics.json``.

A command builds one ``RunReport``; the attack, the held-out protocol (with its victims or detectors
table, sanity flags and atlas), the placement-error table, the drives and the headline each add
their section, and the command writes it once, atomically (``write``), at the end. Everything that
reads a finished run reads it back through ``read_report`` (via ``physattack.cli.runs.open_run``). A
section is present or absent as a whole; nobody probes its keys to learn what kind of run it was
(``kind`` says so).

The file keeps the layout earlier versions wrote (the run's own facts and figures at the top level,
each section under its own key) and adds ``schema_version`` and ``kind``; a file without a version is
version 1 and reads the same way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from physattack.atomic import save_json
from physattack.errors import InputError

SCHEMA_VERSION = 2
METRICS_FILE = "metrics.json"

#: The sections, in the order ``metrics.json`` lists them after the run's own facts and figures.
SECTIONS = ("per_view", "query", "heldout", "sanity", "atlas", "placement", "report", "drive", "area", "headline")


@dataclass
class RunReport:
    """One run's report.

    Args:
        kind: the attack kind that made it (``classifier``, ``detector``, ``reprogram``, ...:
            ``physattack.cli.kinds``).
        summary: what ran and its own figures: scene, attack, victims, patch, steps, seed, and the
            quick grid's rates (the top level of ``metrics.json``).
        per_view: the quick grid's views, one row each.
        query: a query attack's record (``physattack.cli.kinds.query``): the victim queried, images asked,
            answers, optimizer, the success-vs-queries curve.
        heldout: the held-out protocol (its rates, per condition, per view, and the victims' or
            detectors' table).
        sanity: the protocol's sanity flags. atlas: its natural-failure atlas.
        placement: the placement-error table. report: the path of ``report.md``.
        drive: the drive report's summary. area: the area frontier (``physattack.evaluate.area``).
        headline: the line the command ends with.
    """

    kind: str
    summary: dict[str, Any] = field(default_factory=dict)
    per_view: list[dict] | None = None
    query: dict | None = None
    heldout: dict | None = None
    sanity: list[dict] | None = None
    atlas: dict | None = None
    placement: dict | None = None
    report: str | None = None
    drive: dict | None = None
    area: dict | None = None
    headline: str | None = None
    schema_version: int = SCHEMA_VERSION

    def __getitem__(self, key: str):
        """The report as ``metrics.json`` has it (``report["heldout"]``, ``report["attack"]``)."""
        return self.to_json()[key]

    def get(self, key: str, default=None):
        return self.to_json().get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self.to_json()

    @property
    def interrupted(self) -> bool:
        return bool(self.summary.get("interrupted"))

    def add(self, **sections) -> RunReport:
        """Add sections (``report.add(heldout=..., sanity=...)``); a section is given whole, once."""
        for name, value in sections.items():
            if name not in SECTIONS and name != "summary":
                raise ValueError(f"{name} is not a section of the run report ({', '.join(SECTIONS)})")
            if name == "summary":
                self.summary.update(value)
            else:
                setattr(self, name, value)
        return self

    def to_json(self) -> dict:
        """``metrics.json``'s content: the run's facts and figures, then each present section."""
        out = {"schema_version": self.schema_version, "kind": self.kind, **self.summary}
        for name in SECTIONS:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        return out

    def write(self, folder: str | Path) -> Path:
        """Write ``<folder>/metrics.json`` atomically: the one place the file is written."""
        return save_json(Path(folder) / METRICS_FILE, self.to_json())

    @classmethod
    def from_json(cls, data: dict, path: Path | str = METRICS_FILE) -> RunReport:
        """A report from what ``to_json`` (or an earlier version, which had no ``schema_version``) wrote."""
        if not isinstance(data, dict):
            raise InputError(f"{path} does not hold a run report (a JSON object); was the run folder edited?")
        version = data.get("schema_version", 1)
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise InputError(f"{path} is a run report of schema version {version}, newer than this physattack reads "
                             f"({SCHEMA_VERSION}); upgrade physattack, or re-evaluate the run with "
                             "`python -m physattack.evaluate run_dir=<run>`.")
        rest = {k: v for k, v in data.items() if k not in ("schema_version", "kind")}
        sections = {name: rest.pop(name) for name in SECTIONS if name in rest}
        kind = data.get("kind") or _kind_of_version_1(data)
        return cls(kind=kind, summary=rest, schema_version=SCHEMA_VERSION, **sections)


def _kind_of_version_1(data: dict) -> str:
    """What kind of run a version-1 report (no ``kind``) came from, read off the keys it wrote."""
    if data.get("attack") == "reprogram":
        return "reprogram"
    return "detector" if "detection_rate_clean" in data else "classifier"


def read_report(folder: str | Path) -> RunReport | None:
    """The report in ``<folder>/metrics.json``, or None when the run wrote none (it was stopped before its
    end); a damaged or too-new file is one sentence."""
    path = Path(folder) / METRICS_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InputError(f"{path} is not valid JSON; was the run folder edited?") from None
    return RunReport.from_json(data, path)


__all__ = ["METRICS_FILE", "RunReport", "SCHEMA_VERSION", "SECTIONS", "read_report"]
