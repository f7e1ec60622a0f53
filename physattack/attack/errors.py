"""The attack's own error."""

from physattack.errors import InputError


class AttackError(InputError):
    """An attack that cannot run as configured; the message says what to do."""
