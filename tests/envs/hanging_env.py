"""An env that stops answering inside an async worker process (as a simulator that deadlocks after fork does)."""

from __future__ import annotations

import multiprocessing
import time

import gymnasium as gym
import numpy as np

HANGING_ID = "Hanging-v0"


class HangingEnv(gym.Env):
    """A one-number env that, in a worker process only, sleeps for an hour in its constructor (``hang="start"``) or
    in its third ``step`` (``hang="step"``); in the main process it runs."""

    metadata = {"render_modes": []}

    def __init__(self, hang: str = "start"):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.hang, self.steps = hang, 0
        if hang == "start" and multiprocessing.parent_process() is not None:
            time.sleep(3600)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {}

    def step(self, action):
        self.steps += 1
        if self.hang == "step" and self.steps == 3 and multiprocessing.parent_process() is not None:
            time.sleep(3600)
        return np.zeros(1, dtype=np.float32), 0.0, False, False, {}


if HANGING_ID not in gym.registry:
    gym.register(HANGING_ID, entry_point=HangingEnv)
