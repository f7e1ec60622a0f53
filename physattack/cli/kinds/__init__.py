"""Attack kinds in one table.

An attack kind — a classifier attacked to a target or away from its label, a detector made to miss or
mislabel the sign, a classifier reprogrammed to a new task, ... — is one object that knows, for a run
of its kind: how its views are framed, which victims its held-out protocol scores, how a finished
attack is evaluated and reported, which perception stack judges its drives, its headline and what the
console prints. The command (``physattack.cli.attack``), the builder (``physattack.cli.parts``) and the
commands that read finished runs ask the kind; nothing else branches on it.

``KINDS`` is the table, asked in order (``kind_for``): the first kind whose ``matches`` says yes runs.
A new kind is one new module with an ``AttackKind`` subclass, ``register``-ed, and its config.
"""

from __future__ import annotations

from physattack.cli.kinds.base import AttackKind, PerceptionInputs, ProtocolInputs
from physattack.cli.kinds.classifier import ClassifierKind
from physattack.cli.kinds.detector import DetectorKind
from physattack.cli.kinds.query import QueryDetectorKind, QueryKind
from physattack.cli.kinds.reprogram import ReprogramKind
from physattack.errors import InputError


#: The table, asked in this order: reprogramming, query-only classifiers and detectors, detectors, classifiers (the
#: catch-all of classifier victims).
KINDS: list[AttackKind] = []


def register(kind: AttackKind, first: bool = False) -> AttackKind:
    """Add ``kind`` to the table (asked before the others with ``first``); returns it."""
    if any(k.name == kind.name for k in KINDS):
        raise ValueError(f"an attack kind named {kind.name} is registered already")
    KINDS.insert(0, kind) if first else KINDS.append(kind)
    return kind


def unregister(name: str) -> None:
    KINDS[:] = [k for k in KINDS if k.name != name]


def kind_for(attack, victim) -> AttackKind:
    """The first kind of the table that a run of ``attack`` on ``victim`` is."""
    for kind in KINDS:
        if kind.matches(attack, victim):
            return kind
    raise InputError(f"No attack kind runs {type(attack).__name__} on {type(victim).__name__}; the kinds are "
                     f"{', '.join(k.name for k in KINDS)}.")


def kind_of_run(report, attack_node, victim) -> AttackKind:
    """The kind of a finished run: the one its report names, or (a run stopped before it wrote one) the
    kind its attack config (``attack_node``) and victim make."""
    if report is not None:
        return named(report.kind)
    from physattack.cli.build import make

    return kind_for(make(attack_node), victim)


def named(name: str) -> AttackKind:
    """The kind a run report names."""
    for kind in KINDS:
        if kind.name == name:
            return kind
    raise InputError(f"The run report names the attack kind {name!r}, which this physattack does not know; the "
                     f"kinds are {', '.join(k.name for k in KINDS)}.")


for _kind in (ReprogramKind(), QueryKind(), QueryDetectorKind(), DetectorKind(), ClassifierKind()):
    register(_kind)

__all__ = ["AttackKind", "KINDS", "PerceptionInputs", "ProtocolInputs", "kind_for", "kind_of_run", "named",
           "register", "unregister"]
