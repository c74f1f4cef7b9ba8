"""Lightning callbacks of the library."""

from rl_lightning.callbacks.budget import EnvStepBudget
from rl_lightning.callbacks.checkpoint import IntervalCheckpoint

__all__ = ["EnvStepBudget", "IntervalCheckpoint"]
