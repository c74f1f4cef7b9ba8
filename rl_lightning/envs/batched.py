"""Device-native batched envs: thousands of simulations as torch tensors on one device, stepped at once.

:class:`TorchVectorEnv` speaks the env contract (:mod:`~rl_lightning.envs.env_group`) around pure tensor dynamics,
equal to gymnasium's step for step (``tests/envs/test_batched.py``); no kept package has them in torch (gymnasium's
functional versions are JAX, torchrl's ``PendulumEnv`` has other observations).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space

from rl_lightning.checks import check_positive_int


def _uniform(low: list[float], n: int, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
    """``[n, len(low)]`` uniform draws in ``[-low, low)`` (gymnasium's ``np_random.uniform``)."""
    bound = torch.tensor(low, dtype=like.dtype, device=like.device)
    return bound * (2 * torch.rand((n, len(low)), generator=generator, dtype=like.dtype, device=like.device) - 1)


class CartPoleDynamics:
    """gymnasium's ``CartPole-v1`` (``CartPoleEnv.step``: Euler, reward 1 per step), batched; ``total_mass`` and
    ``polemass_length`` are derived every step, so varying ``length`` or ``masspole`` changes the dynamics."""

    env_id, max_episode_steps = "CartPole-v1", 500
    # gymnasium's names; length is half the pole's length.
    params = {"gravity": 9.8, "masscart": 1.0, "masspole": 0.1, "length": 0.5, "force_mag": 10.0, "tau": 0.02}
    x_threshold, theta_threshold_radians = 2.4, 12 * 2 * math.pi / 360
    _high = np.array([4.8, np.inf, 24 * 2 * math.pi / 360, np.inf], np.float32)
    observation_space = gym.spaces.Box(-_high, _high, dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def start(self, n: int, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        return _uniform([0.05] * 4, n, generator, like)

    def step(self, state, action, params):
        x, x_dot, theta, theta_dot = state.unbind(-1)
        total_mass = params["masspole"] + params["masscart"]
        polemass_length = params["masspole"] * params["length"]
        force = torch.where(action == 1, params["force_mag"], -params["force_mag"])
        costheta, sintheta = torch.cos(theta), torch.sin(theta)
        # gymnasium's CartPoleEnv.step, term for term (https://coneural.org/florian/papers/05_cart_pole.pdf).
        temp = (force + polemass_length * theta_dot.square() * sintheta) / total_mass
        thetaacc = (params["gravity"] * sintheta - costheta * temp) / (
            params["length"] * (4.0 / 3.0 - params["masspole"] * costheta.square() / total_mass)
        )
        xacc = temp - polemass_length * thetaacc * costheta / total_mass
        tau = params["tau"]
        state = torch.stack(
            (x + tau * x_dot, x_dot + tau * xacc, theta + tau * theta_dot, theta_dot + tau * thetaacc), -1
        )
        x, theta = state[:, 0], state[:, 2]
        terminated = (x.abs() > self.x_threshold) | (theta.abs() > self.theta_threshold_radians)
        return state, torch.ones_like(x), terminated

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32)


class PendulumDynamics:
    """gymnasium's ``Pendulum-v1`` (``PendulumEnv.step``), batched: the state ``(theta, theta_dot)``, observations
    ``(cos, sin, theta_dot)``; starts uniform in ``[-pi, pi) x [-1, 1)``; never terminates (200 steps truncate)."""

    env_id, max_episode_steps = "Pendulum-v1", 200
    params = {"g": 10.0, "m": 1.0, "l": 1.0, "dt": 0.05, "max_speed": 8.0, "max_torque": 2.0}
    observation_space = gym.spaces.Box(-np.array([1, 1, 8], np.float32), np.array([1, 1, 8], np.float32))
    action_space = gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)

    def start(self, n: int, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        return _uniform([math.pi, 1.0], n, generator, like)

    def step(self, state, action, params):
        th, thdot = state.unbind(-1)
        g, m, length, dt = params["g"], params["m"], params["l"], params["dt"]
        u = torch.maximum(torch.minimum(action[:, 0].to(state.dtype), params["max_torque"]), -params["max_torque"])
        normalized = torch.remainder(th + math.pi, 2 * math.pi) - math.pi  # gymnasium's angle_normalize (numpy's %)
        costs = normalized.square() + 0.1 * thdot.square() + 0.001 * u.square()
        newthdot = thdot + (3 * g / (2 * length) * torch.sin(th) + 3.0 / (m * length**2) * u) * dt
        newthdot = torch.maximum(torch.minimum(newthdot, params["max_speed"]), -params["max_speed"])
        newth = th + newthdot * dt
        return torch.stack((newth, newthdot), -1), -costs, torch.zeros_like(th, dtype=torch.bool)

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        th, thdot = state.unbind(-1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), -1).to(torch.float32)


#: The reference dynamics by the gymnasium id they equal.
DYNAMICS: dict[str, type] = {"CartPole-v1": CartPoleDynamics, "Pendulum-v1": PendulumDynamics}


class TorchVectorEnv(gym.vector.VectorEnv):
    """A batch of ``num_envs`` simulations held as tensors on ``device``, stepped in one call.

    A step never branches on the device's values: fresh start states are drawn every step and taken where an episode
    ended (``torch.where``), so it reads nothing back to the host.

    Args:
        dynamics: The gymnasium id of a reference simulation (:data:`DYNAMICS`), or a user's with the attributes and
            the pure tensor functions (``start``, ``step``, ``observe``) of :class:`CartPoleDynamics`.
        device: Where the state (``[num_envs, state_dim]``), the per-env ``params`` and every returned tensor are.
        dtype: The state's dtype (observations are float32): float64 matches gymnasium's numpy arithmetic to rounding.
        max_episode_steps: The time limit (default: the dynamics').
        seed: Seeds the generator; ``reset(seed=...)`` seeds it again.
        **params: Parameter values for every env (e.g. ``length=0.6``), else the defaults.
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self, dynamics: Any, num_envs: int, device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32, max_episode_steps: int | None = None, seed: int | None = None,
        **params: float,
    ):  # fmt: skip
        if isinstance(dynamics, str) and dynamics not in DYNAMICS:
            raise ValueError(
                f"There is no batched torch version of {dynamics!r}; rl_lightning ships {sorted(DYNAMICS)}. Use one of "
                "those, pass your simulator's tensor vector env (a gymnasium VectorEnv of torch tensors or a batched "
                "torchrl EnvBase), or run the gymnasium backend."
            )
        self.dynamics = DYNAMICS[dynamics]() if isinstance(dynamics, str) else dynamics
        check_positive_int(num_envs=num_envs)
        check_positive_int(max_episode_steps=max_episode_steps, none="None")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}.")
        self.num_envs, self.device, self.dtype = num_envs, torch.device(device), dtype
        self.max_episode_steps = max_episode_steps or self.dynamics.max_episode_steps
        self.single_observation_space = self.dynamics.observation_space
        self.single_action_space = self.dynamics.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.generator = torch.Generator(device=self.device)
        if seed is not None:
            self.generator.manual_seed(seed)
        self._like = torch.empty(0, dtype=dtype, device=self.device)
        self.params = {name: torch.empty(num_envs, dtype=dtype, device=self.device) for name in self.dynamics.params}
        self.set_params(**{**self.dynamics.params, **params})  # the defaults, overridden by ``params``
        self.state = self.dynamics.start(num_envs, self.generator, self._like)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def set_params(self, env_ids: torch.Tensor | None = None, **values: float | torch.Tensor) -> None:
        """Write parameters (a number, or a tensor of one value per env) of the envs ``env_ids`` (indices or a bool
        mask; default all), from the next step on."""
        if unknown := sorted(set(values) - set(self.params)):
            raise ValueError(
                f"{self.dynamics.env_id}'s batched dynamics have no parameter {unknown}; they have "
                f"{sorted(self.params)}. Vary only those in its object sets (e.g. attrs: {{length: 0.6}})."
            )
        rows = slice(None) if env_ids is None else env_ids
        for name, value in values.items():
            self.params[name][rows] = torch.as_tensor(value, dtype=self.dtype, device=self.device)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[torch.Tensor, dict]:
        """Start a new episode in the envs ``options["env_ids"]`` (default all), after ``options["params"]`` (for
        :meth:`set_params`) and seeding the generator with ``seed``; every env's observation."""
        options = dict(options or {})
        if unknown := sorted(set(options) - {"env_ids", "params"}):
            raise ValueError(f"Unknown reset option(s) {unknown}; TorchVectorEnv.reset takes env_ids and params.")
        if seed is not None:
            self.generator.manual_seed(seed)
        env_ids = options.get("env_ids")
        self.set_params(env_ids, **dict(options.get("params") or {}))
        fresh = self.dynamics.start(self.num_envs, self.generator, self._like)
        if env_ids is None:
            self.state, self.elapsed = fresh, torch.zeros_like(self.elapsed)
        else:
            self.state[env_ids] = fresh[env_ids]
            self.elapsed[env_ids] = 0
        return self.dynamics.observe(self.state), {}

    def _actions(self, actions: Any) -> torch.Tensor:
        if not isinstance(actions, torch.Tensor):
            actions = torch.as_tensor(np.asarray(actions), device=self.device)
        elif actions.device != self.device:
            raise ValueError(
                f"Actions are on {actions.device} but this batched env lives on {self.device}. Keep the policy "
                f"on the env's device (or build the env with device='{actions.device}')."
            )
        if actions.shape[0] != self.num_envs:
            raise ValueError(f"Got actions for {actions.shape[0]} envs; this batch has {self.num_envs}.")
        return actions

    def step(self, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        """Step every env with ``actions`` ``[num_envs, ...]``; ended episodes restart in it; rewards in the state's."""
        state, reward, terminated = self.dynamics.step(self.state, self._actions(actions), self.params)
        self.elapsed = self.elapsed + 1
        truncated = self.elapsed >= self.max_episode_steps  # gymnasium's TimeLimit: also on a terminating step
        done = terminated | truncated
        final_obs = self.dynamics.observe(state)
        fresh = self.dynamics.start(self.num_envs, self.generator, self._like)
        self.state = torch.where(done[:, None], fresh, state)
        self.elapsed = torch.where(done, 0, self.elapsed)
        info = {"final_obs": final_obs, "_final_obs": done}
        return self.dynamics.observe(self.state), reward, terminated, truncated, info

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the state is tensors."""
