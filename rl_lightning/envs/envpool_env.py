"""EnvPool's C++ batched envs as the env contract's vector env (``env.backend=envpool``), on the CPU.

`EnvPool <https://github.com/sail-sg/envpool>`_ steps a batch of classic-control, MuJoCo or Atari envs in C++
threads; :class:`EnvPoolVectorEnv` puts ``envpool.make_gymnasium`` behind the contract of
:mod:`~rl_lightning.envs.env_group`, as CPU tensors sharing the arrays' memory. Not torchrl's ``MultiThreadedEnv``:
it builds its specs under ``set_gym_backend("gym")`` (``torchrl/envs/libs/envpool.py``), needing the unmaintained
``gym`` package. EnvPool exposes no per-env parameters, so object sets can only repeat the task.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rl_lightning.checks import did_you_mean


def _import_envpool():
    """``import envpool`` without the ``MPLBACKEND=Agg`` envpool 1.2.5 sets on import
    (``envpool/jumanji/jumanji_official_render.py``), which a later Jupyter kernel would inherit: no inline figures."""
    before = os.environ.get("MPLBACKEND")
    try:
        import envpool
    finally:
        os.environ.pop("MPLBACKEND", None)
        os.environ.update({} if before is None else {"MPLBACKEND": before})
    return envpool


def envpool_task(env_id: str) -> str:
    """EnvPool's name of ``env_id``: ``[ale_py:]ALE/<Game>-v5`` is EnvPool's ``<Game>-v5``; others as given."""
    return env_id.rpartition(":")[2].removeprefix("ALE/")


def check_envpool_task(env_id: str) -> None:
    """Refuse, naming the fix, an env id EnvPool does not ship (or EnvPool not installed)."""
    try:
        envpool = _import_envpool()
    except ImportError:
        raise ValueError(
            "env.backend=envpool needs the envpool package: pip install -c requirements/constraints.txt envpool "
            "(or the [envs] extra), or keep env.backend=gymnasium."
        ) from None
    task, tasks = envpool_task(env_id), envpool.list_all_envs()
    if task not in tasks:
        hint = did_you_mean(task, tasks)
        raise ValueError(
            f"env.backend=envpool: EnvPool has no task {env_id!r} (as {task!r}).{hint} Use an id EnvPool ships "
            "(envpool.list_all_envs()) or keep env.backend=gymnasium."
        )


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """A batch of EnvPool envs with the env contract's interface: CPU tensors, ``SAME_STEP`` autoreset.

    EnvPool resets an ended env on the *next* call (ignoring that env's action; reward 0). That call is made within
    the same step, for the ended envs only, so every step is a real transition and ``final_obs`` the true last one.

    Args:
        env_id: A gymnasium id EnvPool ships (``ALE/`` is dropped: :func:`envpool_task`).
        seed: EnvPool's seed (env ``i`` gets ``seed + i``); ``reset(seed=...)`` with another rebuilds the pool.
        max_episode_steps: Time limit; ``None`` keeps EnvPool's for the task.
        **kwargs: More of ``envpool.make_gymnasium``'s options (``num_threads``, Atari's ``episodic_life``, ...).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, max_episode_steps: int | None = None, **kwargs: Any):
        check_envpool_task(env_id)
        self.env_id, self.num_envs, self.device = env_id, num_envs, torch.device("cpu")
        limit = {} if max_episode_steps is None else {"max_episode_steps": max_episode_steps}
        self._options = {**kwargs, **limit}
        self._build(seed)
        self.single_observation_space, self.single_action_space = self._pool.observation_space, self._pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.max_episode_steps = int(self._pool.spec.config.max_episode_steps)
        self.params: dict[str, torch.Tensor] = {}  # none: EnvPool exposes no per-env parameters
        self._all = np.arange(num_envs, dtype=np.int32)

    def _build(self, seed: int) -> None:
        task = envpool_task(self.env_id)
        self._pool = _import_envpool().make_gymnasium(task, num_envs=self.num_envs, seed=seed, **self._options)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Start every env's episode (with ``seed``: from a pool built anew with that seed, so a seed repeats its
        episodes, as evaluation needs; EnvPool's reset takes none)."""
        if seed is not None:
            self._pool.close()
            self._build(seed)
        return torch.from_numpy(self._pool.reset()[0]), {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """Step every env; ended envs restart within the step (``final_obs``: what they reached)."""
        actions = actions.numpy() if torch.is_tensor(actions) else np.asarray(actions)
        obs, reward, terminated, truncated, pool_info = self._pool.step(actions, self._all)
        done = np.logical_or(terminated, truncated)
        final_obs = obs
        if done.any():  # EnvPool resets on the next call: make it now, for the ended envs only
            ended = np.flatnonzero(done).astype(np.int32)
            first, *_ = self._pool.step(actions[ended], ended)
            obs = obs.copy()
            obs[ended] = first
        reward, terminated = np.asarray(reward, dtype=np.float32), np.asarray(terminated, dtype=bool)
        info = {"final_obs": torch.from_numpy(final_obs), "_final_obs": torch.from_numpy(done)}
        success = pool_info.get("is_success", pool_info.get("success"))  # a task that reports it, per env
        if success is not None:
            info["success"] = torch.from_numpy(np.asarray(success, dtype=np.float32))
        tensors = [torch.from_numpy(x) for x in (obs, reward, terminated, np.asarray(truncated, dtype=bool))]
        return *tensors, info

    def close_extras(self, **kwargs: Any) -> None:
        """Release EnvPool's threads."""
        self._pool.close()
