"""Environments: object sets of variations and vectorized groups. Knows nothing of learning."""

from rl_lightning.envs.env_group import EnvGroup, EpisodeStats, StepResult, check_env_id, make_env
from rl_lightning.envs.object_sets import SHIPPED_OBJECT_SETS, ObjectSetWrapper, Variation, resolve_object_sets
from rl_lightning.envs.restart import RestartingEnv

__all__ = [
    "EnvGroup",
    "EpisodeStats",
    "ObjectSetWrapper",
    "RestartingEnv",
    "SHIPPED_OBJECT_SETS",
    "StepResult",
    "Variation",
    "check_env_id",
    "make_env",
    "resolve_object_sets",
]
