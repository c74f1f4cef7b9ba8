"""EnvPool's C++ batched envs as the tensor path's vector env (``env.backend=envpool``), on the CPU.

`EnvPool <https://github.com/sail-sg/envpool>`_ steps a whole batch of classic-control,
MuJoCo or Atari envs in C++ threads and hands back numpy arrays. :class:`EnvPoolVectorEnv`
puts its gymnasium interface (``envpool.make_gymnasium``) behind the interface the tensor
path steps (:class:`~rl_lightning.envs.batched.TorchVectorEnv`'s): CPU tensors that share the
arrays' memory (``torch.from_numpy``, no copy), ``SAME_STEP`` autoreset with
``info["final_obs"]``: the contract of :class:`~rl_lightning.envs.EnvGroup`, which every backend speaks.

Why not torchrl's EnvPool wrapper (``torchrl.envs.MultiThreadedEnv``): it builds its specs
under ``set_gym_backend("gym")`` (``torchrl/envs/libs/envpool.py``), so it needs the legacy
``gym`` package, which is not installed here (and is unmaintained). EnvPool's own gymnasium
interface needs nothing more.

EnvPool resets an ended env on the *next* call (that call ignores the env's action and
returns its first observation with reward 0). Here that call is made within the same step,
for the ended envs only (``step(actions, env_id)``), so every step the learner sees is a real
transition and ``final_obs`` holds the true last observations, as gymnasium's ``SAME_STEP``.

EnvPool exposes no per-env physical parameters, so object sets can only repeat the task
(variations without ``attrs``); a variation that sets one is refused by
:class:`~rl_lightning.envs.EnvGroup`, naming ``env.backend=gymnasium``.
"""

from __future__ import annotations

import difflib
import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch


def _import_envpool():
    """``import envpool``, without the process-wide setting it leaves behind.

    Importing envpool 1.2.5 runs ``os.environ.setdefault("MPLBACKEND", "Agg")`` (its Jumanji
    renderer, ``envpool/jumanji/jumanji_official_render.py``), which every later subprocess
    would inherit: a Jupyter kernel started afterwards then draws no inline figures. The
    variable is put back as it was.
    """
    before = os.environ.get("MPLBACKEND")
    try:
        import envpool
    finally:
        if before is None:
            os.environ.pop("MPLBACKEND", None)
        else:
            os.environ["MPLBACKEND"] = before
    return envpool


def envpool_task(env_id: str) -> str:
    """EnvPool's name of ``env_id``: gymnasium's ``ALE/<Game>-v5`` is EnvPool's ``<Game>-v5``; others as given."""
    return env_id.removeprefix("ALE/")


def check_envpool_task(env_id: str) -> None:
    """Refuse, naming the fix, an env id EnvPool does not ship (or EnvPool not installed)."""
    try:
        envpool = _import_envpool()
    except ImportError:
        raise ValueError(
            "env.backend=envpool needs the envpool package: pip install -c requirements/constraints.txt envpool "
            "(or the [envs] extra), or keep env.backend=gymnasium."
        ) from None
    task = envpool_task(env_id)
    tasks = envpool.list_all_envs()
    if task not in tasks:
        close = difflib.get_close_matches(task, tasks, n=3)
        hint = f" Close EnvPool ids: {close}." if close else ""
        raise ValueError(
            f"env.backend=envpool: EnvPool has no task {env_id!r} (as {task!r}).{hint} Use an id EnvPool ships "
            "(envpool.list_all_envs()) or keep env.backend=gymnasium."
        )


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """A batch of EnvPool envs with the tensor path's interface: CPU tensors, ``SAME_STEP`` autoreset.

    Args:
        env_id: A gymnasium id EnvPool ships (``ALE/`` is dropped: :func:`envpool_task`).
        num_envs: Envs in the batch (EnvPool's ``num_envs``).
        seed: EnvPool's seed (env ``i`` gets ``seed + i``); ``reset(seed=...)`` with another
            seed builds the pool again with it.
        max_episode_steps: Time limit; ``None`` keeps EnvPool's for the task.
        **kwargs: More of ``envpool.make_gymnasium``'s options (``num_threads``, Atari's
            ``episodic_life``, ...).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env_id: str, num_envs: int, seed: int = 0, max_episode_steps: int | None = None, **kwargs: Any):
        check_envpool_task(env_id)
        self.env_id, self.num_envs, self.device = env_id, num_envs, torch.device("cpu")
        self._options = dict(kwargs)
        if max_episode_steps is not None:
            self._options["max_episode_steps"] = max_episode_steps
        self._build(seed)
        self.single_observation_space = self._pool.observation_space
        self.single_action_space = self._pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.max_episode_steps = int(self._pool.spec.config.max_episode_steps)
        #: No per-env parameters: EnvPool exposes none (object sets can only repeat the task).
        self.params: dict[str, torch.Tensor] = {}
        self._all = np.arange(num_envs, dtype=np.int32)

    def _build(self, seed: int) -> None:
        envpool = _import_envpool()
        self._seed = seed
        self._pool = envpool.make_gymnasium(envpool_task(self.env_id), num_envs=self.num_envs, seed=seed,
                                            **self._options)  # fmt: skip

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Start every env's episode (with ``seed``: from a pool built with that seed)."""
        if seed is not None and seed != self._seed:
            self._pool.close()
            self._build(seed)
        obs, _ = self._pool.reset()
        return torch.from_numpy(obs), {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """Step every env; ended envs restart within the step (``final_obs``: what they reached)."""
        actions = actions.numpy() if torch.is_tensor(actions) else np.asarray(actions)
        obs, reward, terminated, truncated, _ = self._pool.step(actions, self._all)
        done = np.logical_or(terminated, truncated)
        final_obs = obs
        if done.any():  # EnvPool resets on the next call: make it now, for the ended envs only
            ended = np.flatnonzero(done).astype(np.int32)
            first, *_ = self._pool.step(actions[ended], ended)
            obs = obs.copy()
            obs[ended] = first
        return (
            torch.from_numpy(obs),
            torch.from_numpy(np.asarray(reward, dtype=np.float32)),
            torch.from_numpy(np.asarray(terminated, dtype=bool)),
            torch.from_numpy(np.asarray(truncated, dtype=bool)),
            {"final_obs": torch.from_numpy(final_obs), "_final_obs": torch.from_numpy(done)},
        )

    def close_extras(self, **kwargs: Any) -> None:
        """Release EnvPool's threads."""
        self._pool.close()
