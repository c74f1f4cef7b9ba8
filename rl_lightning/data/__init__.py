"""Data: rollout- and replay-backed datasets, evaluation. Reaches the policy only through ``data.protocol``."""

from rl_lightning.data.base import EnvDataModule, eval_prefix
from rl_lightning.data.collection import CollectionMetrics, DataCounters
from rl_lightning.data.datamodule import RolloutDataModule
from rl_lightning.data.evaluation import EvaluationDataset, episodes_per_env, evaluate
from rl_lightning.data.protocol import ExplorationPolicy, RolloutPolicy
from rl_lightning.data.replay import ReplayDataset, make_replay_buffer
from rl_lightning.data.replay_datamodule import ReplayDataModule
from rl_lightning.data.rollout import RolloutDataset

__all__ = [
    "CollectionMetrics", "DataCounters", "EnvDataModule", "EvaluationDataset", "ExplorationPolicy", "ReplayDataModule",
    "ReplayDataset", "RolloutDataModule", "RolloutDataset", "RolloutPolicy", "episodes_per_env", "eval_prefix",
    "evaluate", "make_replay_buffer",
]  # fmt: skip
