"""Lightning callbacks of the library."""

from rl_lightning.callbacks.budget import EnvStepBudget
from rl_lightning.callbacks.checkpoint import IntervalCheckpoint
from rl_lightning.callbacks.progress import EnvStepProgressBar
from rl_lightning.callbacks.timing import PhaseTimer

__all__ = ["EnvStepBudget", "EnvStepProgressBar", "IntervalCheckpoint", "PhaseTimer"]
