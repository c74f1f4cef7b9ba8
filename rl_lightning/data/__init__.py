"""Data: rollout-backed datasets and evaluation. Reaches the policy only through ``RolloutPolicy``."""

import warnings

from rl_lightning.data.base import EnvDataModule, eval_prefix
from rl_lightning.data.collection import CollectionMetrics, DataCounters, to_env_action
from rl_lightning.data.datamodule import RolloutDataModule
from rl_lightning.data.evaluation import EvaluationDataset, episodes_per_env, evaluate
from rl_lightning.data.protocol import ExplorationPolicy, RolloutPolicy
from rl_lightning.data.replay import ReplayDataset, make_replay_buffer
from rl_lightning.data.replay_datamodule import ReplayDataModule
from rl_lightning.data.rollout import RolloutDataset, compute_gae, explained_variance

__all__ = [
    "CollectionMetrics",
    "DataCounters",
    "EnvDataModule",
    "EvaluationDataset",
    "ExplorationPolicy",
    "ReplayDataModule",
    "ReplayDataset",
    "RolloutDataModule",
    "RolloutDataset",
    "RolloutPolicy",
    "compute_gae",
    "episodes_per_env",
    "eval_prefix",
    "evaluate",
    "explained_variance",
    "make_replay_buffer",
    "to_env_action",
]

#: Names of earlier releases, kept for one release (docs/glossary.md lists the renames).
_DEPRECATED = {"RolloutCounters": "DataCounters", "RolloutMetrics": "CollectionMetrics"}


def __getattr__(name: str):
    if name in _DEPRECATED:
        new = _DEPRECATED[name]
        warnings.warn(
            f"rl_lightning.data.{name} is now rl_lightning.data.{new}; the old name goes in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
