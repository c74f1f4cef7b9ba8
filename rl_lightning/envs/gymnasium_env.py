"""The gymnasium backend: gymnasium's vector env of single envs over an object set, as the env contract's tensors.

What only single envs can do is done here, in numpy: a single env that raises is recreated (:class:`RestartingEnv`,
inside the async worker when there is one), dead async workers are replaced (:class:`Restarts` counts failures in a
row against ``max_env_restarts``), and every step's values are checked (:class:`ValueChecks`) so that a NaN, which
spreads through GAE, the loss and the optimizer state within one update, is caught where the message can name the
env. A cut episode ends *truncated* at its last good observation with reward 0, marked in ``info["cut"]``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import multiprocessing
import re
import sys
import threading
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv

from rl_lightning.checks import check_max_env_restarts
from rl_lightning.envs.object_sets import ObjectSetWrapper, ObjSets
from rl_lightning.envs.obs import Obs, float32_copy, map_obs, select_envs, to_tensor, write_obs
from rl_lightning.envs.wrappers import WrapperSpec
from rl_lightning.faults import EnvFault, NumericalFault

logger = logging.getLogger(__name__)

# ``inf * 0`` sets the floating-point "invalid" flag and numpy warns about it; here that is
# the detection itself (wrapping the dot in ``np.errstate`` would cost more than the dot).
warnings.filterwarnings("ignore", "invalid value encountered in dot", RuntimeWarning, re.escape(__name__))


# ---------------------------------------------------------------- env faults
def derive_seed(seed: int | None, restart: int) -> int | None:
    """A seed for the ``restart``-th recreation of an env last reset with ``seed`` (``None`` stays ``None``), mixed
    by ``numpy.random.SeedSequence`` so that neighbouring envs (seeds ``s + i``) restarted as often do not collide."""
    mixed = None if seed is None else np.random.SeedSequence([int(seed) % 2**63, restart]).generate_state(1)[0]
    return None if mixed is None else int(mixed & 0x7FFFFFFF)


class Restarts:
    """Failures in a row of what ``label`` names (one env, a batched env, the async workers), against ``limit``
    (``max_env_restarts``): each failure is logged, one past the limit raises :class:`EnvFault`; a finished episode
    starts the count over (:meth:`worked`). ``total`` counts every restart, to derive fresh seeds from."""

    def __init__(self, limit: int, label: str):
        check_max_env_restarts(limit)
        self.limit, self.label, self.in_a_row, self.total = limit, label, 0, 0

    def failed(self, error: BaseException | str, where: str = "", action: str = "recreating it") -> int:
        """Count one failure of ``where`` (a call: ``"step"``); raise past the limit, else log it; ``total``."""
        self.in_a_row += 1
        what = f"{self.label} ({where})" if where else self.label
        cause = error if isinstance(error, BaseException) else None
        text = f"{type(error).__name__}: {error}" if cause else error
        if self.in_a_row > self.limit:
            logged = " (the traceback of each failure was logged as a warning)" if self.limit else ""
            raise EnvFault(
                f"{what} failed {self.in_a_row} time(s) in a row without finishing an episode in between, past "
                f"max_env_restarts={self.limit}. Last error: {text}. Fix the environment{logged}, or allow more "
                f"recreations with max_env_restarts (Hydra: env.max_env_restarts={max(2 * self.limit, 1)})."
            ) from cause
        logger.warning("%s failed (%s); %s (%d of at most %d in a row).", what, text, action, self.in_a_row,
                       self.limit, exc_info=cause)  # fmt: skip
        self.total += 1
        return self.total

    def worked(self) -> None:
        """A finished episode: the count of failures in a row starts over."""
        self.in_a_row = 0


class RestartingEnv(gym.Wrapper):
    """Recreates its env from ``factory`` when ``step`` or ``reset`` raises.

    A failed ``step`` returns ``(last good obs, 0.0, False, True, info)`` with ``info["env_restart"] = 1`` and
    ``info["env_error"]``, which land in the vector env's ``final_info``: a cut episode is told from a finished one.
    A ``reset`` that needed ``k`` recreations reports ``info["env_restart"] = k``. A fresh env is seeded with
    :func:`derive_seed`. More than ``max_env_restarts`` recreations in a row
    raise :class:`EnvFault`; ``label`` names the env in messages (``"env 2 of CartPole-v1 (object set 'train')"``).
    """

    def __init__(self, factory: Callable[[], gym.Env], max_env_restarts: int, label: str):
        self.factory, self.label, self.restarts = factory, label, Restarts(max_env_restarts, label)
        self._seed = self._pending_seed = None  # the last explicit reset seed; the seed of a fresh env's first reset
        self._last_obs: Any = None
        super().__init__(factory())

    def _recreate(self, err: Exception, where: str) -> None:
        """Close the broken env and build a fresh one, or raise :class:`EnvFault` past the limit."""
        total = self.restarts.failed(err, where)
        with contextlib.suppress(Exception):  # the env is broken; its close may be too
            self.env.close()
        self._pending_seed = derive_seed(self._seed, total)
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
        if result[2] or result[3]:
            self.restarts.worked()
        return result

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        """Reset the env; on an exception retry with a fresh env (seeded by :func:`derive_seed`)."""
        if seed is not None:
            self._seed, self._pending_seed = seed, None
        elif self._pending_seed is not None:
            seed, self._pending_seed = self._pending_seed, None
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


# ---------------------------------------------------------------- value checks
def float_paths(space: Any) -> list[tuple[str, ...]]:
    """Where a space's float arrays are: ``[()]`` for a float ``Box``, the keys' paths in a ``Dict`` (integer
    leaves, such as uint8 images, cannot be non-finite and are never checked)."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, dict):
        return [(key, *path) for key, sub in spaces.items() for path in float_paths(sub)]
    dtype, shape = getattr(space, "dtype", None), getattr(space, "shape", None)
    return [()] if dtype is not None and shape is not None and np.issubdtype(dtype, np.floating) else []


