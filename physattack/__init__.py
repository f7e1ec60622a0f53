"""physattack: physical adversarial attacks on vision models, simulated in 3D."""

__version__ = "0.1.0"
