"""A bend and a grade in the road before the sign: the approach follows a circular arc that joins the straight,
level last stretch, and climbs or falls to it.

The road's own coordinates are the straight road's (``street.py``, ``trajectories.py``): ``x`` across the road
(the sign at the origin, the car's lane at ``x = -lane_offset_m``), ``y`` up, ``z`` = ``s``, the distance along
the road from the sign. A ``Curve`` keeps the road straight for ``straight_m`` before the sign and bends it
beyond, with a constant radius: a point ``(u, y, s)`` of the straight road goes to ``c(s) + u·n(s)``, where the
centre line ``c`` turns by ``θ(s) = (s - straight_m) / radius_m`` and ``n`` is the road's across direction there.
Distances along the road (the braking point, ``DriveFrames.distance_m``) stay arc lengths; the car's heading at
``s`` is ``θ(s)`` (``Dashcam.cameras``' ``heading_deg``), so on a bend the sign moves across the frame as the car
turns towards it.

A positive radius bends the road to the right on the way to the sign (the side the sign stands on), a negative
one to the left; 0 is the straight road. Only the approach bends: the road stays straight past the sign.

A grade (``grade_pct``) tilts the same stretch: the road's height at ``s`` beyond ``straight_m`` is
``-grade·(s - straight_m)`` below the level part, so a positive grade climbs to the sign and ends in a **crest**
at ``straight_m`` (the road before the crest hides whatever lies beyond it below the crest's sight line:
``DriveRenderer`` keeps the street there), a negative one falls to it, a sag. The car pitches with the road
(``Dashcam.cameras``' ``slope_deg``). Distances along the road are taken in plan (a 10 % grade makes them 0.5 %
short).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from physattack.errors import InputError, check_range

#: the tightest bend a drive takes (a 30-m radius is a tight urban corner at 20-30 km/h)
MIN_RADIUS_M = 30.0
#: the steepest grade a drive takes, per cent (steep urban streets; motorways stay under 6 %)
MAX_GRADE_PCT = 15.0
#: polygons of the street are cut into pieces this long along the road where it bends
PIECE_M = 3.0


@dataclass(frozen=True)
class Curve:
    """A bend of ``radius_m`` (signed: > 0 to the right, < 0 to the left, 0 straight) and a grade of ``grade_pct``
    (> 0 climbing to the sign, < 0 falling to it), both starting ``straight_m`` before the sign."""

    radius_m: float = 0.0
    straight_m: float = 30.0
    grade_pct: float = 0.0

    def __post_init__(self) -> None:
        check_range("drive.drives.curve_straight_m", self.straight_m, 0.0,
                    why="metres of straight road before the sign where the bend ends")
        if self.radius_m and abs(self.radius_m) < MIN_RADIUS_M:
            raise InputError(f"drive.drives.curve_radius_m={self.radius_m:g} is tighter than a road bends; give 0 "
                             f"(straight) or a radius of at least {MIN_RADIUS_M:g} m (negative: a left bend).")
        check_range("drive.drives.grade_pct", self.grade_pct, -MAX_GRADE_PCT, MAX_GRADE_PCT,
                    why="per cent the road climbs (> 0) or falls (< 0) to the level stretch before the sign")

    @property
    def straight(self) -> bool:
        """Whether the road is straight and level all the way (nothing to bend, tilt or pitch)."""
        return not self.radius_m and not self.grade_pct

    @property
    def crest(self) -> bool:
        return self.grade_pct > 0

    def theta(self, s):
        """The road's heading at ``s`` (radians; numpy or torch, as given): 0 on the straight stretch."""
        if not self.radius_m:
            return s * 0.0
        beyond = (s - self.straight_m).clip(min=0) if isinstance(s, Tensor) else np.clip(s - self.straight_m, 0, None)
        return beyond / self.radius_m

    def place(self, points):
        """``points`` (…×3, the straight road's coordinates; numpy or torch) on the bent road."""
        if self.straight:
            return points
        lib = torch if isinstance(points, Tensor) else np
        u, y, s = points[..., 0], points[..., 1], points[..., 2]
        beyond = s - self.straight_m
        y = y - self.grade_pct / 100 * lib.where(beyond > 0, beyond, 0.0 * s)
        if not self.radius_m:
            return lib.stack([u, y, s], -1)
        th = self.theta(s)
        k = 1.0 / self.radius_m
        cx = lib.where(beyond > 0, (1 - lib.cos(th)) / k, 0.0 * s)
        cz = lib.where(beyond > 0, self.straight_m + lib.sin(th) / k, s)
        return lib.stack([cx + u * lib.cos(th), y, cz - u * lib.sin(th)], -1)

    def heading_deg(self, s: Tensor) -> Tensor:
        """The car's heading at ``s`` (degrees about y, ``turn``'s sense): the road's direction there."""
        return torch.rad2deg(self.theta(s))

    def slope_deg(self, s: Tensor) -> Tensor:
        """The car's pitch at ``s`` from the road's grade (degrees, up when it climbs to the sign)."""
        return torch.where(s > self.straight_m, math.degrees(math.atan(self.grade_pct / 100)), 0.0 * s)

    def polygons(self, polys: list, faces: list) -> tuple[list, list]:
        """A street's polygons and other signs (``street.Polygon``, ``street.SignFace``) on the bent road: polygons
        that reach into the bend are cut every ``PIECE_M`` along the road first, normals and faces turned with it."""
        if self.straight:
            return polys, faces
        from physattack.drive.street import Polygon, SignFace

        out = []
        for p in polys:
            for piece in _pieces(p.points, self.straight_m):
                th = float(self.theta(piece[:, 2].mean()))
                n = p.normal
                if n[1] and piece[:, 2].mean() > self.straight_m:            # the ground tilts with the grade
                    n = (n[0], math.cos(math.atan(self.grade_pct / 100)), math.sin(math.atan(self.grade_pct / 100)))
                normal = (n[0] * math.cos(th) + n[2] * math.sin(th), n[1], -n[0] * math.sin(th) + n[2] * math.cos(th))
                out.append(Polygon(self.place(piece), p.colour, normal, p.wet))
        bent = [SignFace(self.place(f.centre), f.name, float(self.theta(f.centre[2]))) for f in faces]
        return out, bent


def _pieces(points: np.ndarray, straight_m: float) -> list[np.ndarray]:
    """A polygon cut along the road into pieces at most ``PIECE_M`` long where it lies beyond ``straight_m``:
    only a quad whose corners sit at two distances along the road (a road strip, a kerb, a facade) is cut."""
    z = np.unique(points[:, 2])
    if len(points) != 4 or len(z) != 2 or z[1] <= straight_m or z[1] - z[0] <= PIECE_M:
        return [points]
    near, far = points[points[:, 2] == z[0]], points[points[:, 2] == z[1]]
    if len(near) != 2 or len(far) != 2:
        return [points]
    partner = [int(np.argmin(np.abs(far[:, :2] - q[:2]).sum(1))) for q in near]
    if sorted(partner) != [0, 1]:
        return [points]
    far = far[[partner[1], partner[0]]]                      # near[0], near[1], then their partners, back round
    cuts = np.unique(np.concatenate([[z[0]], np.arange(max(z[0], straight_m), z[1], PIECE_M)[1:], [z[1]]]))
    if z[0] < straight_m < z[1]:
        cuts = np.unique(np.concatenate([cuts, [straight_m]]))
    out = []
    for a, b in zip(cuts[:-1], cuts[1:]):
        lo, hi = near.copy(), far.copy()
        lo[:, 2], hi[:, 2] = a, b
        out.append(np.concatenate([lo, hi]))
    return out
