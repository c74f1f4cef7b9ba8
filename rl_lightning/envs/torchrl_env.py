"""A user's batched env on the tensor path: a factory named in config, returning a vector env or a torchrl ``EnvBase``.

``env.backend=torch`` with ``env.env_factory=mypkg.sim.make_envs`` builds the batch with the user's function
(:data:`EnvFactory`). It returns a gymnasium ``VectorEnv`` speaking the env contract
(:mod:`~rl_lightning.envs.env_group`), as ManiSkill3's ``ManiSkillVectorEnv`` and Isaac Lab's gym interface do, or
a torchrl ``EnvBase`` with ``batch_size == [num_envs]`` (as torchrl wraps Brax, Isaac Lab, MuJoCo Playground...).
Object-set variations need the env's ``params`` (a dict of ``[num_envs]`` tensors) and ``set_params(**values)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rl_lightning.checks import import_callable

#: Shown in messages: what ``env.env_factory`` names.
FACTORY_EXAMPLE = "mypkg.sim.make_envs"
#: A user's simulator: ``(env_id, num_envs, device, seed, max_episode_steps) -> batched env``.
EnvFactory = Callable[[str, int, torch.device, int, "int | None"], Any]


def _space(spec: Any, batch_dims: int) -> gym.Space:
    """One env's gymnasium space of a batched torchrl spec: Discrete, MultiDiscrete, MultiBinary or Box."""
    from torchrl.data import Binary, Categorical, MultiCategorical, OneHot  # here: imported for a torchrl env only

    if type(spec) in (Categorical, OneHot):  # not their subclasses (Binary, MultiCategorical)
        return gym.spaces.Discrete(int(spec.space.n))
    if isinstance(spec, MultiCategorical):  # the first env's counts (the batch shares them)
        return gym.spaces.MultiDiscrete(spec.nvec[(0,) * batch_dims].cpu().numpy())
    if isinstance(spec, Binary):
        return gym.spaces.MultiBinary(spec.shape[-1])
    low, high, space = -np.inf, np.inf, getattr(spec, "space", None)
    if hasattr(space, "low"):  # Bounded: the first env's bounds (the batch shares them)
        index = (0,) * batch_dims
        low, high = space.low[index].cpu().numpy(), space.high[index].cpu().numpy()
    return gym.spaces.Box(low, high, tuple(spec.shape[batch_dims:]), torch.empty((), dtype=spec.dtype).numpy().dtype)


class TorchRLVectorEnv(gym.vector.VectorEnv):
    """A batched torchrl ``EnvBase`` (``batch_size == [num_envs]``, observations at ``obs_key``) as a vector env:
    ``env.step_and_maybe_reset`` is a ``SAME_STEP`` autoreset (``"next"``: what the step reached). The time limit is
    the env's own (torchrl's ``StepCounter(max_steps=...)`` sets ``truncated``)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, env: Any, obs_key: str = "observation"):
        from torchrl.data import OneHot

        if len(env.batch_size) != 1:
            raise ValueError(
                f"The torchrl env has batch_size {list(env.batch_size)}; the tensor path steps one flat batch. Build "
                "it with batch_size=[num_envs] (a ParallelEnv / SerialEnv of n workers, or the simulator's num_envs)."
            )
        self.env, self.obs_key = env, obs_key
        self.num_envs = int(env.batch_size[0])
        self.device = torch.device(env.device) if env.device is not None else torch.device("cpu")
        self.single_observation_space = _space(env.observation_spec[obs_key], 1)
        self.single_action_space = _space(env.action_spec, 1)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._one_hot = type(env.action_spec) is OneHot
        self.params = {} if getattr(env, "is_closed", False) else getattr(env, "params", {})  # unstarted (lazy): none
        self._td = None

    def set_params(self, **values: torch.Tensor) -> None:
        """Hand per-env parameters to the wrapped env (those it exposes as ``params``)."""
        self.env.set_params(**values)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[torch.Tensor, dict]:
        """Reset every env (``seed``: ``env.set_seed`` first)."""
        if seed is not None:
            self.env.set_seed(seed)
        self._td = self.env.reset()
        return self._td[self.obs_key], {}

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """One ``step_and_maybe_reset``: the step's outcome, and ended envs restarted within it."""
        if self._one_hot:
            actions = torch.nn.functional.one_hot(actions.long(), self.single_action_space.n)
        td = self._td.copy()
        td["action"] = actions.reshape(self.env.action_spec.shape).to(self.env.action_spec.dtype)
        stepped, self._td = self.env.step_and_maybe_reset(td)
        reached, n = stepped["next"], self.num_envs
        terminated, done = reached["terminated"].reshape(n), reached["done"].reshape(n)
        truncated = reached.get("truncated", done & ~terminated).reshape(n)
        info = {"final_obs": reached[self.obs_key], "_final_obs": done}
        if "success" in reached.keys():  # a task that reports it per env (EnvGroup reads it once per collection)
            info["success"] = reached["success"].reshape(n)
        return self._td[self.obs_key], reached["reward"].reshape(n), terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Close the wrapped env."""
        if not self.env.is_closed:
            self.env.close()


def factory_path(factory: EnvFactory | str) -> str:
    """The import path (``module.name``) a simulator factory is kept under in checkpoints; a lambda or local function,
    which no other process could import again, is refused naming the fix."""
    if isinstance(factory, str):
        return factory
    if not callable(factory):
        raise TypeError(f"env_factory must be a function or its import path, got {factory!r}.")
    # An object (no __qualname__), a lambda or local function (<lambda>, <locals>), a method (Cls.make: no module path).
    if (name := getattr(factory, "__qualname__", None)) is None or "<" in name or "." in name:
        raise ValueError(
            f"env_factory={name or repr(factory)} cannot be kept in a checkpoint: a resume or `rl-lightning play` "
            "rebuilds the envs by importing the factory again; a lambda, a function defined inside another function or "
            "a method has no import path, and a callable object (functools.partial, an instance) would come back "
            f"without its arguments. Define a function at the top level of a module (e.g. {FACTORY_EXAMPLE}) and pass "
            "it or its path."
        )
    return f"{factory.__module__}.{name}"


def user_factory(factory: EnvFactory | str) -> EnvFactory:
    """The simulator factory ``env_factory`` names (a function, or its import path), returning the contract's env:
    a vector env as it is, a torchrl ``EnvBase`` wrapped in :class:`TorchRLVectorEnv`."""
    where = f"env_factory={factory if isinstance(factory, str) else getattr(factory, '__qualname__', factory)}"
    make = factory if callable(factory) else import_callable(
        factory, "env.env_factory", "a function (env_id, num_envs, device, seed, max_episode_steps) -> batched env",
        FACTORY_EXAMPLE)  # fmt: skip

    def build(env_id: str, num_envs: int, device: torch.device, seed: int, max_episode_steps: int | None):
        from torchrl.envs import EnvBase  # late: importing torchrl makes "spawn" the default start method

        env = make(env_id, num_envs, device, seed, max_episode_steps)
        if isinstance(env, EnvBase):
            return TorchRLVectorEnv(env)
        if isinstance(env, gym.vector.VectorEnv):
            return env
        raise ValueError(
            f"{where} returned {type(env).__name__}; the tensor path steps a gymnasium VectorEnv of torch tensors or "
            "a batched torchrl EnvBase. Return one of those from the factory."
        )

    return build
