"""The stack's detector still boxes the whole sign: a classifier run's term on the drive detector's tiles (issue 26).

A classifier's approach windows are framed by the stack's detector (``physattack.drive.framing``), measured on the
current patch and detached: the optimizer learns what the classifier reads *given* the detector's boxes, never what
the patch does to the detector. A patch fitted to classifiers alone can half-hide the sign from the detector it was
never fitted to: on the red team's preset (seed 3) the tile that holds the whole far sign scored it under the
threshold in 14 of 22 frames at 61-67 m while a tile whose edge cuts the sign still found the part it shows, and the
classifier's crop of that part read *stop* (``benchmarks/edge_crops.py --tiles``). The car then stops on a sign the
patch had fooled whenever it was boxed whole.

``SeenSettings`` (``eot.sampler.seen``) adds, for a few window frames a step, the detector's reading of the sign on
every tile of the stack's search that holds it whole (rendered at the detector's input size, at the sign's place and
scale in that tile), and a hinge that keeps each frame's best reading over its tiles (the stack needs one box on the
whole sign; the 1x tile of a far sign seldom reads it, even clean) at or above ``reading`` (the odds of the best
candidate that boxes the whole sign, IoU at least 0.5 with its box, of any class (the two-stage stack crops a box
whatever the detector calls it), over the operating threshold's, as a probability: ½ at the threshold). A part of
the sign does not count: the stack takes a box on a part at its IoU of 0.3 and crops it. It asks the detector to
*see* the sign, never to miss it, so a held-out classifier behind the same detector is not flattered: the term only
makes the boxes the members were attacked through the boxes the car takes. It uses the detector's gradient; the
stack's detector is the one the framing already runs (``drive.detector``, DetNet by default). The term's loss is
``physattack.attack.seen.SeenTerm``'s (the optimization reads the detector; this part only draws the rows).
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from physattack.eot.params import SceneParams
from physattack.errors import check_choice, check_range

#: what ``eot.sampler.seen.label`` may name: a box of any class, or of the attack's target only
LABELS = ("any", "target")


@dataclass
class SeenSettings:
    """``eot.sampler.seen``: the stack's detector keeps reading the whole sign (see the module docstring).

    Args:
        weight: of the hinge beside the classifiers' loss; 0 (the default) adds nothing and renders nothing more.
        frames: window frames a step reads on the detector's tiles (drawn at random from the step's windows).
        reading: the detector's reading of the whole sign (odds over its threshold's, as a probability) the hinge
            keeps each drawn frame's best tile at; 0.75 is a score of 0.56 at DetNet's threshold of 0.3.
        label: ``any`` (a box of any of the detector's classes reads the sign) or ``target``: only a box of the
            attack's target class (the detector's *yield*), the reading the classifiers are attacked towards.
        project: take the term's gradient less its part against the attack's (the classifiers' windows and views,
            the print terms) where the two conflict, so that to first order it never costs the classifiers' loss
            (one-sided gradient surgery: Yu et al., "Gradient Surgery for Multi-Task Learning", NeurIPS'20).
    """

    weight: float = 0.0
    frames: int = 16
    reading: float = 0.75
    label: str = "any"
    project: bool = False

    def __post_init__(self) -> None:
        key = "eot.sampler.seen."
        check_range(key + "weight", self.weight, 0.0, why="the detector term's weight beside the classifiers' loss")
        check_range(key + "frames", self.frames, 1, integer=True, why="window frames a step reads on the tiles")
        check_range(key + "reading", self.reading, 0.0, 1.0, lo_open=True, hi_open=True,
                    why="the detector's reading to keep, ½ at its threshold")
        check_choice(key + "label", self.label, LABELS)

    @classmethod
    def of(cls, value) -> "SeenSettings":
        return value if isinstance(value, cls) else cls(**dict(value or {}))

    @property
    def on(self) -> bool:
        return self.weight > 0


@dataclass(frozen=True)
class SeenRows:
    """A step's rows of the term: ``params``, one per tile that holds a drawn window frame's sign whole, and
    ``frame``, the drawn frame (0..frames-1) each row is a tile of: a frame is seen when any of its tiles reads the
    sign, as the stack boxes it when any tile does."""

    params: SceneParams
    frame: Tensor

    def __len__(self) -> int:
        return len(self.params)


__all__ = ["SeenRows", "SeenSettings"]
