"""Users' batched envs for the tests of ``env.env_factory`` (imported by path, as a user's module would be)."""

from __future__ import annotations

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


def make_count_envs(env_id, num_envs, device, seed, max_episode_steps):
    """``env.env_factory``: the batched torchrl ``CountEnv``."""
    return CountEnv(num_envs, device=device)


def make_three_envs(env_id, num_envs, device, seed, max_episode_steps):
    """A factory that ignores ``num_envs`` (the group refuses it)."""
    return CountEnv(3, device=device)


def make_nothing(env_id, num_envs, device, seed, max_episode_steps):
    """A factory that returns something that is not an env."""
    return {"num_envs": num_envs}
