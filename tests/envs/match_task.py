"""A task with multi-discrete or multi-binary actions: repeat the target the observation shows.

Each step shows a random target (one entry per action dimension, one-hot encoded in the
observation) and pays the fraction of action entries that equal it; episodes last 8 steps.
A policy that reads the observation earns 1 per step, a random one ``mean(1 / n_i)``.
Registered on import as ``match_task/MultiDiscrete-v0`` (``MultiDiscrete([3, 2, 4], start=[1, 0, -2])``,
the env's values shifted by ``start``) and ``match_task/MultiBinary-v0`` (``MultiBinary(4)``);
``module:id``: ``tests.envs.match_task:match_task/MultiDiscrete-v0``.
"""

import gymnasium as gym
import numpy as np


class MatchEnv(gym.Env):
    """Repeat the shown target.

    Args:
        binary: ``MultiBinary(4)`` actions instead of ``MultiDiscrete([3, 2, 4], start=[1, 0, -2])``.
    """

    def __init__(self, binary: bool = False):
        self.binary = binary
        if binary:
            self.action_space = gym.spaces.MultiBinary(4)
            self.nvec, self.start = np.full(4, 2), np.zeros(4, np.int64)
        else:
            self.action_space = gym.spaces.MultiDiscrete([3, 2, 4], start=[1, 0, -2])
            self.nvec, self.start = self.action_space.nvec, self.action_space.start
        self.observation_space = gym.spaces.Box(0.0, 1.0, (int(self.nvec.sum()),), np.float32)

    def _obs(self):
        obs = np.zeros(int(self.nvec.sum()), np.float32)
        obs[np.concatenate([[0], np.cumsum(self.nvec)[:-1]]) + self._target] = 1.0
        return obs

    def _draw(self):
        self._target = np.array([self.np_random.integers(n) for n in self.nvec])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._draw()
        return self._obs(), {}

    def step(self, action):
        assert self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)), action
        reward = float(np.mean(np.asarray(action) - self.start == self._target))
        self._t += 1
        self._draw()
        return self._obs(), reward, False, self._t >= 8, {}


for env_id, binary in (("match_task/MultiDiscrete-v0", False), ("match_task/MultiBinary-v0", True)):
    if env_id not in gym.registry:
        gym.register(id=env_id, entry_point=MatchEnv, kwargs={"binary": binary})
