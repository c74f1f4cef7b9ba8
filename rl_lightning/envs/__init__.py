"""Environments: object sets of variations and vectorized groups. Knows nothing of learning."""

from rl_lightning.deprecation import renamed_attributes
from rl_lightning.envs.batched import TorchVectorEnv
from rl_lightning.envs.env_group import EnvGroup, EpisodeStats, StepResult, check_env_id, make_env
from rl_lightning.envs.object_sets import (
    SHIPPED_OBJ_SETS,
    NoObjectSetsWarning,
    ObjectSetWrapper,
    Variation,
    resolve_obj_sets,
)
from rl_lightning.envs.restart import RestartingEnv

__all__ = [
    "EnvGroup",
    "EpisodeStats",
    "NoObjectSetsWarning",
    "ObjectSetWrapper",
    "RestartingEnv",
    "SHIPPED_OBJ_SETS",
    "StepResult",
    "TorchVectorEnv",
    "Variation",
    "check_env_id",
    "make_env",
    "resolve_obj_sets",
]

#: Names of earlier releases, kept for one release (docs/glossary.md lists the renames).
_RENAMED = {"SHIPPED_OBJECT_SETS": "SHIPPED_OBJ_SETS", "resolve_object_sets": "resolve_obj_sets"}
__getattr__ = renamed_attributes(__name__, _RENAMED, globals())
