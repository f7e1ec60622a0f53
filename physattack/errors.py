"""Input errors: the input is wrong, and the message is one sentence that says what to do.

Every part raises a subclass of ``InputError``; the entry points print these without a stack
trace. Anything else is a bug and keeps its trace.
"""


class InputError(ValueError):
    """Bad input (a file, a configuration value, a label); the message says what to do."""
