"""Data: rollout-backed datasets and evaluation. Reaches the policy only through ``RolloutPolicy``."""

from rl_lightning.data.base import EnvDataModule, eval_prefix
from rl_lightning.data.collection import CollectionMetrics, DataCounters, to_env_action
from rl_lightning.data.datamodule import RolloutDataModule
from rl_lightning.data.evaluation import EvaluationDataset, episodes_per_env, evaluate
from rl_lightning.data.protocol import ExplorationPolicy, OnPolicyLearner, RolloutPolicy
from rl_lightning.data.replay import ReplayDataset, make_replay_buffer
from rl_lightning.data.replay_datamodule import ReplayDataModule
from rl_lightning.data.rollout import RolloutDataset, UpdatePlan, compute_gae, explained_variance
from rl_lightning.deprecation import renamed_attributes

__all__ = [
    "CollectionMetrics",
    "DataCounters",
    "EnvDataModule",
    "EvaluationDataset",
    "ExplorationPolicy",
    "OnPolicyLearner",
    "ReplayDataModule",
    "ReplayDataset",
    "RolloutDataModule",
    "RolloutDataset",
    "RolloutPolicy",
    "UpdatePlan",
    "compute_gae",
    "episodes_per_env",
    "eval_prefix",
    "evaluate",
    "explained_variance",
    "make_replay_buffer",
    "to_env_action",
]

#: Names of earlier releases, kept for one release (docs/glossary.md lists the renames).
_RENAMED = {"RolloutCounters": "DataCounters", "RolloutMetrics": "CollectionMetrics"}
__getattr__ = renamed_attributes(__name__, _RENAMED, globals())
