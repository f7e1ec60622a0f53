"""Label sets: map a scene's class name to the *set* of a victim's labels that count as that object.

A victim trained on another label space has no label for the scene's class (ImageNet has no "stop
sign"), or several acceptable ones. A label-set file is JSON: ``{"stop": {"indices": [919], "names":
["street sign"]}, ...}`` (keys starting with ``_`` are comments). ``imagenet`` names the bundled
``assets/imagenet_label_sets.json`` for torchvision's ImageNet-1k classifiers.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from physattack.victims.base import VictimError

BUNDLED = {"imagenet": "imagenet_label_sets.json"}


def load_label_sets(source: str | Path | dict | None, labels: tuple[str, ...] = ()) -> dict[str, tuple[int, ...]]:
    """Label sets from a bundled name (``imagenet``), a JSON file, or a dict of name -> indices.

    Args:
        source: ``None`` (no sets), a bundled name, a path, or ``{"stop": [919], ...}``.
        labels: the victim's labels, to check that every index exists.
    """
    if source is None:
        return {}
    if isinstance(source, (str, Path)) and str(source) in BUNDLED:
        source = Path(str(resources.files("physattack.assets"))) / BUNDLED[str(source)]
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise VictimError(f"No label-set file at {path}; give victim.label_sets a JSON file, "
                              f"one of {sorted(BUNDLED)}, or null.")
        source = json.loads(path.read_text())
    sets = {}
    for name, entry in dict(source).items():
        if str(name).startswith("_"):
            continue
        indices = entry["indices"] if isinstance(entry, dict) else entry
        indices = tuple(int(i) for i in indices)
        if not indices or (labels and any(not 0 <= i < len(labels) for i in indices)):
            raise VictimError(f"The label set for '{name}' ({list(indices)}) is empty or names indices outside "
                              f"the victim's {len(labels)} labels.")
        sets[str(name)] = indices
    return sets

