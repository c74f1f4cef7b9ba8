"""Device-native batched envs: thousands of simulations as torch tensors on one device, stepped at once.

:class:`TorchVectorEnv` is a gymnasium ``VectorEnv`` whose observations, rewards, flags and
actions are torch tensors on its device (CPU or CUDA), the interface GPU simulators expose
(ManiSkill3's ``ManiSkillVectorEnv``, Isaac Lab's gym interface). The dynamics are a small
object of pure tensor functions (:class:`CartPoleDynamics`, :class:`PendulumDynamics`); the
env adds what every batched env shares: the time limit, same-step autoreset, per-env
parameters (the object sets' variations) and a seeded torch generator.

The two reference dynamics equal gymnasium's ``CartPole-v1`` and ``Pendulum-v1`` step for
step (``tests/envs/test_batched.py`` holds them against gymnasium from the same states and
actions), so CI runs the tensor path without a GPU. Kept packages have none that fits:
gymnasium's functional ``phys2d`` versions are written in JAX, and torchrl's ``PendulumEnv``
is a tutorial env with other observations (``th``, ``thdot``) and no time limit.

Autoreset (gymnasium's ``SAME_STEP`` mode, as ManiSkill3 and Isaac Lab do it): an env whose
episode ends in a step returns its next episode's first observation from that step, and the
true last observation in ``info["final_obs"]`` (the whole batch; rows where
``info["_final_obs"]`` is set are the ones that ended). The step never branches on the
device's values: a fresh start state is drawn for every env each step and taken where an
episode ended (``torch.where``), so a step reads nothing back to the host.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode
from gymnasium.vector.utils import batch_space


class Dynamics(Protocol):
    """What :class:`TorchVectorEnv` needs of a simulation: pure functions of batched tensors.

    Attributes:
        env_id: The gymnasium id whose dynamics these equal.
        params: Per-env physical parameters and their defaults (gymnasium's attribute names).
        max_episode_steps: The id's time limit.
        observation_space, action_space: One env's spaces (gymnasium's).
    """

    env_id: str
    params: Mapping[str, float]
    max_episode_steps: int
    observation_space: gym.spaces.Box
    action_space: gym.Space

    def start(self, n: int, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        """``n`` start states ``[n, state_dim]`` in ``like``'s dtype and device, drawn from ``generator``."""

    def step(
        self, state: torch.Tensor, action: torch.Tensor, params: Mapping[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step of every env: ``(next state, reward [n], terminated [n] bool)``."""

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        """Observations ``[n, obs_dim]`` of states ``[n, state_dim]``."""


def _uniform(n: int, low: torch.Tensor, high: torch.Tensor, generator: torch.Generator, like: torch.Tensor):
    """``[n, len(low)]`` uniform draws in ``[low, high)`` (gymnasium's ``np_random.uniform``)."""
    u = torch.rand((n, low.numel()), generator=generator, dtype=like.dtype, device=like.device)
    return low + (high - low) * u


@dataclasses.dataclass(frozen=True)
class CartPoleDynamics:
    """gymnasium's ``CartPole-v1`` (Barto, Sutton and Anderson 1983; Florian 2007's equations), batched.

    gymnasium's ``CartPoleEnv.step`` with its default Euler integrator and reward 1 per step
    (the terminating step too); starts uniform in ``[-0.05, 0.05)^4``; terminated when the
    cart leaves +-2.4 or the pole leans past 12 degrees. ``total_mass`` and
    ``polemass_length`` are derived from the parameters in every step, so a variation of
    ``length`` or ``masspole`` changes the dynamics (as ``ObjectSetWrapper`` makes gymnasium's do).
    """

    env_id: str = "CartPole-v1"
    params: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {
            "gravity": 9.8,
            "masscart": 1.0,
            "masspole": 0.1,
            "length": 0.5,  # half the pole's length, as gymnasium names it
            "force_mag": 10.0,
            "tau": 0.02,
        }
    )
    max_episode_steps: int = 500
    x_threshold: float = 2.4
    theta_threshold_radians: float = 12 * 2 * math.pi / 360
    observation_space: gym.spaces.Box = dataclasses.field(
        default_factory=lambda: gym.spaces.Box(
            -np.array([4.8, np.inf, 24 * 2 * math.pi / 360, np.inf], np.float32),
            np.array([4.8, np.inf, 24 * 2 * math.pi / 360, np.inf], np.float32),
            dtype=np.float32,
        )
    )
    action_space: gym.Space = dataclasses.field(default_factory=lambda: gym.spaces.Discrete(2))

    def start(self, n: int, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        bound = torch.full((4,), 0.05, dtype=like.dtype, device=like.device)
        return _uniform(n, -bound, bound, generator, like)

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


def angle_normalize(x: torch.Tensor) -> torch.Tensor:
    """Angles wrapped to ``[-pi, pi)`` (gymnasium's ``pendulum.angle_normalize``; ``remainder`` is numpy's ``%``)."""
    return torch.remainder(x + math.pi, 2 * math.pi) - math.pi


@dataclasses.dataclass(frozen=True)
class PendulumDynamics:
    """gymnasium's ``Pendulum-v1``, batched: the state ``(theta, theta_dot)``, observations ``(cos, sin, theta_dot)``.

    gymnasium's ``PendulumEnv.step``: torque clipped to ``max_torque``, cost
    ``angle_normalize(th)^2 + 0.1 thdot^2 + 0.001 u^2`` of the state before the step, the
    speed clipped to ``max_speed``; starts uniform in ``[-pi, pi) x [-1, 1)``; never
    terminates (the 200-step limit truncates).
    """

    env_id: str = "Pendulum-v1"
    params: Mapping[str, float] = dataclasses.field(
        default_factory=lambda: {"g": 10.0, "m": 1.0, "l": 1.0, "dt": 0.05, "max_speed": 8.0, "max_torque": 2.0}
    )
    max_episode_steps: int = 200
    observation_space: gym.spaces.Box = dataclasses.field(
        default_factory=lambda: gym.spaces.Box(-np.array([1, 1, 8], np.float32), np.array([1, 1, 8], np.float32))
    )
    action_space: gym.Space = dataclasses.field(
        default_factory=lambda: gym.spaces.Box(-2.0, 2.0, shape=(1,), dtype=np.float32)
    )

    def start(self, n: int, generator: torch.Generator, like: torch.Tensor) -> torch.Tensor:
        high = torch.tensor([math.pi, 1.0], dtype=like.dtype, device=like.device)
        return _uniform(n, -high, high, generator, like)

    def step(self, state, action, params):
        th, thdot = state.unbind(-1)
        g, m, length, dt = params["g"], params["m"], params["l"], params["dt"]
        u = torch.maximum(torch.minimum(action[:, 0].to(state.dtype), params["max_torque"]), -params["max_torque"])
        costs = angle_normalize(th).square() + 0.1 * thdot.square() + 0.001 * u.square()
        newthdot = thdot + (3 * g / (2 * length) * torch.sin(th) + 3.0 / (m * length**2) * u) * dt
        newthdot = torch.maximum(torch.minimum(newthdot, params["max_speed"]), -params["max_speed"])
        newth = th + newthdot * dt
        return torch.stack((newth, newthdot), -1), -costs, torch.zeros_like(th, dtype=torch.bool)

    def observe(self, state: torch.Tensor) -> torch.Tensor:
        th, thdot = state.unbind(-1)
        return torch.stack((torch.cos(th), torch.sin(th), thdot), -1).to(torch.float32)


#: The reference dynamics by the gymnasium id they equal.
DYNAMICS: dict[str, type] = {"CartPole-v1": CartPoleDynamics, "Pendulum-v1": PendulumDynamics}


def dynamics_for(env_id: str) -> Dynamics:
    """The reference dynamics of ``env_id``.

    Raises:
        ValueError: No batched torch version of ``env_id``; names those there are.
    """
    if env_id not in DYNAMICS:
        raise ValueError(
            f"There is no batched torch version of {env_id!r}; rl_lightning ships {sorted(DYNAMICS)}. Use one of "
            "those, pass your simulator's tensor vector env (a gymnasium VectorEnv of torch tensors or a batched "
            "torchrl EnvBase), or run the gymnasium backend."
        )
    return DYNAMICS[env_id]()


class TorchVectorEnv(gym.vector.VectorEnv):
    """A batch of ``num_envs`` simulations held as tensors on ``device``, stepped in one call.

    Args:
        dynamics: The simulation, or the gymnasium id of a reference one (``"CartPole-v1"``,
            ``"Pendulum-v1"``).
        num_envs: Envs in the batch.
        device: Where the state lives and every returned tensor is.
        dtype: The state's dtype (observations are float32 whatever it is: the single
            observation space's dtype). ``torch.float64`` reproduces gymnasium's numpy
            arithmetic to rounding; float32 is a GPU simulator's usual choice.
        max_episode_steps: The time limit (default: the id's, 500 for CartPole, 200 for Pendulum).
        seed: Seeds the generator; ``reset(seed=...)`` seeds it again.
        **params: Parameter values for every env (e.g. ``length=0.6``), else the defaults.

    Attributes:
        params: Per-env parameters, each a ``[num_envs]`` tensor (:meth:`set_params` writes them).
        state: The simulation state ``[num_envs, state_dim]``.
        elapsed: Steps into each env's episode ``[num_envs]`` (int64).
    """

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(
        self,
        dynamics: Dynamics | str,
        num_envs: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int | None = None,
        seed: int | None = None,
        **params: float,
    ):
        self.dynamics = dynamics_for(dynamics) if isinstance(dynamics, str) else dynamics
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}.")
        if dtype not in (torch.float32, torch.float64):
            raise TypeError(f"dtype must be torch.float32 or torch.float64, got {dtype!r}.")
        limit = self.dynamics.max_episode_steps if max_episode_steps is None else max_episode_steps
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"max_episode_steps must be a positive integer, got {max_episode_steps!r}.")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_episode_steps = limit
        self.single_observation_space = self.dynamics.observation_space
        self.single_action_space = self.dynamics.action_space
        self.observation_space = batch_space(self.single_observation_space, num_envs)
        self.action_space = batch_space(self.single_action_space, num_envs)
        self.spec = None
        self.render_mode = None
        self.closed = False
        self.generator = torch.Generator(device=self.device)
        if seed is not None:
            self.generator.manual_seed(seed)
        self._like = torch.empty(0, dtype=dtype, device=self.device)
        self.params = {
            name: torch.full((num_envs,), float(default), dtype=dtype, device=self.device)
            for name, default in self.dynamics.params.items()
        }
        self.set_params(**params)
        self.state = self.dynamics.start(num_envs, self.generator, self._like)
        self.elapsed = torch.zeros(num_envs, dtype=torch.int64, device=self.device)

    def set_params(self, env_ids: torch.Tensor | None = None, **values: float | torch.Tensor) -> None:
        """Write parameters of the envs ``env_ids`` (indices or a bool mask; default all), from the next step on.

        Args:
            env_ids: Which envs.
            **values: A number for all of them, or a tensor with one value per selected env.

        Raises:
            ValueError: A name these dynamics do not have (the message lists those they have).
        """
        unknown = sorted(set(values) - set(self.params))
        if unknown:
            raise ValueError(
                f"{self.dynamics.env_id}'s batched dynamics have no parameter {unknown}; they have "
                f"{sorted(self.params)}. Vary only those in its object sets (e.g. attrs: {{length: 0.6}})."
            )
        rows = slice(None) if env_ids is None else env_ids
        for name, value in values.items():
            self.params[name][rows] = torch.as_tensor(value, dtype=self.dtype, device=self.device)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[torch.Tensor, dict[str, Any]]:
        """Start a new episode in the envs ``options["env_ids"]`` (default: all); return every env's observation.

        Args:
            seed: Seeds the generator first.
            options: ``env_ids`` (indices or a bool mask) and ``params`` (a mapping for
                :meth:`set_params`, applied to those envs before their new episodes).
        """
        options = dict(options or {})
        unknown = sorted(set(options) - {"env_ids", "params"})
        if unknown:
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
        if isinstance(actions, torch.Tensor):
            if actions.device != self.device:
                raise ValueError(
                    f"Actions are on {actions.device} but this batched env lives on {self.device}. Keep the policy "
                    f"on the env's device (or build the env with device='{actions.device}')."
                )
        else:
            actions = torch.as_tensor(np.asarray(actions), device=self.device)
        if actions.shape[0] != self.num_envs:
            raise ValueError(f"Got actions for {actions.shape[0]} envs; this batch has {self.num_envs}.")
        return actions

    def step(
        self, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Step every env; ended episodes restart in the same step (``SAME_STEP`` autoreset, see the module).

        Args:
            actions: ``[num_envs, ...]`` on the env's device (numpy arrays are copied there).

        Returns:
            ``(obs, reward, terminated, truncated, info)``: tensors on the device (reward in
            the state's dtype, flags bool); ``info["final_obs"]`` holds the observations
            before the restart and ``info["_final_obs"]`` which envs restarted.
        """
        state, reward, terminated = self.dynamics.step(self.state, self._actions(actions), self.params)
        self.elapsed = self.elapsed + 1
        truncated = self.elapsed >= self.max_episode_steps  # gymnasium's TimeLimit: also on a terminating step
        done = terminated | truncated
        final_obs = self.dynamics.observe(state)
        fresh = self.dynamics.start(self.num_envs, self.generator, self._like)
        self.state = torch.where(done[:, None], fresh, state)
        self.elapsed = torch.where(done, 0, self.elapsed)
        obs = self.dynamics.observe(self.state)
        return obs, reward, terminated, truncated, {"final_obs": final_obs, "_final_obs": done}

    def close_extras(self, **kwargs: Any) -> None:
        """Nothing to release: the state is tensors."""
