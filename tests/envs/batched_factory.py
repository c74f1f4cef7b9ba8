"""Users' batched envs for the tests of ``env.env_factory`` (imported by path, as a user's module would be)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torchrl.data import Categorical, Composite, Unbounded
from torchrl.envs import EnvBase

LIMIT = 3


class CountEnv(EnvBase):
    """A batched torchrl env: observation = steps into the episode, reward 1, truncated after ``LIMIT`` steps."""

    def __init__(self, num_envs: int, device="cpu"):
        super().__init__(batch_size=[num_envs], device=device)
        n = num_envs
        self.observation_spec = Composite(observation=Unbounded((n, 1), device=device), shape=(n,), device=device)
        self.action_spec = Categorical(2, shape=(n,), device=device)
        self.reward_spec = Unbounded((n, 1), device=device)
        flag = Categorical(2, shape=(n, 1), dtype=torch.bool, device=device)
        self.full_done_spec = Composite(done=flag, terminated=flag.clone(), truncated=flag.clone(), shape=(n,))
        self.count = torch.zeros(n, 1, device=device)
        self.seeds: list[int] = []

    def _reset(self, tensordict):
        if tensordict is not None and "_reset" in tensordict.keys():
            self.count[tensordict["_reset"].reshape(-1)] = 0
        else:
            self.count.zero_()
        flag = torch.zeros_like(self.count, dtype=torch.bool)
        return TensorDict(
            {"observation": self.count.clone(), "done": flag, "terminated": flag.clone(), "truncated": flag.clone()},
            batch_size=self.batch_size,
            device=self.device,
        )

    def _step(self, tensordict):
        self.count += 1
        truncated = self.count >= LIMIT
        return TensorDict(
            {
                "observation": self.count.clone(),
                "reward": torch.ones_like(self.count),
                "done": truncated.clone(),
                "terminated": torch.zeros_like(truncated),
                "truncated": truncated,
            },
            batch_size=self.batch_size,
            device=self.device,
        )

    def _set_seed(self, seed):
        self.seeds.append(seed)


class SuccessCountVectorEnv(gym.vector.VectorEnv):
    """A user's batched env speaking the env contract as ManiSkill3's ``ManiSkillVectorEnv`` does (tensors, same-step
    restarts, ``info["final_obs"]``), reporting ``success`` per env and step: observation = steps into the episode,
    reward 1, truncated after ``LIMIT`` steps; success on the even-numbered envs from their second step on, so half
    the episodes succeed, at their end and at some step alike. No value is read back to the host."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, device="cpu"):
        self.num_envs, self.device = num_envs, torch.device(device)
        self.single_observation_space = gym.spaces.Box(0.0, float(LIMIT), (1,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.count = torch.zeros(num_envs, 1, device=self.device)
        self.even = (torch.arange(num_envs, device=self.device) % 2 == 0)[:, None]

    def reset(self, *, seed=None, options=None):
        self.count.zero_()
        return self.count.clone(), {}

    def step(self, actions):
        self.count += 1
        success = (self.even & (self.count >= 2)).reshape(-1)
        truncated = (self.count >= LIMIT).reshape(-1)
        final_obs = self.count.clone()
        self.count = torch.where(truncated[:, None], 0.0, self.count)
        reward, terminated = torch.ones(self.num_envs, device=self.device), torch.zeros_like(truncated)
        info = {"final_obs": final_obs, "_final_obs": truncated, "success": success}
        return self.count.clone(), reward, terminated, truncated, info


class LegacyKeysVectorEnv(SuccessCountVectorEnv):
    """``SuccessCountVectorEnv`` reporting its ends as ManiSkill3's ``ManiSkillVectorEnv`` (3.0.1) does, in gymnasium
    0.29's keys: ``final_observation`` and ``final_info`` (the step's info before the restart) only at a step where an
    episode ended, and ``success`` of the restarted envs' new episodes."""

    #: Whether ``success`` is reported at every step, or in ``final_info`` only (at an episode's end).
    every_step = True

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        ended = {"final_observation": info.pop("final_obs"), "_final_observation": info.pop("_final_obs"),
                 "final_info": {"success": info.pop("success")}}  # fmt: skip
        if self.every_step:
            info["success"] = (self.even & (self.count >= 2)).reshape(-1)  # after the restart: the new episodes'
        return obs, reward, terminated, truncated, {**info, **ended} if bool(truncated.any()) else info


#: How ``BrokenContractVectorEnv`` breaks the contract (tests set it).
CONTRACT_MODE = ""


class BrokenContractVectorEnv(SuccessCountVectorEnv):
    """Breaks the contract as ``mode`` says: ``numpy`` observations as numpy arrays, ``wide`` ones of 2 values where
    the space has 1, ``reward_column`` rewards ``[N, 1]``, ``uint8_dones`` ``terminated`` as uint8, ``no_final``
    episodes that end without ``final_obs``."""

    def __init__(self, num_envs: int, device="cpu", mode=""):
        super().__init__(num_envs, device=device)
        self.mode = mode

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed, options=options)
        return {"numpy": obs.numpy(), "wide": obs.repeat(1, 2)}.get(self.mode, obs), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        if self.mode == "no_final":
            del info["final_obs"], info["_final_obs"]
        terminated = terminated.to(torch.uint8) if self.mode == "uint8_dones" else terminated
        return obs, reward[:, None] if self.mode == "reward_column" else reward, terminated, truncated, info


def make_legacy_keys_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: the batched ``LegacyKeysVectorEnv``."""
    return LegacyKeysVectorEnv(num_envs, device=device)


def make_success_at_end_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: a ``LegacyKeysVectorEnv`` that reports success in ``final_info`` only."""
    env = LegacyKeysVectorEnv(num_envs, device=device)
    env.every_step = False
    return env


def make_broken_contract_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: a ``BrokenContractVectorEnv`` breaking it as ``CONTRACT_MODE`` says."""
    return BrokenContractVectorEnv(num_envs, device=device, mode=CONTRACT_MODE)


class Factory:
    """A callable object as a factory (an instance's settings cannot be kept in a checkpoint by an import path)."""

    def __call__(self, env_id, num_envs, device, seed, max_episode_steps):
        return CountEnv(num_envs, device=device)

    def make(self, env_id, num_envs, device, seed, max_episode_steps):
        """An instance's method as a factory (kept as ``Factory.make``, it would come back without its instance)."""
        return CountEnv(num_envs, device=device)

    @staticmethod
    def make_static(env_id, num_envs, device, seed, max_episode_steps):
        """A static method as a factory (kept as ``Factory.make_static``, no module path imports it)."""
        return CountEnv(num_envs, device=device)


def make_success_count_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: the batched ``SuccessCountVectorEnv``."""
    return SuccessCountVectorEnv(num_envs, device=device)


def make_count_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: the batched torchrl ``CountEnv``."""
    return CountEnv(num_envs, device=device)


def make_three_envs(env_id, num_envs, device, seed, max_episode_steps):
    """A factory that ignores ``num_envs`` (the group refuses it)."""
    return CountEnv(3, device=device)


def make_nothing(env_id, num_envs, device, seed, max_episode_steps):
    """A factory that returns something that is not an env."""
    return {"num_envs": num_envs}


class FlakyCountEnv(CountEnv):
    """``CountEnv`` whose ``_step`` raises at its ``fail_at``-th step (``None``: never), as a simulator that loses its
    context would; with ``once``, only if no env of this process has failed yet."""

    def __init__(self, num_envs: int, device="cpu", fail_at: int | None = None, once: bool = False):
        super().__init__(num_envs, device=device)
        self.fail_at, self.once, self.steps = fail_at, once, 0

    def _step(self, tensordict):
        self.steps += 1
        if self.steps == self.fail_at and not (self.once and FAILED):
            FAILED.append(self)
            raise RuntimeError(f"simulator lost its context at step {self.steps}")
        return super()._step(tensordict)


#: The envs the flaky factories built in this process, in order, and those that raised.
BUILT: list[FlakyCountEnv] = []
FAILED: list[FlakyCountEnv] = []


def make_flaky_count_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: every env raises at its step ``FLAKY_FAIL_AT`` (from the environment; unset or 0: never)
    until one has, once per process: the rebuilt envs, and the evaluation envs after it, work."""
    import os

    fail_at = int(os.environ.get("FLAKY_FAIL_AT", "0")) or None
    BUILT.append(FlakyCountEnv(num_envs, device=device, fail_at=fail_at, once=True))
    return BUILT[-1]


def make_broken_count_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: every env built raises at its second step."""
    BUILT.append(FlakyCountEnv(num_envs, device=device, fail_at=2))
    return BUILT[-1]


class FaultVectorEnv(gym.vector.VectorEnv):
    """A batched env of the contract whose observations are ones (of ``dtype``) and whose every episode ends at every
    step, with faults chosen per build: a NaN final observation (``nan_final``), NaN first observations
    (``nan_reset``), a ``reset`` or ``step`` that raises (``fail_reset``, ``fail_step``)."""

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, num_envs: int, dtype=torch.float32, nan_final=False, nan_reset=False, fail_reset=False,
                 fail_step=False):  # fmt: skip
        self.num_envs, self.device, self.dtype = num_envs, torch.device("cpu"), dtype
        self.nan_final, self.nan_reset, self.fail_reset, self.fail_step = nan_final, nan_reset, fail_reset, fail_step
        self.single_observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.single_action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)

    def reset(self, *, seed=None, options=None):
        if self.fail_reset:
            raise RuntimeError("reset lost its context")
        obs = torch.ones(self.num_envs, 2, dtype=self.dtype)
        return obs * float("nan") if self.nan_reset else obs, {}

    def step(self, actions):
        if self.fail_step:
            raise RuntimeError("step lost its context")
        n = self.num_envs
        obs, ended = torch.ones(n, 2, dtype=self.dtype), torch.ones(n, dtype=torch.bool)
        final_obs = obs * float("nan") if self.nan_final else obs.clone()
        return obs, torch.ones(n), ended, torch.zeros_like(ended), {"final_obs": final_obs}


#: The faults of the ``FaultVectorEnv`` builds to come, in order (keyword arguments; none left: a working env).
FAULTS: list[dict] = []


def make_fault_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: a ``FaultVectorEnv`` with the next faults of ``FAULTS``."""
    BUILT.append(FaultVectorEnv(num_envs, **(FAULTS.pop(0) if FAULTS else {})))
    return BUILT[-1]
