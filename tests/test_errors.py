"""The range checks every constructor uses (physattack/errors.py): their docstring examples run."""

from __future__ import annotations

import doctest

import physattack.errors


def test_docstring_examples_run():
    result = doctest.testmod(physattack.errors)
    assert result.attempted >= 3 and result.failed == 0