def _at(obs: Any, path: tuple[str, ...]) -> Any:
    return functools.reduce(lambda node, key: node[key], path, obs)  # obs[path[0]][path[1]]...


class ValueChecks:
    """Per-step checks of the float arrays of a batch's observations, and rewards: finite, and within ``obs_bound``
    (``obs_bound_mode``: ``"clip"`` clips and counts, ``"reject"`` treats a value beyond it as non-finite). A step
    costs one dot product with zeros per array (IEEE 754: ``0 * inf = NaN``, which propagates), cheaper than
    ``np.isfinite(x).all()``, which allocates a mask; the bad env and value are looked up only then (:meth:`find`)."""

    def __init__(self, num_envs: int, obs_bound: float | None, obs_bound_mode: str, observation_space: Any):
        self.obs_bound = None if obs_bound is None else float(obs_bound)
        self._paths = float_paths(observation_space)
        self._whole = self._paths == [()]
        bounded = bool(self._paths) and obs_bound is not None  # only float arrays are checked and clipped
        self.reject, self.clipping = bounded and obs_bound_mode == "reject", bounded and obs_bound_mode == "clip"
        self._reward_zeros = np.zeros(num_envs)
        spaces = [_at(observation_space, path) for path in self._paths]
        self._obs_zeros = [np.zeros(num_envs * math.prod(space.shape), dtype=space.dtype) for space in spaces]

    def _floats(self, obs: Any) -> list[np.ndarray]:
        return [obs] if self._whole else [_at(obs, path) for path in self._paths]

    def clean(self, obs: Any, reward: np.ndarray | None = None) -> bool:
        """Whether every observation of a batch (and reward) is finite (and, rejecting, within the bound)."""
        # float() first: adding two numpy scalars of different dtypes costs more than the dots.
        total = 0.0 if reward is None else float(reward.dot(self._reward_zeros))
        if self._whole:  # one float array (the common case, every env step): no walk over keys
            total += float(obs.ravel().dot(self._obs_zeros[0]))
        else:
            for x, zeros in zip(self._floats(obs), self._obs_zeros, strict=True):
                total += float(x.ravel().dot(zeros))
        rejected = self.reject and any(np.abs(x).max() > self.obs_bound for x in self._floats(obs))
        return math.isfinite(total) and not rejected

    def find(self, obs: Any, reward: np.ndarray | None = None, final: Any = None, done: Any = None) -> dict:
        """Every env's first bad value, ``{env: (what it is, the fix)}`` (the slow path, after :meth:`clean`); the
        final observations ``final`` are looked at where ``done``."""
        bound_fix = "raise obs_bound (Hydra: env.obs_bound=...), clip instead with obs_bound_mode=clip"
        obs_fix = "fix the env (obs_bound bounds finite values only: a NaN or inf is not clipped)"
        faults = {}
        for i in range(len(self._reward_zeros)):
            if reward is not None and not math.isfinite(reward[i]):
                faults[i] = f"Non-finite reward {float(reward[i])!r}", "fix the env's reward"
                continue
            candidates = [("observation", p, _at(obs, p)[i]) for p in self._paths]
            if done is not None and done[i]:
                candidates += [("final observation", p, _at(final, p)[i]) for p in self._paths]
            for what, path, x in candidates:
                x = np.asarray(x)
                bad, out = ~np.isfinite(x), False
                if not bad.any() and self.reject:
                    bad, out = np.abs(x) > self.obs_bound, True
                if bad.any():
                    index = tuple(int(k) for k in np.argwhere(bad)[0])
                    value = f"{what}{''.join(f'[{key!r}]' for key in path)} value {float(x[index])!r}"
                    value += f" at index {index}" if index else ""
                    out_of_bound = f"Out-of-bound {value}, outside obs_bound={self.obs_bound}", bound_fix
                    faults[i] = out_of_bound if out else (f"Non-finite {value}", obs_fix)
                    break
        return faults

    def clip(self, obs: Any, rows: np.ndarray | None = None) -> int:
        """Clip ``obs``'s float arrays in place to ``[-obs_bound, obs_bound]`` (clip mode); return the count clipped
        (in the envs ``rows`` only, where given: the others were counted already)."""
        if not self.clipping:
            return 0
        count = 0
        for x in self._floats(obs):
            hits = int(np.count_nonzero(np.abs(x if rows is None else x[rows]) > self.obs_bound))
            if hits or rows is not None:
                np.clip(x, -self.obs_bound, self.obs_bound, out=x)
                count += hits
        return count


