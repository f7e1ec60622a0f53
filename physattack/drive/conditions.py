"""The drives' own light and weather in the approach EOT (issue 27: each preset "in the held-out drive set and in
EOT"): ``Conditions`` draws, per approach, fog, dusk or night in the car's headlights for the views
(``SceneParams.fog_beta``, ``headlights`` and the light) and for the drives the detector framing is measured on,
so that a view draws the detector's boxes measured in its own conditions (``condition_code``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor

from physattack.drive.trajectories import DRIVE_LIGHTS, NIGHT_LIGHTS, Drive
from physattack.eot.params import SceneParams
from physattack.errors import InputError, check_interval, check_range

Range = tuple[float, float]


@dataclass(frozen=True)
class Conditions:
    """The drives' own light and weather, drawn per approach (issue 27's presets in EOT; the held-out drives' are
    ``drive.drives.lighting`` and ``weather``): a share ``fog`` of the drives in fog of a meteorological visibility
    log-uniform in ``fog_visibility_m`` (the drives' ``fog`` is 150 m, ``haze`` 400 m; ``physattack.eot.fog``), a
    share ``night`` at night in the car's headlights (the drives' ``night`` light: the sheeting retroreflects,
    print does not; ``physattack.eot.night``) and a share ``dusk`` in the drives' ``dusk`` light; the others keep
    ``view``'s daylight. Shares of 0 draw nothing, so every other draw of a step stays as it was."""

    fog: float = 0.0
    fog_visibility_m: Range = (150.0, 1000.0)
    night: float = 0.0
    dusk: float = 0.0

    def __post_init__(self) -> None:
        key = "eot.sampler.conditions."
        for name in ("fog", "night", "dusk"):
            check_range(key + name, getattr(self, name), 0.0, 1.0, why="a share of the drives")
        check_interval(key + "fog_visibility_m", self.fog_visibility_m, 0.0, lo_open=True,
                       why="the fog's visibility in metres")
        if self.night + self.dusk > 1.0:
            raise InputError(f"{key}night={self.night:g} and {key}dusk={self.dusk:g} add up to more than every drive: "
                             "make their sum at most 1.")

    @property
    def any(self) -> bool:
        return bool(self.fog or self.night or self.dusk)

    def draw(self, base: SceneParams, generator: torch.Generator) -> tuple[SceneParams, Tensor]:
        """``base`` (one row per drive) with its drives' fog and light drawn, and each drive's ``condition_code``."""
        d, g, out = len(base), generator, base
        fog = night = dusk = torch.zeros(d, dtype=torch.bool)
        if self.fog:
            u = torch.rand(d, 2, generator=g)
            visibility = self._visibility(u[:, 1])
            fog = u[:, 0] < self.fog
            out = replace(out, fog_beta=torch.where(fog, 3.912 / visibility, torch.zeros(d)))
        if self.night or self.dusk:
            u = torch.rand(d, generator=g)
            night, dusk = u < self.night, (u >= self.night) & (u < self.night + self.dusk)
            light = {k: torch.where(night, v, torch.where(dusk, DRIVE_LIGHTS["dusk"][k], getattr(out, k)))
                     for k, v in DRIVE_LIGHTS["night"].items()}
            out = replace(out, headlights=night.float(), **light)
        return out, condition_code(night, dusk, fog)

    def on_drives(self, drives: list[Drive], generator: torch.Generator) -> list[Drive]:
        """``drives`` (the detector framing's) in the drives' own presets, drawn with these shares: ``night``,
        ``dusk``, and ``fog`` as the held-out drives have it (visibility under ``HAZE_BELOW_M`` the 150-m ``fog``,
        else the 400-m ``haze``)."""
        if not self.any:
            return drives
        u = torch.rand(len(drives), 3, generator=generator)
        visibility = self._visibility(u[:, 2])
        out = []
        for i, d in enumerate(drives):
            light = ("night" if u[i, 1] < self.night else "dusk" if u[i, 1] < self.night + self.dusk else d.light)
            weather = d.weather if u[i, 0] >= self.fog else ("fog" if visibility[i] < HAZE_BELOW_M else "haze")
            out.append(replace(d, light=light, weather=weather))
        return out

    def _visibility(self, u: Tensor) -> Tensor:
        """Visibilities log-uniform in ``fog_visibility_m`` from uniform draws ``u``."""
        lo, hi = (math.log(v) for v in self.fog_visibility_m)
        return torch.exp(lo + (hi - lo) * u)


#: a drawn fog thinner than this visibility is framed on the held-out drives' 400-m ``haze``, else their 150-m ``fog``
HAZE_BELOW_M = 250.0


def drive_condition(drive: Drive) -> int:
    """A drive's ``condition_code``."""
    t = lambda v: torch.tensor([v])  # noqa: E731
    return int(condition_code(t(drive.light in NIGHT_LIGHTS), t(drive.light == "dusk"),
                              t(drive.weather in ("fog", "haze")))[0])


def condition_code(night: Tensor, dusk: Tensor, fog: Tensor) -> Tensor:
    """Per view (or measured frame): 0 day, 1 dusk, 2 night, plus 3 in fog — which measurements of the detector's
    boxes a view may draw (``DetectorFraming.sample``)."""
    return (2 * night.long() + (dusk & ~night).long()) + 3 * fog.long()


__all__ = ["Conditions", "HAZE_BELOW_M", "condition_code", "drive_condition"]
