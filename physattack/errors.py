"""Input errors: the input is wrong, and the message is one sentence that says what to do.

Every part raises a subclass of ``InputError``; the entry points print these without a stack
trace (``physattack.cli.door``). Anything else is a bug and keeps its trace.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable


class InputError(ValueError):
    """Bad input (a file, a configuration value, a label); the message says what to do.

    The ``check_*`` class methods test one value and raise the class they are called on, so that a
    part's own kind of error names what failed: ``PatchError.check_range("patch.eps", eps, 0, 1)``
    raises a PatchError. The module's ``check_range``, ``check_interval``, ``check_choice`` and
    ``check_values`` are the plain InputError's. Their sentences: see "range checks" below.
    """

    @classmethod
    def check_range(cls, name: str, value, lo: float | None = None, hi: float | None = None, *,
                    lo_open: bool = False, hi_open: bool = False, integer: bool = False, why: str = ""):
        """``value`` as a finite number within the bounds, or this error in one sentence naming ``name``.

        >>> check_range("eot.grid.sensor_focal_px", 0, 0, lo_open=True, why="the camera's focal length in pixels")
        Traceback (most recent call last):
        ...
        physattack.errors.InputError: eot.grid.sensor_focal_px must be > 0 (the camera's focal length in pixels); got 0.
        """
        if not _is_number(value, integer) or not _inside(float(value), lo, hi, lo_open, hi_open):
            bounds = _bounds(lo, hi, lo_open, hi_open)
            if integer:
                kind = "an integer"
            elif not bounds:
                kind = "a finite number"
            elif not _is_number(value, False):
                kind = "a number"
            else:
                kind = ""                                    # a number out of range: "must be in (0, 1]"
            must = f"{kind} {bounds}".strip()
            raise cls(f"{name} must be {must}{_why(why)}; got {_show(value)}.")
        return int(value) if integer else value

    @classmethod
    def check_interval(cls, name: str, pair, lo: float | None = None, hi: float | None = None, *,
                       lo_open: bool = False, hi_open: bool = False, why: str = "") -> tuple[float, float]:
        """``pair`` as a ``(min, max)`` tuple with min <= max, both within the bounds, or this error.

        >>> check_interval("eot.sampler.distance_m", [25, 3], 0, lo_open=True)
        Traceback (most recent call last):
        ...
        physattack.errors.InputError: eot.sampler.distance_m must be [min, max] with 0 < min <= max; got [25, 3].
        """
        low = "" if lo is None else f"{_show(lo)} {'<' if lo_open else '<='} "
        high = "" if hi is None else f" {'<' if hi_open else '<='} {_show(hi)}"
        must = f"[min, max] with {low}min <= max{high}"
        try:
            a, b = pair
        except (TypeError, ValueError):
            raise cls(f"{name} must be {must}{_why(why)}; got {_show(pair)}.") from None
        if not (_is_number(a, False) and _is_number(b, False) and _inside(float(a), lo, hi, lo_open, hi_open)
                and _inside(float(b), lo, hi, lo_open, hi_open) and a <= b):
            raise cls(f"{name} must be {must}{_why(why)}; got {_show(pair)}.")
        return a, b

    @classmethod
    def check_choice(cls, name: str, value, choices):
        """``value`` if it is one of ``choices``, or this error in one sentence with the closest choice.

        >>> check_choice("augment", "shfit", ["none", "shift"])
        Traceback (most recent call last):
        ...
        physattack.errors.InputError: augment must be one of none, shift (did you mean shift?); got 'shfit'.
        """
        import difflib

        if value not in choices:
            close = difflib.get_close_matches(str(value), [str(c) for c in choices], n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise cls(f"{name} must be one of {', '.join(map(str, choices))}{hint}; got {value!r}.")
        return value

    @classmethod
    def check_values(cls, name: str, values, lo: float | None = None, hi: float | None = None, *,
                     lo_open: bool = False, hi_open: bool = False, integer: bool = False, why: str = "") -> list:
        """``values`` as a non-empty list of numbers, each within the bounds, or this error.

        >>> check_values("eot.grid.distance_m", [4, -1], 0, lo_open=True, why="metres")
        Traceback (most recent call last):
        ...
        physattack.errors.InputError: eot.grid.distance_m must be a non-empty list of numbers > 0 (metres); got [4, -1].
        """
        kind = "integers" if integer else "numbers"
        bounds = _bounds(lo, hi, lo_open, hi_open)
        must = f"a non-empty list of {kind}" + (f" {bounds}" if bounds else "")
        if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
            raise cls(f"{name} must be {must}{_why(why)}; got {_show(values)}.")
        values = list(values)
        if not values or not all(_is_number(v, integer) and _inside(float(v), lo, hi, lo_open, hi_open)
                                 for v in values):
            raise cls(f"{name} must be {must}{_why(why)}; got {_show(values)}.")
        return [int(v) for v in values] if integer else values


# The plain InputError's checks, for parts without a kind of error of their own.
check_range = InputError.check_range
check_interval = InputError.check_interval
check_choice = InputError.check_choice
check_values = InputError.check_values


class WriteError(RuntimeError):
    """A file could not be written (a full disk, a folder made read-only mid-run); the file that was
    there before is unchanged. The door prints the sentence and exits with ``WRITE_FAILED``."""

    def __init__(self, path, reason: str):
        self.path, self.reason = path, reason
        super().__init__(f"Cannot write {path} ({reason}); what was there before is unchanged")


#: The exit status of a command that could not write its outputs (sysexits.h's EX_IOERR).
WRITE_FAILED = 74

#: errno values that mean "this place cannot take the file", not a bug.
WRITE_ERRNOS = {28, 122, 30, 13, 1, 27}       # ENOSPC, EDQUOT, EROFS, EACCES, EPERM, EFBIG


def write_error(exc: BaseException | None) -> WriteError | None:
    """The WriteError behind ``exc`` (or an OSError of a full or unwritable disk, as one), if any."""
    while exc is not None:
        if isinstance(exc, WriteError):
            return exc
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
            return WriteError(exc.filename or "a file", exc.strerror or str(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class Interrupted(BaseException):
    """SIGTERM (or another stop signal) delivered to a command, raised where it was: like
    KeyboardInterrupt, it unwinds through ``finally`` blocks so that what was written stays whole.
    ``kept``: what the command kept and how to go on, when it knows better than "the files it wrote"."""

    def __init__(self, signum: int, kept: str | None = None):
        self.signum, self.kept = signum, kept
        super().__init__(signum)


def input_error(exc: BaseException | None) -> InputError | None:
    """The InputError behind ``exc``, if any (hydra.utils.instantiate wraps what constructors raise)."""
    while exc is not None:
        if isinstance(exc, InputError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


# ----------------------------------------------------------------------------- range checks
# One sentence per bad value, naming the key as a config writes it ("eot.grid.frame") and its valid
# range, so that constructors check their own numbers and Python callers get the same sentence.


def _show(value) -> str:
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    return repr(value) if isinstance(value, str) else str(value)


def _bounds(lo, hi, lo_open: bool, hi_open: bool) -> str:
    """The bounds as text: "> 0", "in (0, 1]", or "" when unbounded."""
    if lo is not None and hi is not None:
        return f"in {'(' if lo_open else '['}{_show(lo)}, {_show(hi)}{')' if hi_open else ']'}"
    if lo is not None:
        return f"{'>' if lo_open else '>='} {_show(lo)}"
    if hi is not None:
        return f"{'<' if hi_open else '<='} {_show(hi)}"
    return ""


def _why(why: str) -> str:
    return f" ({why})" if why else ""


def _is_number(value, integer: bool) -> bool:
    if isinstance(value, bool):
        return False
    if integer:
        return isinstance(value, numbers.Integral) or (isinstance(value, float) and value.is_integer())
    return isinstance(value, numbers.Real)


def _inside(value: float, lo, hi, lo_open: bool, hi_open: bool) -> bool:
    if not math.isfinite(value):
        return False
    if lo is not None and (value <= lo if lo_open else value < lo):
        return False
    return not (hi is not None and (value >= hi if hi_open else value > hi))
