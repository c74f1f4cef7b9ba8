"""``EnvGroup``: a gymnasium vector env over one object set, with episode statistics.

The vector env runs in gymnasium's ``SAME_STEP`` autoreset mode: an env that ends an
episode is reset inside the same ``step`` call and the true final observation is returned
separately (``final_obs``). The rollout needs it to bootstrap truncated episodes from the
value of the state the time limit cut off, never from the next episode's first state.

Faults are handled here too, so that every data stream (rollouts, replay, evaluation)
gets the same behaviour: an env that raises is recreated and an async worker that dies is
rebuilt (:mod:`rl_lightning.envs.restart`); non-finite or out-of-bound values stop the run
or cut the episode short (:mod:`rl_lightning.envs.checks`). A cut episode ends as
*truncated* at its last good observation with reward 0, and is left out of the episode
statistics: it is partial, and evaluation must not count it toward its quota.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rl_lightning.envs.checks import ON_NONFINITE, ValueChecks, check_value_options, nonfinite_message
from rl_lightning.envs.object_sets import ObjectSetWrapper, ObjSets, Variation, select_obj_set
from rl_lightning.envs.obs import Obs, map_obs, row, select_envs
from rl_lightning.envs.restart import ASYNC_CONTEXT, RebuildingVectorEnv, RestartingEnv, check_max_env_restarts
from rl_lightning.envs.wrappers import WrapperSpec, check_wrappers
from rl_lightning.faults import NumericalFault

__all__ = ["ASYNC_CONTEXT", "VECTORIZATION", "EnvGroup", "EpisodeStats", "StepResult", "check_env_id", "make_env"]

VECTORIZATION = ("sync", "async")

#: Episodes in a row one env may have cut short by non-finite values (``on_nonfinite="skip"``)
#: before the run stops anyway: an env that never finishes an episode is broken, and an
#: evaluation waiting for its episode quota would otherwise never end.
MAX_CONSECUTIVE_SKIPS = 100


def check_env_id(env_id: str) -> None:
    """Raise a clear error if ``env_id`` is not registered with gymnasium.

    ``env_id`` may be gymnasium's ``"module:id"`` form (``"mypkg.envs:mypkg/Task-v0"``): the
    module, which registers the id when imported, is imported here first, as ``gymnasium.make``
    imports it in every process that makes the env (async vector-env workers included).
    """
    if not isinstance(env_id, str) or not env_id:
        raise TypeError(f"env_id must be a gymnasium id string such as 'CartPole-v1', got {env_id!r}.")
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as err:
            raise ValueError(
                f"env_id '{env_id}': the module '{module}' cannot be imported ({err}). Install the package that "
                "holds it, or put its directory on PYTHONPATH."
            ) from None
    if name in gym.registry:
        return
    # Ids of other namespaces rarely are what was meant: suggest only close ones.
    close = difflib.get_close_matches(name, list(gym.registry), n=3, cutoff=0.8)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    where = f" The module '{module}' did not register it." if module else ""
    raise ValueError(
        f"Unknown environment id '{env_id}'.{hint}{where} Register a custom env with "
        "gymnasium.register(id=..., entry_point=...) in a module of yours and name it as 'module:id' "
        "(env_id='mypkg.envs:mypkg/Task-v0'), which imports the module first."
    )


def _check_max_episode_steps(max_episode_steps: Any) -> None:
    if max_episode_steps is not None and (
        not isinstance(max_episode_steps, int) or isinstance(max_episode_steps, bool) or max_episode_steps <= 0
    ):
        raise ValueError(f"max_episode_steps must be a positive integer or None, got {max_episode_steps!r}.")


def make_env(
    env_id: str,
    obj_set: str = "train",
    obj_sets: Mapping[str, Sequence[Variation | Mapping[str, Any]]] | ObjSets | None = None,
    max_episode_steps: int | None = None,
    render_mode: str | None = None,
    wrappers: Sequence[WrapperSpec] = (),
) -> ObjectSetWrapper:
    """One env drawing its episodes from an object set (what videos and ``rl-lightning play`` step).

    Unlike :class:`EnvGroup` it does not reset itself when an episode ends, so the last
    frame of an episode can be rendered. For ``render_mode="rgb_array"`` on a machine with
    no display, MuJoCo is pointed at its headless EGL backend (``MUJOCO_GL=egl``) and pygame
    at SDL's dummy video driver, unless the user chose otherwise: MuJoCo's default tries
    GLFW, which needs a display.

    Raises:
        ValueError: Unknown env id or object set (naming the ones available).
    """
    check_env_id(env_id)
    _check_max_episode_steps(max_episode_steps)
    sets = select_obj_set(env_id, obj_sets, obj_set)
    if render_mode is not None and not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        os.environ.setdefault("MUJOCO_GL", "egl")
        # pygame (classic control) draws off-screen; without this SDL looks for a display and
        # prints "error: XDG_RUNTIME_DIR is invalid" (SDL's documented headless driver).
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")
    return ObjectSetWrapper(
        sets, obj_set, max_episode_steps=max_episode_steps, render_mode=render_mode, wrappers=check_wrappers(wrappers)
    )


@dataclasses.dataclass
class StepResult:
    """What one vector step returns, as numpy arrays with a leading ``num_envs`` axis.

    Attributes:
        obs: Next observations; for an env whose episode ended, the first observation of
            its next episode. Shape ``[num_envs, *obs_shape]`` (a dict of such arrays for a ``Dict`` space).
        reward: Shape ``[num_envs]``.
        terminated: The episode reached a terminal state. Shape ``[num_envs]``.
        truncated: The episode was cut off (time limit). Shape ``[num_envs]``.
        final_obs: The true last observation of each env whose episode ended this step,
            keyed by env index (empty when no episode ended). For an episode cut short by a
            fault, the last good observation.
        cut: Envs whose episode was cut short this step by a restart or a skipped
            non-finite value (they are also ``truncated``), shape ``[num_envs]``; ``None``
            when no episode was cut.
    """

    obs: Obs
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: dict[int, Obs]
    cut: np.ndarray | None = None


@dataclasses.dataclass
class EpisodeStats:
    """Statistics of completed episodes, one entry per episode (success is NaN where the
    env does not report ``is_success`` or ``success`` in its final info), and counts of
    fault events since the last :meth:`EnvGroup.pop_stats`.

    Episodes cut short by a fault are not entries: they did not complete.

    Attributes:
        env_restarts: Env recreations (an env that raised) plus async vector-env rebuilds
            (a worker process that died; one per rebuild).
        nonfinite_steps: Env steps or resets whose observation or reward was non-finite
            (or outside ``obs_bound`` in ``reject`` mode) and were skipped.
        obs_clipped: Observation values clipped to ``obs_bound`` (``clip`` mode).
    """

    returns: list[float] = dataclasses.field(default_factory=list)
    lengths: list[int] = dataclasses.field(default_factory=list)
    successes: list[float] = dataclasses.field(default_factory=list)
    envs: list[int] = dataclasses.field(default_factory=list)  # index of the env that ran it
    env_restarts: int = 0
    nonfinite_steps: int = 0
    obs_clipped: int = 0

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
        max_env_restarts: How many times in a row one env may be recreated after raising in
            ``step`` or ``reset`` (and the async workers rebuilt after one died) without an
            episode finishing in between; one more raises :class:`~rl_lightning.faults.EnvFault`.
            0 never recreates.
        obs_bound: Bound on the absolute value of observations; ``None`` checks only that
            they are finite.
        obs_bound_mode: ``"clip"`` clips observations to ``[-obs_bound, obs_bound]`` (counted
            in ``obs_clipped``); ``"reject"`` treats a value outside as non-finite.
        on_nonfinite: A non-finite observation or reward: ``"stop"`` raises
            :class:`~rl_lightning.faults.NumericalFault` naming it; ``"skip"`` cuts that env's
            episode short (truncated at its last good observation, reward 0) and resets it.
        wrappers: Gymnasium wrappers applied to each env after ``gymnasium.make``, as specs
            (see :mod:`rl_lightning.envs.wrappers`).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        obj_set: str = "train",
        obj_sets: Mapping[str, Sequence[Variation | Mapping[str, Any]]] | ObjSets | None = None,
        max_episode_steps: int | None = None,
        vectorization: str = "sync",
        seed: int = 0,
        render_mode: str | None = None,
        max_env_restarts: int = 3,
        obs_bound: float | None = None,
        obs_bound_mode: str = "clip",
        on_nonfinite: str = "stop",
        wrappers: Sequence[WrapperSpec] = (),
    ):
        check_env_id(env_id)
        wrappers = check_wrappers(wrappers)
        if not isinstance(num_envs, int) or isinstance(num_envs, bool) or num_envs <= 0:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}.")
        _check_max_episode_steps(max_episode_steps)
        if vectorization not in VECTORIZATION:
            raise ValueError(f"vectorization must be one of {VECTORIZATION}, got {vectorization!r}.")
        check_max_env_restarts(max_env_restarts)
        check_value_options(obs_bound, obs_bound_mode, on_nonfinite)
        self.env_id = env_id
        self.num_envs = num_envs
        self.obj_sets = select_obj_set(env_id, obj_sets, obj_set)
        self.obj_set = obj_set
        self.seed = seed
        self.vectorization = vectorization
        self.max_env_restarts = max_env_restarts
        self.on_nonfinite = on_nonfinite
        sets, limit = self.obj_sets, max_episode_steps

        def make(i: int):
            def build():
                return ObjectSetWrapper(
                    sets, obj_set, max_episode_steps=limit, render_mode=render_mode, wrappers=wrappers
                )

            label = self._label(i)  # a string, not the group, goes into the factory
            return lambda: RestartingEnv(build, max_env_restarts, label)

        self._vec = RebuildingVectorEnv(
            [make(i) for i in range(num_envs)], vectorization, max_env_restarts, self._label("async workers")
        )
        self.observation_space = self.envs.single_observation_space
        self.action_space = self.envs.single_action_space
        self.checks = ValueChecks(num_envs, obs_bound, obs_bound_mode, self.observation_space)
        self._ep_return = np.zeros(num_envs, dtype=np.float64)
        self._ep_length = np.zeros(num_envs, dtype=np.int64)
        self._skips = np.zeros(num_envs, dtype=np.int64)  # episodes cut in a row by skips, per env
        self._reset_seed = seed
        self.stats = EpisodeStats()
        self.obs: Obs | None = None

    @property
    def envs(self):
        """The gymnasium vector env (a new one after async workers were rebuilt)."""
        return self._vec.envs

    @property
    def on_nonfinite(self) -> str:
        """``"stop"`` or ``"skip"``; settable (the data module takes it from the algorithm at setup)."""
        return self._on_nonfinite

    @on_nonfinite.setter
    def on_nonfinite(self, value: str) -> None:
        if value not in ON_NONFINITE:
            raise ValueError(f"on_nonfinite must be one of {ON_NONFINITE}, got {value!r}.")
        self._on_nonfinite = value

    def _label(self, i: int | str | None = None) -> str:
        """Names env ``i`` (or all envs, or e.g. ``"async workers"``) in messages."""
        which = f"env {i}" if isinstance(i, int) else f"the {i or 'envs'}"
        return f"{which} of {self.env_id} (object set '{self.obj_set}')"

    # ---------------------------------------------------------------- reset
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every env (env ``i`` with ``seed + i``) and clear running episodes.

        Returns:
            Observations, shape ``[num_envs, *obs_shape]``.
        """
        seed = self.seed if seed is None else seed
        self._reset_seed = seed
        self.obs = self._reset([seed + i for i in range(self.num_envs)])
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self.obs

    def _vector_reset(self, seeds: list[int | None], mask: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
        """Reset all envs (or those in ``mask``) and count the recreations it took.

        Returns:
            The observations, and whether async workers died and were rebuilt on the way (then
            every env was reset).
        """
        obs, info, rebuilds = self._vec.reset(seeds, mask, base_seed=self._reset_seed)
        restarts = info.get("env_restart")  # recreations inside RestartingEnv.reset
        self.stats.env_restarts += rebuilds + (0 if restarts is None else int(restarts.sum()))
        return obs, rebuilds > 0

    def _reset(self, seeds: list[int | None]) -> np.ndarray:
        """Reset all envs and return their checked (and clipped) first observations."""
        return self._screen(self._vector_reset(seeds)[0])

    def _screen(self, obs: Obs) -> Obs:
        """Reset again the envs whose first observation is non-finite or rejected (``stop``: raise); clip."""
        for _ in range(MAX_CONSECUTIVE_SKIPS):
            if self.checks.obs_clean(obs):
                self.stats.obs_clipped += self.checks.clip(obs)
                return obs
            bad = self._bad_envs(obs, None, {}, at_reset=True)
            self.stats.nonfinite_steps += int(bad.sum())
            new, rebuilt = self._vector_reset([None] * self.num_envs, bad)
            obs = new if rebuilt else select_envs(bad, new, obs)
        raise NumericalFault(
            f"Resetting {self._label()} returned non-finite (or out-of-bound) observations "
            f"{MAX_CONSECUTIVE_SKIPS} times in a row (on_nonfinite='skip'). Fix the env's reset."
        )

    # ---------------------------------------------------------------- faults
    def _bad_envs(
        self, obs: Obs, reward: np.ndarray | None, final_obs: dict[int, Obs], at_reset: bool = False
    ) -> np.ndarray:
        """Envs with a non-finite (or rejected) value: raise with ``stop``, else a mask of them."""
        faults = self.checks.find(obs, reward, final_obs)
        if faults and self.on_nonfinite == "stop":
            fault = faults[0]
            step = None if at_reset else int(self._ep_length[fault.env]) + 1
            raise NumericalFault(nonfinite_message(fault, self._label(fault.env), step, self.checks.obs_bound))
        bad = np.zeros(self.num_envs, dtype=bool)
        bad[[f.env for f in faults]] = True
        return bad

    def _after_rebuild(self) -> StepResult:
        """After a worker died mid-step (the envs are rebuilt): reset, and end every episode as truncated."""
        self.stats.env_restarts += 1
        final_obs = {i: row(self.obs, i) for i in range(self.num_envs)}
        self.obs = self._reset(self._vec.rebuild_seeds(self._reset_seed))
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        n = self.num_envs
        cut = np.ones(n, dtype=bool)
        return StepResult(self.obs, np.zeros(n), np.zeros(n, dtype=bool), cut.copy(), final_obs, cut)

    def _skip(self, bad, obs, reward, terminated, truncated, final_obs, cut) -> np.ndarray:
        """Cut the episodes of ``bad`` envs at their last good observation and reset those envs.

        Modifies the step's arrays in place and returns the next observations.
        """
        self.stats.nonfinite_steps += int(bad.sum())
        self._skips[bad] += 1
        if self._skips.max() > MAX_CONSECUTIVE_SKIPS:
            raise NumericalFault(
                f"{self._label(int(self._skips.argmax()))} returned non-finite (or rejected) values in "
                f"{MAX_CONSECUTIVE_SKIPS + 1} episodes in a row (on_nonfinite='skip'). Fix the env."
            )
        for i in np.flatnonzero(bad):
            final_obs[int(i)] = row(self.obs, i)
        reward[bad], terminated[bad], truncated[bad], cut[bad] = 0.0, False, True, True
        new, rebuilt = self._vector_reset([None] * self.num_envs, bad)
        if rebuilt:  # a worker died in that reset: every running episode ends here too
            alive = ~terminated & ~truncated
            for i in np.flatnonzero(alive):
                final_obs[int(i)] = row(obs, i)
            truncated[alive], cut[alive] = True, True
            return self._screen(new)
        return self._screen(select_envs(bad, new, obs))

    # ---------------------------------------------------------------- step
    def step(self, actions: np.ndarray) -> StepResult:
        """Step every env once and record the statistics of episodes that ended.

        Args:
            actions: Shape ``[num_envs, *action_shape]``.

        Raises:
            NumericalFault: A non-finite (or rejected) observation or reward, with
                ``on_nonfinite="stop"``.
            EnvFault: An env (or the async workers) failed more than ``max_env_restarts``
                times in a row.
        """
        result = self._vec.step(actions)
        if result is None:  # an async worker died: the envs were rebuilt
            return self._after_rebuild()
        obs, reward, terminated, truncated, info = result
        clean = self.checks.clean(obs, reward)  # the cheap check; details only when it fails
        final_obs: dict[int, Obs] = {}
        done = terminated | truncated
        any_done = done.any()
        cut = None
        if any_done:
            final_info = info.get("final_info", {})
            for i in np.flatnonzero(done):
                final_obs[int(i)] = info["final_obs"][i]
                if clean and self.checks.float_obs:
                    clean = self.checks.obs_clean(final_obs[int(i)])
            restarted = final_info.get("env_restart")  # RestartingEnv cut the episode
            if restarted is not None:
                cut = restarted.astype(bool)
                self.stats.env_restarts += int(restarted.sum())
            restarts = info.get("env_restart")  # recreations in the autoreset
            if restarts is not None:
                self.stats.env_restarts += int(restarts.sum())
        if not clean:
            bad = self._bad_envs(obs, reward, final_obs)
            if bad.any():
                cut = np.zeros(self.num_envs, dtype=bool) if cut is None else cut
                obs = self._skip(bad, obs, reward, terminated, truncated, final_obs, cut)
                any_done = True
        if self.checks.clipping:
            self.stats.obs_clipped += self.checks.clip(obs)
            for i, final in final_obs.items():
                clipped = map_obs(np.copy, final)  # the env may own the array: clip a copy
                count = self.checks.clip(clipped)
                if count:
                    self.stats.obs_clipped += count
                    final_obs[i] = clipped
        self._ep_return += reward
        self._ep_length += 1
        if any_done:
            self._record_episodes(terminated | truncated, cut, info)
        self.obs = obs
        return StepResult(obs, reward, terminated, truncated, final_obs, cut)

    def _record_episodes(self, ended: np.ndarray, cut: np.ndarray | None, info: dict[str, Any]) -> None:
        """Add the episodes that finished (not those cut short) to the statistics; clear the ended ones."""
        final_info = info.get("final_info", {})
        success = final_info.get("is_success", final_info.get("success"))
        success_mask = final_info.get("_is_success", final_info.get("_success"))
        # The env's own score where gymnasium's RecordEpisodeStatistics sits before reward shaping
        # (Atari: before ClipReward, as CleanRL places it), else the sum of the rewards the policy saw.
        episode = final_info.get("episode")
        scored = episode.get("r") if isinstance(episode, dict) else None
        scored_mask = final_info.get("_episode")
        for i in np.flatnonzero(ended):
            if cut is not None and cut[i]:
                continue
            own_score = scored is not None and (scored_mask is None or scored_mask[i])
            self.stats.returns.append(float(scored[i]) if own_score else float(self._ep_return[i]))
            self.stats.lengths.append(int(self._ep_length[i]))
            self.stats.envs.append(int(i))
            reported = success is not None and (success_mask is None or success_mask[i])
            self.stats.successes.append(float(success[i]) if reported else float("nan"))
            self._skips[i] = 0  # a finished episode: the env works
            self._vec.episode_finished()
        self._ep_return[ended] = 0.0
        self._ep_length[ended] = 0

    def pop_stats(self) -> EpisodeStats:
        """Return the statistics of episodes completed since the last call, and clear them."""
        stats, self.stats = self.stats, EpisodeStats()
        return stats

    def close(self) -> None:
        """Close the underlying environments."""
        self._vec.close()
