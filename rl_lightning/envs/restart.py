"""Environment faults of the gymnasium backend: recreate an env that raises; stop dead workers.

Two layers, because the two faults are seen in different processes: :class:`RestartingEnv`
wraps each single env (inside the async worker when there is one) and recreates it when it
raises; a worker process that exits (crash, ``os._exit``, the OOM killer) is seen by the
parent as a closed pipe, and :class:`~rl_lightning.envs.gymnasium_env.GymnasiumVectorEnv`
builds its vector env anew (:func:`terminate_workers` stops what is left). Both count
*consecutive* failures: a finished episode in between resets the count, and going past
``max_env_restarts`` raises :class:`~rl_lightning.faults.EnvFault`, so a flaky env is
survived and a broken one stops the run.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv

from rl_lightning.faults import EnvFault

logger = logging.getLogger(__name__)

#: What the parent sees from gymnasium's ``AsyncVectorEnv`` when a worker process died:
#: ``pipe.recv()`` on the closed pipe raises ``EOFError``; ``pipe.send()`` to it raises
#: ``BrokenPipeError`` or ``ConnectionResetError`` (both ``ConnectionError`` subclasses).
WORKER_LOST = (EOFError, ConnectionError)

#: Start method of async env workers. Importing torchrl sets the process-wide default to
#: "spawn", and a spawned worker re-imports torch, Lightning and torchrl before it can step,
#: which takes hundreds of times longer than forking (measured in benchmarks/env_scaling.py).
#: The workers run environment code only, so they are forked where forking is the platform's
#: norm (Linux); elsewhere the platform's default applies.
ASYNC_CONTEXT = "fork" if sys.platform.startswith("linux") else None


def check_max_env_restarts(value: Any) -> None:
    """Raise a ``ValueError`` naming ``max_env_restarts`` unless it is an integer >= 0."""
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"max_env_restarts must be a non-negative integer (0: never recreate an env), got {value!r}.")


def derive_seed(seed: int | None, restart: int) -> int | None:
    """A seed for the ``restart``-th recreation of an env last reset with ``seed``.

    Mixed through ``numpy.random.SeedSequence`` so that neighbouring envs (seeds ``s + i``)
    restarted the same number of times do not collide, and the same run restarts the same
    way. ``None`` (an env never seeded) stays ``None``.
    """
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

    A failed ``step`` returns ``(last good obs, 0.0, False, True, info)`` with
    ``info["env_restart"] = 1`` and ``info["env_error"]`` (the error text). The vector env
    then autoresets the fresh env and the failed step's info lands in ``final_info``, so
    :class:`~rl_lightning.envs.EnvGroup` can tell a cut episode from a finished one. A
    ``reset`` that needed ``k`` recreations reports ``info["env_restart"] = k``.

    A fresh env is seeded with :func:`derive_seed` of the last ``reset`` seed and the number
    of recreations so far, so a seeded run restarts reproducibly; an ``obj_set`` reset
    option is kept for it (the factory builds the construction-time set).

    Args:
        factory: Builds the env (the same callable the vector env would call).
        max_env_restarts: Consecutive recreations allowed; one more raises :class:`EnvFault`.
        label: Names the env in messages, e.g. ``"env 2 of CartPole-v1 (object set 'train')"``.
    """

    def __init__(self, factory: Callable[[], gym.Env], max_env_restarts: int, label: str):
        check_max_env_restarts(max_env_restarts)
        self.factory = factory
        self.max_env_restarts = max_env_restarts
        self.label = label
        #: Recreations since the last finished episode, and in total.
        self.consecutive_restarts = 0
        self.total_restarts = 0
        self._seed: int | None = None  # the last explicit reset seed
        self._pending_seed: int | None = None  # for the first reset of a fresh env
        self._obj_set: str | None = None  # an obj_set reset option, kept for fresh envs
        self._fresh = False  # recreated, not reset yet
        self._last_obs: Any = None
        super().__init__(factory())

    def _recreate(self, err: Exception, where: str) -> None:
        """Close the broken env and build a fresh one, or raise :class:`EnvFault` past the limit."""
        self.consecutive_restarts += 1
        error = f"{type(err).__name__}: {err}"
        if self.consecutive_restarts > self.max_env_restarts:
            raise EnvFault(
                restart_message(f"{self.label} ({where})", self.consecutive_restarts, self.max_env_restarts, error)
            ) from err
        logger.warning(
            "%s raised in %s; recreating it (%d of at most %d in a row).",
            self.label,
            where,
            self.consecutive_restarts,
            self.max_env_restarts,
            exc_info=err,
        )
        try:
            self.env.close()
        except Exception:  # the env is broken; its close may be too
            pass
        self.total_restarts += 1
        self._pending_seed = derive_seed(self._seed, self.total_restarts)
        self._fresh = True
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
            info = {"env_restart": 1, "env_error": f"{type(err).__name__}: {err}"}
            return self._last_obs, 0.0, False, True, info
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
        restarts = 0
        while True:
            if self._fresh and self._obj_set is not None:
                options = {**(options or {}), "obj_set": self._obj_set}
            try:
                obs, info = self.env.reset(seed=seed, options=options)
                break
            except Exception as err:  # any env error: the env is recreated
                self._recreate(err, "reset")
                restarts += 1
                seed, self._pending_seed = self._pending_seed, None
        self._fresh = False
        if restarts:
            info = {**info, "env_restart": restarts}
        self._last_obs = obs
        return obs, info


def terminate_workers(envs: AsyncVectorEnv, timeout: float = 5.0) -> None:
    """Stop every worker process of an async vector env whose workers may be dead or mid-call.

    gymnasium's ``close(terminate=True)`` first waits for a pending call, which on a dead
    worker's pipe raises ``EOFError`` again; this terminates, joins (so no zombie or orphan
    remains) and closes the pipes directly.
    """
    for process in envs.processes:
        if process.is_alive():
            process.terminate()
    for process in envs.processes:
        process.join(timeout)
        if process.is_alive():  # ignored SIGTERM
            process.kill()
            process.join()
    for pipe in envs.parent_pipes:
        if pipe is not None:
            pipe.close()
    envs.error_queue.close()
    envs.closed = True  # nothing left to close; keeps gymnasium's __del__ from trying
