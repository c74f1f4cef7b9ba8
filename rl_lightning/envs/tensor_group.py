"""``TensorEnvGroup``: a batched tensor env drawing its episodes from one object set, on the env's device.

The tensor path's counterpart of :class:`~rl_lightning.envs.EnvGroup`. Where ``EnvGroup``
wraps one gymnasium env per index (numpy arrays, a Python loop over envs), this wraps one
batched env that steps every index at once and hands back torch tensors on its device
(:class:`~rl_lightning.envs.batched.TorchVectorEnv`, or a simulator's own vector env of
tensors). Nothing here reads a tensor back to the host while stepping:

- Object sets become per-env parameters. Every variation's ``attrs`` are gathered into one
  table per parameter (``[num_variations]``); each env holds the index of the variation its
  episode was drawn from, drawn again (uniformly, from the group's torch generator) for the
  envs whose episode ended in a step, and its parameters are gathered from the table
  (``torch.where``, no branch). So an episode keeps its variation, as ``ObjectSetWrapper``'s
  draw per episode does. A variation's ``seeds`` range does not apply: the batch draws every
  start state from its own generator, seeded from the run's seed.
- Episode statistics are tensors: each step's returns and lengths of the episodes that ended
  are kept on the device and read to the host once, by :meth:`pop_stats`.
- Non-finite observations or rewards are counted on the device; :meth:`pop_stats` raises
  :class:`~rl_lightning.faults.NumericalFault` when there were any (``on_nonfinite="stop"``,
  the only answer this path has: cutting single episodes short would need a host read per step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import torch

from rl_lightning.envs.batched import TorchVectorEnv
from rl_lightning.envs.env_group import EpisodeStats
from rl_lightning.envs.object_sets import ObjSets, Variation, select_obj_set
from rl_lightning.faults import NumericalFault

#: Builds a batched tensor env: ``(env_id, num_envs, device, seed, max_episode_steps)`` -> a vector env of tensors.
BatchedEnvFactory = Callable[[str, int, torch.device, int, int | None], gym.vector.VectorEnv]


def reference_env(
    env_id: str, num_envs: int, device: torch.device, seed: int, max_episode_steps: int | None
) -> TorchVectorEnv:
    """The library's own batched torch env of ``env_id`` (``env.backend=torch``)."""
    return TorchVectorEnv(env_id, num_envs, device=device, seed=seed, max_episode_steps=max_episode_steps)


@dataclasses.dataclass
class TensorStep:
    """What one batched step returns, as tensors on the env's device with a leading ``num_envs`` axis.

    Attributes:
        obs: Next observations (an ended env's: the first of its next episode).
        reward, terminated, truncated: ``[num_envs]``.
        final_obs: The observations the step reached, before any restart (every row; the
            rows of ``done`` are the true last observations of ended episodes).
        done: ``terminated | truncated``.
    """

    obs: torch.Tensor
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: torch.Tensor
    done: torch.Tensor


def _variation_table(
    variations: Sequence[Variation], env_id: str, params: Mapping[str, torch.Tensor], where: str
) -> dict[str, torch.Tensor]:
    """Per parameter a ``[num_variations]`` table of the variations' values (the env's default where one is silent).

    Raises:
        ValueError: A variation names another env id or ``make_kwargs`` (a batched env is built
            once, not per episode), a non-numeric value, or a parameter the env does not have.
    """
    table: dict[str, list[float]] = {}
    for k, variation in enumerate(variations):
        label = f"variation {variation.name or k} of {where}"
        if variation.env_id not in (None, env_id):
            raise ValueError(
                f"{label} names env_id {variation.env_id!r}; a batched env runs one task ({env_id!r}). Put other "
                "tasks in their own run, or vary this task's parameters (attrs)."
            )
        if variation.make_kwargs:
            raise ValueError(
                f"{label} has make_kwargs {dict(variation.make_kwargs)}; a batched env is built once for all its "
                "envs. Give per-env parameters as attrs instead (e.g. attrs: {length: 0.6})."
            )
        unknown = sorted(set(variation.attrs) - set(params))
        if unknown and not params:
            raise ValueError(
                f"{label} sets {unknown}, and the batched {env_id} has no per-env parameters at all (EnvPool exposes "
                "none). Give object sets without attrs (obj_sets: {train: [{}], test: [{}]}) or run the gymnasium "
                "backend (env.backend=gymnasium)."
            )
        if unknown:
            raise ValueError(
                f"{label} sets {unknown}, which the batched {env_id} does not have as per-env parameters; it has "
                f"{sorted(params)}. Vary those, or run the gymnasium backend (env.backend=gymnasium)."
            )
        for name in variation.attrs:
            table.setdefault(name, [])
    for name in table:
        default = float(params[name][0])
        for k, variation in enumerate(variations):
            value = variation.attrs.get(name, default)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ValueError(
                    f"attrs.{name} of variation {variation.name or k} of {where} is {value!r}; a batched env's "
                    "parameters are numbers (one per env)."
                )
            table[name].append(float(value))
    if not table:  # no variation varies anything (or the env has no parameters)
        return {}
    like = next(iter(params.values()))
    return {name: torch.tensor(values, dtype=like.dtype, device=like.device) for name, values in table.items()}


