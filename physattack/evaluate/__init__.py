"""Evaluation on a fixed held-out grid: metrics, plots and reports."""

from physattack.evaluate.grid import GridResult, evaluate_on_grid
from physattack.evaluate.metrics import classification_metrics, rate, wilson_interval

__all__ = ["GridResult", "classification_metrics", "evaluate_on_grid", "rate", "wilson_interval"]
