"""Data: rollout-backed datasets and evaluation. Reaches the policy only through ``RolloutPolicy``."""

from rl_lightning.data.base import EnvDataModule, eval_prefix
from rl_lightning.data.datamodule import RolloutDataModule
from rl_lightning.data.evaluation import EvaluationDataset, episodes_per_env, evaluate
from rl_lightning.data.protocol import ExplorationPolicy, RolloutPolicy
from rl_lightning.data.replay import ReplayDataset, make_replay_buffer
from rl_lightning.data.replay_datamodule import ReplayDataModule
from rl_lightning.data.rollout import (
    RolloutCounters,
    RolloutDataset,
    RolloutMetrics,
    compute_gae,
    explained_variance,
    to_env_action,
)

__all__ = [
    "EnvDataModule",
    "EvaluationDataset",
    "ExplorationPolicy",
    "ReplayDataModule",
    "ReplayDataset",
    "RolloutCounters",
    "RolloutDataModule",
    "RolloutDataset",
    "RolloutMetrics",
    "RolloutPolicy",
    "compute_gae",
    "episodes_per_env",
    "eval_prefix",
    "evaluate",
    "explained_variance",
    "make_replay_buffer",
    "to_env_action",
]
