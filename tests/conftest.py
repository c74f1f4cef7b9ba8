"""Shared fixtures: a scripted env whose every number is known in advance."""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

SCRIPTED_ID = "Scripted-v0"

if os.environ.get("PYTEST_XDIST_WORKER"):
    # `pytest -n 2` (the README's command) runs one test process per core: each takes one torch thread, and the
    # training runs its tests launch (train.py, the CLI, DDP ranks) inherit one OpenMP thread. Two threads per
    # process on two shared cores make each wait on the other (benchmarks/rsl_rl_ppo.py measured 0.3 s rollouts
    # taking 4 to 9 s that way).
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


class ScriptedEnv(gym.Env):
    """Observation = steps taken in the episode; reward = that step's index + 1.

    The episode terminates after ``episode_len`` steps and reports ``is_success`` when the
    length is even; ``max_episode_steps`` (the TimeLimit) truncates it earlier.
    """

    metadata = {"render_modes": []}

    def __init__(self, episode_len: int = 5):
        self.episode_len = episode_len
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.array([0.0], dtype=np.float32), {}

    def step(self, action):
        self.t += 1
        terminated = self.t >= self.episode_len
        info = {"is_success": self.episode_len % 2 == 0} if terminated else {}
        return np.array([float(self.t)], dtype=np.float32), float(self.t), terminated, False, info


if SCRIPTED_ID not in gym.registry:
    gym.register(SCRIPTED_ID, entry_point=ScriptedEnv)

SCRIPTED_SETS = {
    "train": [{"attrs": {"episode_len": 5}}],
    "test": [{"attrs": {"episode_len": 4}}],
}


class ObsValuePolicy(nn.Module):
    """Stub policy for the rollout protocol: action 0, log-prob 0, value = first obs feature, no memory."""

    def __init__(self):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros(1))

    def initial_state(self, batch_size, device=None):
        return None

    def act(self, obs, state=None, episode_start=None, deterministic=False, value=True):
        n = obs.shape[0]
        return torch.zeros(n, dtype=torch.long), torch.zeros(n), obs[:, 0].clone(), None

    def explore(self, obs, env_steps=0):
        return torch.zeros(obs.shape[0], dtype=torch.long)

    def value(self, obs, state=None, episode_start=None):
        return obs[:, 0].clone()


@pytest.fixture
def scripted_sets():
    return SCRIPTED_SETS
