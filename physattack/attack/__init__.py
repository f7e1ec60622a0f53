"""Attacks: objectives and the EOT optimization loop."""

from physattack.attack.loop import AttackError, AttackResult, EOTAttack
from physattack.attack.objectives import OBJECTIVES, targeted, untargeted

__all__ = ["AttackError", "AttackResult", "EOTAttack", "OBJECTIVES", "targeted", "untargeted"]
