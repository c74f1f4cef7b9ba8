"""Environment faults: recreate an env that raises, and rebuild async workers that die.

Two layers, because the two faults are seen in different processes:

- :class:`RestartingEnv` wraps each single env (inside the async worker process when there
  is one). An exception in ``step`` closes the broken env, builds a fresh one from the
  factory and returns the last good observation as a *truncated* final observation; the
  vector env's ``SAME_STEP`` autoreset then resets the fresh env. An exception in ``reset``
  is retried with a fresh env. Either way the episode ends without a bootstrap from a
  state the env never reached.
- A worker process that exits (crash, ``os._exit``, the OOM killer) cannot report
  anything: the parent sees a closed pipe. :class:`RebuildingVectorEnv` terminates what is
  left of the async vector env (:func:`terminate_workers`) and builds a new one;
  :class:`~rl_lightning.envs.EnvGroup` resets it and ends every episode as truncated.

Both count *consecutive* recreations: a finished episode in between resets the count, and
going past ``max_env_restarts`` raises :class:`~rl_lightning.faults.EnvFault`, so a flaky
env is survived and a broken one stops the run.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

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


class RebuildingVectorEnv:
    """A gymnasium vector env (``SAME_STEP`` autoreset) that is built anew when an async worker dies.

    Args:
        env_fns: One factory per env.
        vectorization: ``"sync"`` or ``"async"`` (only async workers can die on their own).
        max_env_restarts: Rebuilds allowed in a row without :meth:`episode_finished` in between;
            one more raises :class:`EnvFault`.
        label: Names the workers in messages.

    Attributes:
        envs: The current gymnasium vector env.
        rebuilds: Rebuilds so far (seeds the rebuilt envs, see :meth:`rebuild_seeds`).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], vectorization: str, max_env_restarts: int, label: str):
        self.env_fns = list(env_fns)
        self.is_async = vectorization == "async"
        self.max_env_restarts = max_env_restarts
        self.label = label
        self.rebuilds = 0
        self._losses = 0  # rebuilds since an episode last finished
        self.envs = self._make()

    def _make(self) -> gym.vector.VectorEnv:
        if self.is_async:
            return AsyncVectorEnv(self.env_fns, autoreset_mode=AutoresetMode.SAME_STEP, context=ASYNC_CONTEXT)
        return SyncVectorEnv(self.env_fns, autoreset_mode=AutoresetMode.SAME_STEP)

    def _rebuild(self, err: BaseException) -> None:
        """Replace a vector env whose worker died, or raise :class:`EnvFault` past the limit."""
        self._losses += 1
        terminate_workers(self.envs)
        error = f"a worker process died ({type(err).__name__}: {str(err) or 'connection closed'})"
        if self._losses > self.max_env_restarts:
            raise EnvFault(restart_message(self.label, self._losses, self.max_env_restarts, error)) from err
        logger.warning(
            "%s: %s; rebuilding them (%d of at most %d in a row).",
            self.label,
            error,
            self._losses,
            self.max_env_restarts,
        )
        self.rebuilds += 1
        self.envs = self._make()

    def episode_finished(self) -> None:
        """An episode finished: the workers work, so the count of rebuilds in a row starts over."""
        self._losses = 0

    def rebuild_seeds(self, base_seed: int) -> list[int | None]:
        """Fresh, reproducible seeds for the envs after the latest rebuild (env ``i``: from ``base_seed + i``)."""
        return [derive_seed(base_seed + i, self.rebuilds) for i in range(len(self.env_fns))]

    def step(self, actions: Any) -> tuple | None:
        """gymnasium's vector ``step``; ``None`` when a worker died and the envs were rebuilt (reset them)."""
        try:
            return self.envs.step(actions)
        except WORKER_LOST as err:
            if not self.is_async:  # raised by the vector env itself (an env's own errors are RestartingEnv's)
                raise
            self._rebuild(err)
            return None
        except EnvFault:
            self._stop_workers()
            raise

    def reset(
        self, seeds: list[int | None], mask: np.ndarray | None = None, base_seed: int = 0
    ) -> tuple[Any, dict[str, Any], int]:
        """Reset every env (or those in ``mask``), rebuilding the envs if a worker dies on the way.

        Returns:
            Observations, infos, and the number of rebuilds it took (after one, every env was
            reset with :meth:`rebuild_seeds` of ``base_seed``).
        """
        rebuilds = 0
        while True:
            try:
                return (*self.envs.reset(seed=seeds, options=None if mask is None else {"reset_mask": mask}), rebuilds)
            except WORKER_LOST as err:
                if not self.is_async:
                    raise
                self._rebuild(err)
                rebuilds, mask, seeds = rebuilds + 1, None, self.rebuild_seeds(base_seed)
            except EnvFault:
                self._stop_workers()
                raise

    def _stop_workers(self) -> None:
        """An env in one worker gave up (``EnvFault``): the run stops, so stop the other workers too."""
        if self.is_async:
            terminate_workers(self.envs)

    def close(self) -> None:
        """Close the vector env (and its workers)."""
        self.envs.close()
