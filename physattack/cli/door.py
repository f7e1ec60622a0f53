"""One error path for every command: an ``InputError`` (however wrapped) becomes one sentence on
stderr and exit status 2, with no traceback; anything else is a bug and keeps its trace."""

from __future__ import annotations

import functools
import sys
from typing import Callable

from physattack.errors import InputError, input_error


def fail(err: InputError | str) -> int:
    """Print ``error: <sentence>`` on stderr and return the exit status for bad input."""
    print(f"error: {err}", file=sys.stderr)
    return 2


def entry(fn: Callable[..., int | None]) -> Callable[..., int]:
    """Decorate a plain ``main(argv=None) -> int`` command: InputError -> one sentence, exit 2."""
    @functools.wraps(fn)
    def run(*args, **kwargs) -> int:
        try:
            return fn(*args, **kwargs) or 0
        except Exception as exc:
            err = input_error(exc)
            if err is None:
                raise
            return fail(err)
    return run
