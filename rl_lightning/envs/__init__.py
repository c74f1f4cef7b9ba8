"""Environments: object sets of variations and vectorized groups. Knows nothing of learning."""

from rl_lightning.envs.env_group import EnvGroup, EpisodeStats, StepResult, check_env_id, make_env
from rl_lightning.envs.object_sets import SHIPPED_OBJ_SETS, ObjectSetWrapper, Variation, resolve_obj_sets
from rl_lightning.envs.restart import RestartingEnv

__all__ = [
    "EnvGroup",
    "EpisodeStats",
    "ObjectSetWrapper",
    "RestartingEnv",
    "SHIPPED_OBJ_SETS",
    "StepResult",
    "Variation",
    "check_env_id",
    "make_env",
    "resolve_obj_sets",
]

#: Names of earlier releases, kept for one release (docs/glossary.md lists the renames).
_DEPRECATED = {"SHIPPED_OBJECT_SETS": "SHIPPED_OBJ_SETS", "resolve_object_sets": "resolve_obj_sets"}


def __getattr__(name: str):
    if name in _DEPRECATED:
        import warnings

        new = _DEPRECATED[name]
        warnings.warn(
            f"rl_lightning.envs.{name} is now rl_lightning.envs.{new}; the old name goes in the next release.",
            DeprecationWarning,
            stacklevel=2,
        )
        return globals()[new]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
