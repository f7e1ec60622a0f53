"""Attacks: objectives and the EOT optimization loop."""

from physattack.attack.loop import AttackError, AttackResult, AttackSetup, EOTAttack
from physattack.attack.objectives import OBJECTIVES, targeted, untargeted

__all__ = ["AttackError", "AttackResult", "AttackSetup", "EOTAttack", "OBJECTIVES", "targeted", "untargeted"]
