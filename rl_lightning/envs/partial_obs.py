"""Partially observed versions of fully observed tasks: keep some entries of a vector observation.

``KeepEntries(env, indices=[0, 2])`` on CartPole keeps the cart position and the pole angle: the CartPole of
sb3-contrib's ``RecurrentPPO`` tests and RL-Zoo's ``CartPoleNoVel-v1`` (their ``MaskVelocityWrapper`` zeroes the
velocities; dropping them is the same information), which only a recurrent policy solves (``+experiment=ppo_lstm``).
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np


class KeepEntries(gym.ObservationWrapper):
    """A 1-D ``Box`` observation cut down to the entries at ``indices`` (in that order); other spaces, or an index
    out of range, are refused naming the valid ones."""

    def __init__(self, env: gym.Env, indices: Sequence[int]):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"KeepEntries needs a 1-D Box observation, got {space}; use it on vector observations.")
        indices = [int(i) for i in indices]
        bad = [i for i in indices if not 0 <= i < space.shape[0]]
        if not indices or bad:
            raise ValueError(
                f"KeepEntries indices={indices}: each must lie in 0..{space.shape[0] - 1} (the observation has "
                f"{space.shape[0]} entries), and at least one is needed."
            )
        self.indices = np.asarray(indices)
        self.observation_space = gym.spaces.Box(space.low[self.indices], space.high[self.indices], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """The kept entries."""
        return observation[self.indices]