# ---------------------------------------------------------------- the backend

#: Episodes in a row one env may have cut short by non-finite values (``on_nonfinite="skip"``) before the run
#: stops anyway: an env that never finishes an episode is broken, and an evaluation would never end.
MAX_CONSECUTIVE_SKIPS = 100
#: What the parent sees from gymnasium's ``AsyncVectorEnv`` when a worker process died: ``pipe.recv()`` on the
#: closed pipe raises ``EOFError``; ``pipe.send()`` to it ``BrokenPipeError`` or ``ConnectionResetError``.
WORKER_LOST = (EOFError, ConnectionError)
#: Start method of async env workers. Importing torchrl makes "spawn" the process-wide default, and a spawned
#: worker re-imports torch, Lightning and torchrl, hundreds of times slower than forking
#: (benchmarks/env_scaling.py). The workers run env code only: forked on Linux, the platform's default elsewhere.
ASYNC_CONTEXT = "fork" if sys.platform.startswith("linux") else None
#: Seconds an async worker may take to answer a call (start, reset, step) before the run stops (``worker_timeout``).
WORKER_TIMEOUT = 120.0


def terminate_workers(envs: AsyncVectorEnv, timeout: float = 5.0) -> None:
    """Terminate, join (no zombie or orphan remains) and unpipe the workers of an async vector env, dead or mid-call
    (gymnasium's ``close(terminate=True)`` first waits for a pending call: ``EOFError`` again on a dead pipe)."""
    for process in envs.processes:
        if process.is_alive():
            process.terminate()
    for process in envs.processes:
        process.join(timeout)
        if process.is_alive():  # ignored SIGTERM
            process.kill()
            process.join()
    for pipe in (pipe for pipe in envs.parent_pipes if pipe is not None):
        pipe.close()
    envs.error_queue.close()
    envs.closed = True  # nothing left to close; keeps gymnasium's __del__ from trying


