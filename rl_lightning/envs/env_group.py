"""``EnvGroup``: a gymnasium vector env over one object set, with episode statistics.

The vector env runs in gymnasium's ``SAME_STEP`` autoreset mode: an env that ends an
episode is reset inside the same ``step`` call and the true final observation is returned
separately (``final_obs``). The rollout needs it to bootstrap truncated episodes from the
value of the state the time limit cut off, never from the next episode's first state.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rl_lightning.envs.object_sets import ObjectSets, ObjectSetWrapper, Variation, resolve_object_sets

VECTORIZATION = ("sync", "async")

#: Start method of async env workers. Importing torchrl sets the process-wide default to
#: "spawn", and a spawned worker re-imports torch, Lightning and torchrl before it can step:
#: 37 s to start 4 CartPole workers here, against 0.09 s forked (benchmarks/env_scaling.py).
#: The workers run environment code only, so they are forked where forking is the platform's
#: norm (Linux); elsewhere the platform's default applies.
ASYNC_CONTEXT = "fork" if sys.platform.startswith("linux") else None


def check_env_id(env_id: str) -> None:
    """Raise a clear error if ``env_id`` is not registered with gymnasium."""
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env must be a gymnasium id string such as 'CartPole-v1', got {env_id!r}.")
    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry), n=3)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise ValueError(
        f"Unknown environment id '{env_id}'.{hint} Register a custom env with "
        "gymnasium.register(id=..., entry_point=...) before building the data module "
        "(and import the module that registers it)."
    )


@dataclasses.dataclass
class StepResult:
    """What one vector step returns, as numpy arrays with a leading ``num_envs`` axis.

    Attributes:
        obs: Next observations; for an env whose episode ended, the first observation of
            its next episode. Shape ``[num_envs, *obs_shape]``.
        reward: Shape ``[num_envs]``.
        terminated: The episode reached a terminal state. Shape ``[num_envs]``.
        truncated: The episode was cut off (time limit). Shape ``[num_envs]``.
        final_obs: The true last observation of each env whose episode ended this step,
            keyed by env index (empty when no episode ended).
    """

    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: dict[int, np.ndarray]


@dataclasses.dataclass
class EpisodeStats:
    """Statistics of completed episodes, one entry per episode (success is NaN where the
    env does not report ``is_success`` or ``success`` in its final info)."""

    returns: list[float] = dataclasses.field(default_factory=list)
    lengths: list[int] = dataclasses.field(default_factory=list)
    successes: list[float] = dataclasses.field(default_factory=list)
    envs: list[int] = dataclasses.field(default_factory=list)  # index of the env that ran it

    def __len__(self) -> int:
        return len(self.returns)


class EnvGroup:
    """A vector of environments drawing episodes from one object set.

    Args:
        env_id: Gymnasium id, e.g. ``"CartPole-v1"``.
        num_envs: Number of environments stepped together.
        obj_set: Name of the object set episodes are drawn from (``"train"``, ``"test"``).
        obj_sets: All object sets; ``None`` takes the shipped ones for ``env_id`` (or the env
            itself, with a warning).
        max_episode_steps: Time limit; ``None`` keeps the registered one.
        vectorization: ``"sync"`` (one process; fastest for cheap envs) or ``"async"``
            (a worker process per env).
        seed: Base seed; env ``i`` is seeded with ``seed + i``.
        render_mode: Passed to ``gymnasium.make``.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        obj_set: str = "train",
        obj_sets: Mapping[str, Sequence[Variation | Mapping[str, Any]]] | ObjectSets | None = None,
        max_episode_steps: int | None = None,
        vectorization: str = "sync",
        seed: int = 0,
        render_mode: str | None = None,
    ):
        check_env_id(env_id)
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}.")
        if max_episode_steps is not None and (not isinstance(max_episode_steps, int) or max_episode_steps <= 0):
            raise ValueError(f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}.")
        if vectorization not in VECTORIZATION:
            raise ValueError(f"vectorization must be one of {VECTORIZATION}, got {vectorization!r}.")
        self.env_id = env_id
        self.num_envs = num_envs
        self.obj_sets = resolve_object_sets(env_id, obj_sets)
        if obj_set not in self.obj_sets:
            raise ValueError(
                f"Unknown object set '{obj_set}' for {env_id}; available: {sorted(self.obj_sets)}. "
                "Pick one of those or pass obj_sets with that name."
            )
        self.obj_set = obj_set
        self.seed = seed
        sets, limit = self.obj_sets, max_episode_steps

        def make(i: int):
            return lambda: ObjectSetWrapper(sets, obj_set, max_episode_steps=limit, render_mode=render_mode)

        fns = [make(i) for i in range(num_envs)]
        if vectorization == "sync":
            self.envs = SyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP)
        else:
            self.envs = AsyncVectorEnv(fns, autoreset_mode=AutoresetMode.SAME_STEP, context=ASYNC_CONTEXT)
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        self._ep_return = np.zeros(num_envs, dtype=np.float64)
        self._ep_length = np.zeros(num_envs, dtype=np.int64)
        self.stats = EpisodeStats()
        self.obs: np.ndarray | None = None

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset every env (env ``i`` with ``seed + i``) and clear running episodes.

        Returns:
            Observations, shape ``[num_envs, *obs_shape]``.
        """
        seed = self.seed if seed is None else seed
        self.obs, _ = self.envs.reset(seed=[seed + i for i in range(self.num_envs)])
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self.obs

    def step(self, actions: np.ndarray) -> StepResult:
        """Step every env once and record the statistics of episodes that ended.

        Args:
            actions: Shape ``[num_envs, *action_shape]``.
        """
        obs, reward, terminated, truncated, info = self.envs.step(actions)
        self._ep_return += reward
        self._ep_length += 1
        final_obs: dict[int, np.ndarray] = {}
        done = terminated | truncated
        if done.any():
            final_info = info.get("final_info", {})
            success = final_info.get("is_success", final_info.get("success"))
            success_mask = final_info.get("_is_success", final_info.get("_success"))
            for i in np.flatnonzero(done):
                final_obs[int(i)] = info["final_obs"][i]
                self.stats.returns.append(float(self._ep_return[i]))
                self.stats.lengths.append(int(self._ep_length[i]))
                self.stats.envs.append(int(i))
                reported = success is not None and (success_mask is None or success_mask[i])
                self.stats.successes.append(float(success[i]) if reported else float("nan"))
            self._ep_return[done] = 0.0
            self._ep_length[done] = 0
        self.obs = obs
        return StepResult(obs, reward, terminated, truncated, final_obs)

    def pop_stats(self) -> EpisodeStats:
        """Return the statistics of episodes completed since the last call, and clear them."""
        stats, self.stats = self.stats, EpisodeStats()
        return stats

    def close(self) -> None:
        """Close the underlying environments."""
        self.envs.close()
