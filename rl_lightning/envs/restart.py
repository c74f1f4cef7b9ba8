"""Recreating a gymnasium env that raises (:class:`RestartingEnv`, inside the async worker when there is one).

As for dead workers (:mod:`~rl_lightning.envs.gymnasium_env`), *consecutive* failures count: a finished episode
resets the count, and past ``max_env_restarts`` an :class:`~rl_lightning.faults.EnvFault` stops the run.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from rl_lightning.faults import EnvFault

logger = logging.getLogger(__name__)


def check_max_env_restarts(value: Any) -> None:
    """Raise a ``ValueError`` naming ``max_env_restarts`` unless it is an integer >= 0."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"max_env_restarts must be a non-negative integer (0: never recreate an env), got {value!r}.")


def derive_seed(seed: int | None, restart: int) -> int | None:
    """A seed for the ``restart``-th recreation of an env last reset with ``seed`` (``None`` stays ``None``), mixed
    by ``numpy.random.SeedSequence`` so that neighbouring envs (seeds ``s + i``) restarted as often do not collide."""
    if seed is None:
        return None
    return int(np.random.SeedSequence([int(seed) % 2**63, restart]).generate_state(1)[0] & 0x7FFFFFFF)


def restart_message(what: str, count: int, limit: int, error: str) -> str:
    """The :class:`EnvFault` message: what failed, how often, the last error and the fix."""
    return (
        f"{what} failed {count} time(s) in a row without finishing an episode in between, past "
        f"max_env_restarts={limit}. Last error: {error}. Fix the environment (the traceback of each failure "
        f"was logged as a warning), or allow more recreations with max_env_restarts "
        f"(Hydra: env.max_env_restarts={max(2 * limit, 1)})."
    )


class RestartingEnv(gym.Wrapper):
    """Recreates its env from ``factory`` when ``step`` or ``reset`` raises.

    A failed ``step`` returns ``(last good obs, 0.0, False, True, info)`` with ``info["env_restart"] = 1`` and
    ``info["env_error"]``, which land in the vector env's ``final_info``: a cut episode is told from a finished one.
    A ``reset`` that needed ``k`` recreations reports ``info["env_restart"] = k``. A fresh env is seeded with
    :func:`derive_seed` and keeps an ``obj_set`` reset option. More than ``max_env_restarts`` recreations in a row
    raise :class:`EnvFault`; ``label`` names the env in messages (``"env 2 of CartPole-v1 (object set 'train')"``).
    """

    def __init__(self, factory: Callable[[], gym.Env], max_env_restarts: int, label: str):
        check_max_env_restarts(max_env_restarts)
        self.factory, self.max_env_restarts, self.label = factory, max_env_restarts, label
        self.consecutive_restarts = self.total_restarts = 0  # recreations since the last finished episode; in all
        self._seed = self._pending_seed = None  # the last explicit reset seed; the seed of a fresh env's first reset
        self._obj_set: str | None = None  # an obj_set reset option, passed on (a fresh env starts in the factory's)
        self._last_obs: Any = None
        super().__init__(factory())

    def _recreate(self, err: Exception, where: str) -> None:
        """Close the broken env and build a fresh one, or raise :class:`EnvFault` past the limit."""
        self.consecutive_restarts += 1
        count, limit = self.consecutive_restarts, self.max_env_restarts
        if count > limit:
            error = f"{type(err).__name__}: {err}"
            raise EnvFault(restart_message(f"{self.label} ({where})", count, limit, error)) from err
        logger.warning("%s raised in %s; recreating it (%d of at most %d in a row).", self.label, where, count, limit,
                       exc_info=err)  # fmt: skip
        with contextlib.suppress(Exception):  # the env is broken; its close may be too
            self.env.close()
        self.total_restarts += 1
        self._pending_seed = derive_seed(self._seed, self.total_restarts)
        try:
            self.env = self.factory()
        except Exception as build_err:  # a failed build is one more failure
            self._recreate(build_err, "construction")

    def step(self, action):
        """Step the env; on an exception recreate it and end the episode as truncated."""
        try:
            result = self.env.step(action)
        except Exception as err:  # any env error: the env is recreated
            if self._last_obs is None:  # stepped before any reset: a caller's mistake, not a fault
                raise
            self._recreate(err, "step")
            return self._last_obs, 0.0, False, True, {"env_restart": 1, "env_error": f"{type(err).__name__}: {err}"}
        self._last_obs = result[0]
        if self.consecutive_restarts and (result[2] or result[3]):
            self.consecutive_restarts = 0  # a finished episode: the env works again
        return result

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset the env; on an exception retry with a fresh env (seeded by :func:`derive_seed`)."""
        if seed is not None:
            self._seed, self._pending_seed = seed, None
        elif self._pending_seed is not None:
            seed, self._pending_seed = self._pending_seed, None
        if options and "obj_set" in options:
            self._obj_set = options["obj_set"]
        elif self._obj_set is not None:
            options = {**(options or {}), "obj_set": self._obj_set}
        restarts = 0
        while True:
            try:
                obs, info = self.env.reset(seed=seed, options=options)
                break
            except Exception as err:  # any env error: the env is recreated
                self._recreate(err, "reset")
                restarts += 1
                seed, self._pending_seed = self._pending_seed, None
        self._last_obs = obs
        return obs, ({**info, "env_restart": restarts} if restarts else info)
