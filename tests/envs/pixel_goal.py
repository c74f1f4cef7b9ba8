"""A small ``Dict``-observation task with an image: the CI-sized learning test of the encoder path.

The agent walks on a ``size x size`` grid towards a goal it sees only in a uint8 image
(``HxWxC``, one channel, 255 at the goal); its own position comes as a float vector.
Reaching the goal pays +1 and ends the episode; every step costs 0.01; the time limit
truncates. Solving it needs both keys: the image says where the goal is, the vector where
the agent is. Registered as ``pixel_goal/PixelGoal-v0`` on import (``module:id``:
``tests.envs.pixel_goal:pixel_goal/PixelGoal-v0``).
"""

import gymnasium as gym
import numpy as np

#: The id this module registers.
ENV_ID = "pixel_goal/PixelGoal-v0"

_MOVES = np.array([[0, 1], [0, -1], [1, 0], [-1, 0]])


class PixelGoalEnv(gym.Env):
    """Grid walk to a goal seen in an image.

    Args:
        size: Grid side (the image is ``size x size x 1``).
        nan_at: Episode step whose position is NaN (the tests of the NaN checks); ``None``: never.
        position_scale: Factor on the position vector (the tests of ``obs_bound``).
        continuous: Actions are a ``Box(-1, 1, (2,))`` (SAC's tests): each entry beyond 1/3 in
            size moves the agent one cell along its axis, so a diagonal step is one action.
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(
        self,
        size: int = 5,
        nan_at: int | None = None,
        position_scale: float = 1.0,
        continuous: bool = False,
        render_mode=None,
    ):
        self.size, self.continuous = size, continuous
        self.nan_at, self.position_scale = nan_at, position_scale
        self._t = 0
        self.render_mode = render_mode
        self.observation_space = gym.spaces.Dict(
            {
                "image": gym.spaces.Box(0, 255, (size, size, 1), np.uint8),
                "position": gym.spaces.Box(0.0, position_scale, (2,), np.float32),
            }
        )
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32) if continuous else gym.spaces.Discrete(4)

    def _obs(self):
        image = np.zeros((self.size, self.size, 1), np.uint8)
        image[self._goal[0], self._goal[1], 0] = 255
        position = (self.position_scale * self._agent / (self.size - 1)).astype(np.float32)
        if self._t == self.nan_at:
            position[1] = np.nan
        return {"image": image, "position": position}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        self._agent = self.np_random.integers(0, self.size, 2)
        self._goal = self._agent
        while (self._goal == self._agent).all():
            self._goal = self.np_random.integers(0, self.size, 2)
        return self._obs(), {}

    def step(self, action):
        self._t += 1
        if self.continuous:
            move = np.sign(action) * (np.abs(action) > 1 / 3)
        else:
            move = _MOVES[int(action)]
        self._agent = np.clip(self._agent + move.astype(int), 0, self.size - 1)
        reached = bool((self._agent == self._goal).all())
        return self._obs(), (1.0 if reached else -0.01), reached, False, {"is_success": reached}

    def render(self):
        frame = np.zeros((self.size, self.size, 3), np.uint8)
        frame[self._goal[0], self._goal[1]] = (0, 255, 0)
        frame[self._agent[0], self._agent[1]] = (255, 0, 0)
        return np.kron(frame, np.ones((16, 16, 1), np.uint8))


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=PixelGoalEnv, max_episode_steps=20)
