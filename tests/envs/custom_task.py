"""A user's own env package, as the custom-env tests import it: registering ``custom_task/Pole-v0`` on import.

Deliberately not imported by the test suite itself: the tests name it as ``module:id``
(``tests.envs.custom_task:custom_task/Pole-v0``), and the library imports it.
"""

import gymnasium as gym

#: The id this module registers.
ENV_ID = "custom_task/Pole-v0"

if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point="gymnasium.envs.classic_control.cartpole:CartPoleEnv", max_episode_steps=50)