def _values(info: dict[str, Any], n: int, *keys: str) -> np.ndarray | None:
    """The first of ``keys`` in a vector info as floats ``[n]``, NaN where gymnasium's mask ``info["_" + key]`` says
    none (``None``: no key there)."""
    for key in keys:
        if info.get(key) is not None:
            out, where = np.full(n, np.nan), np.asarray(info.get("_" + key, np.ones(n)), dtype=bool)
            out[where] = np.asarray(info[key], dtype=np.float64)[where]
            return out
    return None


class GymnasiumVectorEnv(gym.vector.VectorEnv):
    """A gymnasium vector env of single envs over one object set, returning CPU tensors; ``envs`` is gymnasium's
    vector env of them, built anew (``rebuilds`` times) after a worker died.

    Args:
        obj_sets, obj_set, max_episode_steps, render_mode, wrappers: Each env's (``ObjectSetWrapper``).
        label: Names the envs in messages (``"CartPole-v1 (object set 'train')"``).
        vectorization: ``"sync"`` (one process) or ``"async"`` (a worker process per env).
        worker_start_method: How async workers start: ``"fork"``, ``"forkserver"``, ``"spawn"``; ``None``:
            :data:`ASYNC_CONTEXT`. A simulator that hangs in a forked process (ManiSkill3) needs forkserver or spawn.
        worker_timeout: Seconds workers may take to start or answer a reset or step (past it, ``EnvFault`` names fixes).
        max_env_restarts: Recreations of one env (or the workers) in a row without a finished episode (then EnvFault).
        obs_bound: Bound on the absolute value of observations (``None``: finiteness only).
        obs_bound_mode: ``"clip"`` or ``"reject"`` (treated as non-finite).
        on_nonfinite: ``"stop"`` raises ``NumericalFault``; ``"skip"`` cuts the episode short and resets the env.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self, obj_sets: ObjSets, obj_set: str, num_envs: int, label: str, max_episode_steps: int | None = None,
        vectorization: str = "sync", render_mode: str | None = None, max_env_restarts: int = 3,
        obs_bound: float | None = None, obs_bound_mode: str = "clip", on_nonfinite: str = "stop",
        wrappers: Sequence[WrapperSpec] = (), worker_start_method: str | None = None,
        worker_timeout: float = WORKER_TIMEOUT,
    ):  # fmt: skip
        self.num_envs, self.label, self.on_nonfinite, self.device = num_envs, label, on_nonfinite, torch.device("cpu")
        self.is_async = vectorization == "async"
        self.start_method, self.worker_timeout = worker_start_method or ASYNC_CONTEXT, float(worker_timeout)
        build = functools.partial(ObjectSetWrapper, obj_sets, obj_set, max_episode_steps, render_mode, wrappers)
        make = functools.partial(RestartingEnv, build, max_env_restarts)  # async workers pickle it: no self inside
        self.env_fns = [functools.partial(make, label=self._label(i)) for i in range(num_envs)]
        self.rebuilds = Restarts(max_env_restarts, self._label("async workers"))  # after a worker died
        envs = self.envs = self._make()
        self.single_observation_space, self.observation_space = envs.single_observation_space, envs.observation_space
        self.single_action_space, self.action_space = envs.single_action_space, envs.action_space
        self.checks = ValueChecks(num_envs, obs_bound, obs_bound_mode, self.single_observation_space)
        self._steps = np.zeros(num_envs, dtype=np.int64)  # steps into each env's episode (messages)
        self._skips = np.zeros(num_envs, dtype=np.int64)  # episodes cut in a row by skips, per env
        self._reset_seed, self._obs = 0, None  # _obs: the last numpy observations (a cut episode's last good one)
        self._faults: Counter = Counter()  # env_restarts, nonfinite_steps, obs_clipped: EpisodeStats' counts

    def _label(self, i: int | str | None = None) -> str:
        """Names env ``i`` (or all envs, or e.g. ``"async workers"``) in messages."""
        which = f"env {i}" if isinstance(i, int) else f"the {i or 'envs'}"
        return f"{which} of {self.label}"

    def _pop_faults(self) -> dict[str, int]:
        faults, self._faults = {k: int(v) for k, v in self._faults.items() if v}, Counter()
        return faults

    def _make(self) -> gym.vector.VectorEnv:
        if not self.is_async:
            # copy=False (here and below): float32_copy makes the arrays of our own, once.
            return SyncVectorEnv(self.env_fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP)
        # gymnasium's AsyncVectorEnv waits for its new workers without a time limit; workers that do not answer
        # within worker_timeout are killed (the wait then ends with EOFError) and the run stops, naming why.
        before, expired = set(multiprocessing.active_children()), threading.Event()

        def stop_new_workers() -> None:
            expired.set()
            for process in set(multiprocessing.active_children()) - before:
                # SIGKILL: a forked worker inherits the parent's Python SIGTERM handler (a user's, Lightning's), and a
                # handler that returns leaves a hung worker hanging.
                process.kill()

        timer = threading.Timer(self.worker_timeout, stop_new_workers)
        timer.daemon = True
        timer.start()
        try:
            return AsyncVectorEnv(self.env_fns, copy=False, autoreset_mode=AutoresetMode.SAME_STEP,
                                  context=self.start_method)  # fmt: skip
        except Exception:
            if expired.is_set():
                raise EnvFault(self._timeout_message("start")) from None
            raise
        finally:
            timer.cancel()

    def _timeout_message(self, call: str) -> str:
        return (
            f"The async workers of {self.label} did not answer {call} within worker_timeout={self.worker_timeout:g} "
            f"s (start method '{self.start_method}'). A simulator that hangs in a forked worker (ManiSkill3's SAPIEN "
            "is one) runs with worker_start_method='forkserver' or 'spawn' (Hydra: env.worker_start_method="
            "forkserver); a slow one needs a larger worker_timeout (Hydra: env.worker_timeout=600); "
            "vectorization='sync' steps the envs in this process."
        )

    def _guarded(self, call: str, *args: Any, **kwargs: Any) -> Any:
        """The vector env's ``call`` (``"reset"``, ``"step"``); ``None`` when an async worker died (:data:`WORKER_LOST`)
        and the envs were built anew; :class:`EnvFault` past ``max_env_restarts`` rebuilds in a row (or from an env:
        all workers stopped), or when the workers do not answer within ``worker_timeout``."""
        try:  # on async workers as <call>_async, then <call>_wait within worker_timeout
            if not self.is_async:
                return getattr(self.envs, call)(*args, **kwargs)
            getattr(self.envs, f"{call}_async")(*args, **kwargs)
            return getattr(self.envs, f"{call}_wait")(timeout=self.worker_timeout)
        except multiprocessing.TimeoutError:
            terminate_workers(self.envs)
            raise EnvFault(self._timeout_message(call)) from None
        except WORKER_LOST as err:
            if not self.is_async:  # raised by the vector env itself (an env's own errors are RestartingEnv's)
                raise
            terminate_workers(self.envs)
            self.rebuilds.failed(f"a worker process died ({type(err).__name__}: {str(err) or 'connection closed'})",
                                 action="rebuilding them")  # fmt: skip
            self.envs = self._make()
            return None
        except EnvFault:
            if self.is_async:
                terminate_workers(self.envs)
            raise
        except (ValueError, TypeError) as err:  # an env's own errors are RestartingEnv's: what it returned, batched
            raise self._unbatchable(call, err) from err

    def _unbatchable(self, call: str, why: Any) -> ValueError:
        space = self.single_observation_space
        return ValueError(f"gymnasium's vector env could not batch what {self._label()} returned from {call} ({why}): "
                          f"each env returns observations of its observation_space's shape, {space.shape or space}, "
                          "and one number as reward. Fix the env, or the wrapper that changes them.")  # fmt: skip

    def _rebuild_seeds(self) -> list[int | None]:
        """Fresh, reproducible seeds for the envs after the latest rebuild (env ``i``: from ``seed + i``)."""
        return [derive_seed(self._reset_seed + i, self.rebuilds.total) for i in range(self.num_envs)]

    def _vector_reset(self, seeds: list[int | None], mask: np.ndarray | None = None) -> tuple[Obs, bool]:
        """Reset all envs (or those in ``mask``); also whether workers died and were rebuilt (then all were reset)."""
        rebuilt, options = 0, None if mask is None else {"reset_mask": mask}
        while (result := self._guarded("reset", seed=seeds, options=options)) is None:
            rebuilt, options, seeds = rebuilt + 1, None, self._rebuild_seeds()
        obs, info = result
        restarts = info.get("env_restart")  # recreations inside RestartingEnv.reset
        self._faults.update(env_restarts=rebuilt + (0 if restarts is None else int(restarts.sum())))
        return float32_copy(obs), rebuilt > 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Obs, dict[str, Any]]:
        """Reset every env (env ``i`` with ``seed + i``); checked (and clipped) first observations as tensors."""
        self._reset_seed = seed = self._reset_seed if seed is None else seed
        self._obs = self._screen(self._vector_reset([seed + i for i in range(self.num_envs)])[0])
        self._steps[:] = 0
        return to_tensor(self._obs, "cpu", batch_dims=1), {"faults": self._pop_faults()}

    def _screen(self, obs: Obs) -> Obs:
        """Reset again the envs whose first observation is non-finite or rejected (``stop``: raise); clip."""
        for _ in range(MAX_CONSECUTIVE_SKIPS):
            if self.checks.clean(obs):
                self._faults.update(obs_clipped=self.checks.clip(obs))
                return obs
            bad = self._bad_envs(obs, None, at_reset=True)
            self._faults.update(nonfinite_steps=bad.sum())
            new, rebuilt = self._vector_reset([None] * self.num_envs, bad)
            obs = new if rebuilt else select_envs(bad, new, obs)
        raise NumericalFault(
            f"Resetting {self._label()} returned non-finite (or out-of-bound) observations "
            f"{MAX_CONSECUTIVE_SKIPS} times in a row (on_nonfinite='skip'). Fix the env's reset."
        )

    def _bad_envs(self, obs: Obs, reward: np.ndarray | None, final: Obs = None, done=None, at_reset: bool = False):
        """Envs with a non-finite (or rejected) value: raise with ``stop``, else a mask of them."""
        faults = self.checks.find(obs, reward, final, done)
        if faults and self.on_nonfinite == "stop":
            env, (problem, fix) = next(iter(faults.items()))  # the bad value, where it came from, and the fixes
            at = " at reset" if at_reset else f" at step {int(self._steps[env]) + 1} of its episode"
            raise NumericalFault(f"{problem} from {self._label(env)}{at}. To go on: {fix}; or cut such episodes "
                                 "short and continue with on_nonfinite='skip' on the data module (Hydra: "
                                 "env.on_nonfinite=skip).")  # fmt: skip
        bad = np.zeros(self.num_envs, dtype=bool)
        bad[list(faults)] = True
        return bad

    def _skip(self, bad, obs, final, reward, terminated, truncated, cut) -> tuple[Obs, Obs]:
        """Cut ``bad`` envs' episodes at their last good observation, reset those envs (in place): obs and final obs."""
        self._faults.update(nonfinite_steps=bad.sum())
        self._skips[bad] += 1
        if self._skips.max() > MAX_CONSECUTIVE_SKIPS:
            raise NumericalFault(
                f"{self._label(int(self._skips.argmax()))} returned non-finite (or rejected) values in "
                f"{MAX_CONSECUTIVE_SKIPS + 1} episodes in a row (on_nonfinite='skip'). Fix the env."
            )
        final = select_envs(bad, self._obs, final)
        reward[bad], terminated[bad], truncated[bad], cut[bad] = 0.0, False, True, True
        new, rebuilt = self._vector_reset([None] * self.num_envs, bad)
        if rebuilt:  # a worker died in that reset: every running episode ends here too, at its observation
            alive = ~terminated & ~truncated
            truncated[alive], cut[alive] = True, True
            return self._screen(new), final
        return self._screen(select_envs(bad, new, obs)), final

    def step(self, actions: Any) -> tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step every env once (ended episodes restart within the step); the contract's tensors and ``info``."""
        action = actions.cpu().numpy() if torch.is_tensor(actions) else np.asarray(actions)
        if isinstance(self.single_action_space, gym.spaces.MultiBinary):
            action = action.astype(self.single_action_space.dtype)
        result = self._guarded("step", action)
        n = self.num_envs
        if result is None:  # a worker died: the envs were rebuilt; every episode ends, cut
            self._faults.update(env_restarts=1)
            final, self._obs = self._obs, self._screen(self._vector_reset(self._rebuild_seeds())[0])
            self._steps[:] = 0
            cut = torch.ones(n, dtype=torch.bool)
            obs = to_tensor(self._obs, "cpu", batch_dims=1)
            info = {"final_obs": to_tensor(final, "cpu", batch_dims=1), "cut": cut, "faults": self._pop_faults()}
            return obs, torch.zeros(n), torch.zeros(n, dtype=torch.bool), cut.clone(), info
        obs, reward, terminated, truncated, info = result
        obs, reward = float32_copy(obs), np.asarray(reward, dtype=np.float32)  # checked as the tensors hold them
        if reward.shape != (n,):  # async workers' rewards are batched here
            raise self._unbatchable("step", f"rewards of shape {reward.shape[1:]}")
        done, final, cut = terminated | truncated, obs, None  # final: what each env reached
        if "final_obs" in info:  # an episode ended (gymnasium's SAME_STEP key; cheaper than done.any() every step)
            final = map_obs(np.copy, obs)
            for i in np.flatnonzero(done):
                write_obs(final, i, info["final_obs"][i])
            restarted = info.get("final_info", {}).get("env_restart")  # RestartingEnv cut the episode
            cut = None if restarted is None else restarted.astype(bool)
            for restarts in (restarted, info.get("env_restart")):  # recreations in the step, and in the autoreset
                self._faults.update(env_restarts=0 if restarts is None else restarts.sum())
        # The cheap check; the details only when it fails.
        if not (self.checks.clean(obs, reward) and (final is obs or self.checks.clean(final))):
            bad = self._bad_envs(obs, reward, final, done)
            if bad.any():
                cut = np.zeros(n, dtype=bool) if cut is None else cut
                obs, final = self._skip(bad, obs, final, reward, terminated, truncated, cut)
        ended = done if final is obs else terminated | truncated  # a skip may have cut more episodes
        if self.checks.clipping:
            clipped = self.checks.clip(obs) + (0 if final is obs else self.checks.clip(final, ended))
            self._faults.update(obs_clipped=clipped)
        self._steps += 1
        self._obs = obs
        out = {}
        # This step's success where the env reports it (ended envs: their reset's info; the final step's is below).
        success = _values(info, n, "is_success", "success")
        if final is not obs:
            finished = ended if cut is None else ended & ~cut
            self._steps[ended] = 0
            self._skips[finished] = 0  # a finished episode: the env works
            if finished.any():
                self.rebuilds.worked()
            final_info = info.get("final_info", {})
            ended_success = _values(final_info, n, "is_success", "success")
            if success is not None or ended_success is not None:
                success = np.full(n, np.nan) if success is None else success
                success[ended] = np.nan if ended_success is None else ended_success[ended]
            episode = final_info.get("episode")
            scored = _values(episode, n, "r") if isinstance(episode, dict) else None
            if scored is not None and final_info.get("_episode") is not None:
                scored[~np.asarray(final_info["_episode"], dtype=bool)] = np.nan
            out["final_obs"] = to_tensor(final, "cpu", batch_dims=1)
            out.update({"episode_return": torch.from_numpy(scored)} if scored is not None else {})
            if cut is not None:
                out["cut"] = torch.from_numpy(cut)
        if success is not None:
            out["success"] = torch.from_numpy(success)
        obs_t = to_tensor(obs, "cpu", batch_dims=1)
        out.setdefault("final_obs", obs_t)
        if any(self._faults.values()):
            out["faults"] = self._pop_faults()
        return obs_t, torch.from_numpy(reward), torch.from_numpy(terminated), torch.from_numpy(truncated), out

    def close_extras(self, **kwargs: Any) -> None:
        """Close the single envs (and the async workers)."""
        self.envs.close()
