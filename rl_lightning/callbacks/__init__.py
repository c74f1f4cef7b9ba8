"""Lightning callbacks of the library."""

from rl_lightning.callbacks.actor_sync import ActorSync
from rl_lightning.callbacks.budget import EnvStepBudget
from rl_lightning.callbacks.checkpoint import AtomicCheckpointIO, BestCheckpoint, IntervalCheckpoint
from rl_lightning.callbacks.denormals import FlushDenormals
from rl_lightning.callbacks.interrupt import Interruption
from rl_lightning.callbacks.offload import OptimizerOffload
from rl_lightning.callbacks.progress import EnvStepProgressBar
from rl_lightning.callbacks.timing import PhaseTimer
from rl_lightning.callbacks.video import EvaluationVideo

__all__ = [
    "ActorSync", "AtomicCheckpointIO", "BestCheckpoint", "EnvStepBudget", "EnvStepProgressBar", "EvaluationVideo",
    "FlushDenormals", "Interruption", "IntervalCheckpoint", "OptimizerOffload", "PhaseTimer"
]  # fmt: skip
