"""Environments: object sets of variations and the one batched env contract (``EnvGroup``); no learning."""

from rl_lightning.envs.batched import TorchVectorEnv
from rl_lightning.envs.env_group import BACKENDS, EnvGroup, EpisodeStats, Step, check_env_id, make_env
from rl_lightning.envs.gymnasium_env import RestartingEnv
from rl_lightning.envs.object_sets import SHIPPED_OBJ_SETS, ObjectSetWrapper, Variation, resolve_obj_sets

__all__ = [
    "BACKENDS", "EnvGroup", "EpisodeStats", "ObjectSetWrapper", "RestartingEnv",
    "SHIPPED_OBJ_SETS", "Step", "TorchVectorEnv", "Variation", "check_env_id", "make_env", "resolve_obj_sets",
]  # fmt: skip
