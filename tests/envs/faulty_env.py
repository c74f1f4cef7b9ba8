"""``FaultyEnv``: a scripted env that injects one fault (an exception, a dying process, a NaN, a huge value).

Registered as ``Faulty-v0`` on import; its keyword arguments go in through an object set's
``make_kwargs``. Async workers are forked on Linux, so they inherit the registration.
"""

from __future__ import annotations

import os

import gymnasium as gym
import numpy as np

FAULTY_ID = "Faulty-v0"
EPISODE_LEN = 5


NOT_IN_STEP = ("none", "reset", "exit_reset", "nan_reset_obs", "close")  # the faults injected elsewhere


class FaultyEnv(gym.Env):
    """Observation = steps taken in the episode, reward 1 per step, terminates after 5 steps.

    At step ``at`` of an episode it injects ``fault``: ``"step"`` raises, ``"exit"`` kills its process
    (``os._exit``), ``"nan_reward"``, ``"nan_obs"``, ``"inf_obs"``, ``"big_obs"`` (1e6) and ``"huge_obs"`` (1e40:
    finite in a ``dtype="float64"`` space, inf in float32) return a bad value, ``"wide_obs"`` an observation of two
    entries and ``"vector_reward"`` a reward of two; ``"reset"`` raises, ``"exit_reset"``
    exits and ``"nan_reset_obs"`` returns NaN in ``reset`` instead; ``"close"`` raises in ``close``.
    ``fail_every=k`` restricts the fault to every k-th episode of each instance. With ``once_file`` the fault fires
    once over all instances and processes: for the ``nth`` env to get there (numbered ticket files), so a recreated
    env or a rebuilt worker does not fail again.
    """

    metadata = {"render_modes": []}

    def __init__(self, fault="none", at=3, fail_every=None, once_file=None, nth=1, dtype="float32"):
        self.fault, self.at, self.fail_every, self.once_file, self.nth = fault, at, fail_every, once_file, nth
        self.dtype = np.dtype(dtype)
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=self.dtype)
        self.action_space = gym.spaces.Discrete(2)
        self.t = 0
        self.episode = 0

    def _due(self) -> bool:
        if self.fail_every is not None and self.episode % self.fail_every:
            return False
        if self.once_file is None:
            return True
        # Take the next free ticket ``once_file.<n>``: exclusive creation is atomic across processes.
        n = 1
        while True:
            try:
                os.close(os.open(f"{self.once_file}.{n}", os.O_CREAT | os.O_EXCL))
                return n == self.nth
            except FileExistsError:
                n += 1

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.episode = 0, self.episode + 1
        if self.fault in ("reset", "exit_reset") and self._due():
            if self.fault == "exit_reset":
                os._exit(1)
            raise RuntimeError("reset failed")
        value = np.nan if self.fault == "nan_reset_obs" and self._due() else 0.0
        return np.array([value], dtype=self.dtype), {}

    def close(self):
        if self.fault == "close":
            raise RuntimeError("close failed")

    def step(self, action):
        self.t += 1
        obs, reward = float(self.t), 1.0
        if self.t == self.at and self.fault not in NOT_IN_STEP and self._due():
            if self.fault == "step":
                raise RuntimeError(f"boom at step {self.t}")
            if self.fault == "exit":
                os._exit(1)
            if self.fault == "nan_reward":
                reward = float("nan")
            if self.fault in ("wide_obs", "vector_reward"):  # what the space and a reward's contract do not allow
                wide = np.array([obs, obs], dtype=self.dtype)
                obs, reward = (wide, reward) if self.fault == "wide_obs" else (wide[:1], wide)
                return obs, reward, False, False, {}
            obs = {"nan_obs": np.nan, "inf_obs": np.inf, "big_obs": 1e6, "huge_obs": 1e40}.get(self.fault, obs)
        return np.array([obs], dtype=self.dtype), reward, self.t >= EPISODE_LEN, False, {}


if FAULTY_ID not in gym.registry:
    gym.register(FAULTY_ID, entry_point=FaultyEnv)


def faulty_sets(**fault) -> dict:
    """Object sets (train and test) whose one variation makes a ``FaultyEnv`` with these arguments."""
    return {"train": [{"make_kwargs": fault}], "test": [{"make_kwargs": fault}]}
