"""A task where a privileged critic matters: name the shown cue, while a payout offset the policy cannot use
swamps the reward.

Each step shows a cue (one of 4, one-hot under ``"cue"``) and pays 1 for the action that names it, plus an
offset of ``+-noise_scale`` drawn at random for that step and shown under ``"offset"``. The offset does not
depend on the action, so the policy gains nothing from it (and, given ``actor_keys=[cue]``, never reads it);
but a critic that does not read it cannot predict the reward, and its advantages carry the offset's variance
(4 against the action's 0.19 at the default scale). A critic that reads it (``critic_keys=[cue, offset]``)
subtracts it out: the asymmetric actor-critic of Pinto et al. (2017), "Asymmetric Actor Critic for Image-Based
Robot Learning". Episodes last 8 steps. Registered on import as ``privileged_task/CueOffset-v0``; ``module:id``:
``tests.envs.privileged_task:privileged_task/CueOffset-v0``.
"""

import gymnasium as gym
import numpy as np

ENV_ID = "privileged_task/CueOffset-v0"


class CueOffsetEnv(gym.Env):
    """Name the cue; each step's reward also carries an offset shown only under ``"offset"``.

    Args:
        noise_scale: Size of the offset (``+-noise_scale``, each sign with probability 1/2).
    """

    def __init__(self, noise_scale: float = 5.0, length: int = 1):
        self.length = int(length)
        self.noise_scale = float(noise_scale)
        self.action_space = gym.spaces.Discrete(4)
        self.observation_space = gym.spaces.Dict(
            {
                "cue": gym.spaces.Box(0.0, 1.0, (4,), np.float32),
                "offset": gym.spaces.Box(-self.noise_scale, self.noise_scale, (1,), np.float32),
            }
        )

    def _draw(self):
        self._cue = int(self.np_random.integers(4))
        self._offset = self.noise_scale * float(self.np_random.choice([-1.0, 1.0]))
        cue = np.zeros(4, np.float32)
        cue[self._cue] = 1.0
        return {"cue": cue, "offset": np.array([self._offset], np.float32)}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._t = 0
        return self._draw(), {}

    def step(self, action):
        reward = float(int(action) == self._cue) + self._offset
        self._t += 1
        return self._draw(), reward, self._t >= self.length, False, {}  # a fixed-length task


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=CueOffsetEnv)
