"""Input errors: the input is wrong, and the message is one sentence that says what to do.

Every part raises a subclass of ``InputError``; the entry points print these without a stack
trace (``report_input_errors``). Anything else is a bug and keeps its trace.
"""

from __future__ import annotations

import functools
import sys
from typing import Callable


class InputError(ValueError):
    """Bad input (a file, a configuration value, a label); the message says what to do."""


def input_error(exc: BaseException | None) -> InputError | None:
    """The InputError behind ``exc``, if any (hydra.utils.instantiate wraps what constructors raise)."""
    while exc is not None:
        if isinstance(exc, InputError):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def report_input_errors(reraise_if: Callable[[], bool] | None = None):
    """Decorate an entry point: an InputError (however wrapped) becomes ``error: <sentence>`` on
    stderr and exit status 2; other exceptions, or any when ``reraise_if()`` is true, propagate."""
    def wrap(fn):
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                err = input_error(exc)
                if err is None or (reraise_if is not None and reraise_if()):
                    raise
                print(f"error: {err}", file=sys.stderr)
                sys.exit(2)
        return run
    return wrap
