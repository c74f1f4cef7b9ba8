"""``SameStepSyncVectorEnv``: gymnasium's ``SyncVectorEnv`` in ``SAME_STEP`` autoreset mode, with a leaner ``step``.

With the fast path on, every rollout, replay and evaluation step of a ``"sync"``
:class:`~rl_lightning.envs.EnvGroup` goes through this ``step`` (:func:`sync_vector_env`).
For array spaces (``Box`` observations; ``Box``, ``Discrete``, ``MultiDiscrete`` or
``MultiBinary`` actions) it returns what gymnasium's returns, the same
arrays and the same info dict, and refuses the observations gymnasium refuses (wrong shape,
unsafe cast; ``tests/fast/test_vector_env.py`` compares both step by step), but indexes the
action rows and writes each observation straight into the batch instead of going through
the space-generic ``iterate``/``concatenate`` dispatch, skips merging empty infos and copies
the observation batch without ``deepcopy`` (``docs/fast_path.md`` has the figures). It
writes gymnasium's private step state (``_env_obs``, ``_autoreset_envs``), so it runs only
under the gymnasium versions of :data:`~rl_lightning.fast.switch.WRITTEN_AGAINST`. Other
spaces take gymnasium's ``step`` unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.spaces import Box, Discrete, MultiBinary, MultiDiscrete
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rl_lightning.fast.switch import enabled, on_for

#: Single-env action spaces whose batch is a numpy array with one row per env.
ARRAY_ACTION_SPACES = (Box, Discrete, MultiDiscrete, MultiBinary)


class SameStepSyncVectorEnv(SyncVectorEnv):
    """A ``SyncVectorEnv`` that resets an env inside the ``step`` that ended its episode.

    The true final observation and info of that episode are in ``info["final_obs"]`` and
    ``info["final_info"]`` (gymnasium's ``SAME_STEP`` layout, with the ``_key`` masks).

    Args:
        env_fns: One factory per env.
        copy: Return a copy of the observation batch (gymnasium's default); ``False`` returns
            the vector env's own buffer, which the next step overwrites.
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], copy: bool = True):
        super().__init__(env_fns, copy=copy, autoreset_mode=AutoresetMode.SAME_STEP)
        self._lean = isinstance(self.single_observation_space, Box) and isinstance(
            self.single_action_space, ARRAY_ACTION_SPACES
        )

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        """Step every env once; an env whose episode ended is reset and its final values go into the info."""
        if not (self._lean and enabled() and isinstance(actions, np.ndarray)):
            return super().step(actions)
        if actions.shape[:1] != (self.num_envs,):
            raise ValueError(f"Expected actions for {self.num_envs} envs (leading axis), got shape {actions.shape}.")
        batch, rewards, terminations, truncations = (
            self._observations,
            self._rewards,
            self._terminations,
            self._truncations,
        )
        dtype, row_shape = batch.dtype, batch.shape[1:]
        infos: dict[str, Any] = {}
        for i, env in enumerate(self.envs):
            obs, rewards[i], terminations[i], truncations[i], info = env.step(actions[i])
            if terminations[i] or truncations[i]:
                infos = self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
                obs, info = env.reset()
            if info:
                infos = self._add_info(infos, info, i)
            self._env_obs[i] = obs
            if type(obs) is np.ndarray and obs.dtype == dtype and obs.shape == row_shape:
                batch[i] = obs
            else:
                self._write_checked(i, obs)
        np.logical_or(terminations, truncations, out=self._autoreset_envs)
        return (
            batch.copy() if self.copy else batch,
            rewards.copy(),
            terminations.copy(),
            truncations.copy(),
            infos,
        )

    def _write_checked(self, i: int, obs: Any) -> None:
        """Write env ``i``'s observation into the batch as gymnasium's ``np.stack(out=)`` would.

        The row's exact shape, and no unsafe cast: a float observation in an integer space
        raises instead of being truncated (a NaN would otherwise become an integer no finite
        check can see), and a wrong shape raises instead of being broadcast.
        """
        row = self._observations[i]
        if np.shape(obs) != row.shape:
            raise ValueError(
                f"Env {i} returned an observation of shape {np.shape(obs)}, but its observation space "
                f"{self.single_observation_space} has shape {row.shape}. Fix the env's step or reset."
            )
        np.copyto(row, obs, casting="same_kind")


def sync_vector_env(env_fns: Sequence[Callable[[], gym.Env]]) -> SameStepSyncVectorEnv | None:
    """A :class:`SameStepSyncVectorEnv` of ``env_fns``, or ``None`` with the fast path off (build gymnasium's own)."""
    return SameStepSyncVectorEnv(env_fns) if on_for("gymnasium") else None