class TensorEnvGroup:
    """A batched tensor env over one object set: the group the tensor path's rollouts and evaluations step.

    Args:
        env_id: The task (a reference id of :mod:`rl_lightning.envs.batched`, or the id the
            factory builds).
        num_envs: Envs in the batch.
        obj_set: The object set episodes are drawn from.
        obj_sets: All object sets; ``None`` takes the shipped ones of ``env_id``.
        max_episode_steps: Time limit; ``None`` keeps the env's.
        seed: Seeds the batch's generator (starts, variation draws); ``reset(seed)`` again.
        device: Where the env lives and every tensor it returns is.
        make_env: Builds the batched env (default: :func:`reference_env`).

    Raises:
        ValueError: The env has another batch size or device than asked, or the object sets
            name what it cannot vary (each message names the setting and the fix).
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        obj_set: str = "train",
        obj_sets: Mapping[str, Sequence[Variation | Mapping[str, Any]]] | ObjSets | None = None,
        max_episode_steps: int | None = None,
        seed: int = 0,
        device: torch.device | str = "cpu",
        make_env: BatchedEnvFactory = reference_env,
    ):
        if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
            raise ValueError(f"num_envs must be a positive integer, got {num_envs!r}.")
        self.env_id, self.num_envs, self.seed = env_id, num_envs, seed
        self.device = torch.device(device)
        self.obj_sets = select_obj_set(env_id, obj_sets, obj_set)
        self.obj_set = obj_set
        self.env = make_env(env_id, num_envs, self.device, seed, max_episode_steps)
        if self.env.num_envs != num_envs:
            raise ValueError(
                f"The batched {env_id} holds {self.env.num_envs} envs, but num_envs={num_envs} was asked for. Build "
                f"it with {num_envs} envs, or set num_envs={self.env.num_envs} (Hydra: env.num_envs)."
            )
        env_device = torch.device(getattr(self.env, "device", self.device))
        if env_device != self.device:
            raise ValueError(
                f"The batched {env_id} lives on {env_device}, but the policy trains on {self.device}. Build the env "
                f"on {self.device}, or train on {env_device} (Trainer(accelerator=...); Hydra: trainer.accelerator)."
            )
        self.observation_space = self.env.single_observation_space
        self.action_space = self.env.single_action_space
        self.max_episode_steps = getattr(self.env, "max_episode_steps", max_episode_steps)
        variations = self.obj_sets[obj_set]
        params = getattr(self.env, "params", {})
        self._table = _variation_table(variations, env_id, params, f"object set '{obj_set}'")
        self._num_variations = len(variations)
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.variation = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.obs: torch.Tensor | None = None
        self._action_bounds = None
        if isinstance(self.action_space, gym.spaces.Box):
            self._action_bounds = tuple(
                torch.as_tensor(b, dtype=torch.float32, device=self.device)
                for b in (self.action_space.low, self.action_space.high)
            )
        self._clear_episodes()
        self._ended: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        self._nonfinite = torch.zeros((), dtype=torch.int64, device=self.device)

    @property
    def on_nonfinite(self) -> str:
        """Always ``"stop"``: a non-finite value stops the run (see the module)."""
        return "stop"

    @on_nonfinite.setter
    def on_nonfinite(self, value: str) -> None:
        if value != "stop":
            raise ValueError(
                f"on_nonfinite={value!r}: the tensor path (a batched env) stops on a non-finite observation or reward "
                "and cannot skip single episodes without reading every step back to the host. Use "
                "on_nonfinite=stop (Hydra: algo.on_nonfinite=stop) or the gymnasium backend (env.backend=gymnasium)."
            )

    def env_action(self, action: torch.Tensor) -> torch.Tensor:
        """Policy actions as the env takes them, on the device: ``Box`` actions clipped to the bounds (as
        :func:`~rl_lightning.data.collection.to_env_action` does on the host), ``Discrete`` shifted by ``start``."""
        if self._action_bounds is not None:
            return torch.maximum(torch.minimum(action, self._action_bounds[1]), self._action_bounds[0])
        start = getattr(self.action_space, "start", 0)
        return action + int(start) if isinstance(self.action_space, gym.spaces.Discrete) and start else action

    def _clear_episodes(self) -> None:
        self._ep_return = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)
        self._ep_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)

    def _draw_variations(self, where: torch.Tensor | None) -> None:
        """Draw a variation for the envs ``where`` (all: ``None``) and write their parameters."""
        if not self._table:
            return
        drawn = torch.randint(self._num_variations, (self.num_envs,), generator=self.generator, device=self.device)
        self.variation = drawn if where is None else torch.where(where, drawn, self.variation)
        self.env.set_params(**{name: values[self.variation] for name, values in self._table.items()})

    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Restart every env's episode from a fresh variation; the generators start again from ``seed``.

        Returns:
            Observations ``[num_envs, *obs_shape]`` on the device.
        """
        seed = self.seed if seed is None else seed
        self.generator.manual_seed(seed)
        self._draw_variations(None)
        self.obs, _ = self.env.reset(seed=seed)
        self._check_finite(self.obs)
        self._clear_episodes()
        return self.obs

    def _check_finite(self, *values: torch.Tensor) -> None:
        for value in values:
            if value.is_floating_point():
                self._nonfinite += (~torch.isfinite(value.reshape(value.shape[0], -1))).any(-1).sum()

    def step(self, action: torch.Tensor) -> TensorStep:
        """Step every env with ``action`` (``[num_envs, ...]`` on the device); ended episodes restart in the step."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        final_obs = info.get("final_obs", info.get("final_observation", obs))
        done = terminated | truncated
        self._check_finite(obs, reward)
        self._ep_return += reward
        self._ep_length += 1
        self._ended.append((done, self._ep_return.clone(), self._ep_length.clone()))
        self._ep_return = torch.where(done, 0.0, self._ep_return)
        self._ep_length = torch.where(done, 0, self._ep_length)
        self._draw_variations(done)  # the next episodes' variations, from their first step on
        self.obs = obs
        return TensorStep(obs, reward, terminated, truncated, final_obs, done)

    def pop_stats(self) -> EpisodeStats:
        """The episodes that ended since the last call, read to the host in one transfer, and clear them.

        Raises:
            NumericalFault: A non-finite observation or reward was seen since the last call.
        """
        stats = EpisodeStats()
        if self._ended:
            done, returns, lengths = (torch.stack(column) for column in zip(*self._ended, strict=True))
            self._ended = []
            # One gather on the device, then one copy per column.
            steps, envs = done.nonzero(as_tuple=True)
            stats.returns = returns[steps, envs].tolist()
            stats.lengths = lengths[steps, envs].tolist()
            stats.envs = envs.tolist()
            stats.successes = [float("nan")] * len(stats.returns)
        nonfinite = int(self._nonfinite)
        if nonfinite:
            self._nonfinite.zero_()
            raise NumericalFault(
                f"The batched {self.env_id} (object set '{self.obj_set}') returned {nonfinite} non-finite "
                "observations or rewards since the last rollout. The tensor path stops on them (on_nonfinite='skip' "
                "needs the gymnasium backend); fix the simulation or bound its state."
            )
        return stats

    def close(self) -> None:
        """Close the batched env."""
        self.env.close()
