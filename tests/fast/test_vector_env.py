"""``SameStepSyncVectorEnv`` returns what gymnasium's ``SyncVectorEnv`` (``SAME_STEP``) returns, step by step."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from rl_lightning.fast.vector_env import SameStepSyncVectorEnv


class InfoEnv(gym.Env):
    """Random observations; infos with scalars, arrays and a nested dict that come and go; episodes of 2 to 6 steps."""

    def __init__(self, dict_obs: bool = False, actions: gym.Space | None = None):
        box = gym.spaces.Box(-1.0, 1.0, shape=(3,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict({"x": box}) if dict_obs else box
        self.action_space = actions if actions is not None else gym.spaces.Discrete(3)
        self.dict_obs = dict_obs

    def _obs(self):
        x = self.np_random.uniform(-1, 1, size=3).astype(np.float32)
        return {"x": x} if self.dict_obs else x

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, int(self.np_random.integers(2, 7))
        return self._obs(), {"start": float(self.np_random.uniform())}

    def step(self, action):
        self.t += 1
        info = {}
        if self.t % 2:
            info["count"] = self.t
        if self.t % 3 == 0:
            info["vec"] = np.full(2, self.t, dtype=np.float32)
            info["nested"] = {"flag": True}
        done = self.t >= self.length
        terminated = done and bool(self.np_random.integers(2))
        return self._obs(), float(np.sum(action)), terminated, done and not terminated, info


def assert_same(a, b, where: str) -> None:
    """Recursive equality of step outputs: tuples, arrays (object arrays of arrays too), dicts, scalars."""
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}[{key!r}]")
    elif isinstance(a, np.ndarray) and a.dtype == object:
        assert isinstance(b, np.ndarray) and b.dtype == object and a.shape == b.shape, where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, f"{where}: {type(b)} {getattr(b, 'dtype', '')}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    else:
        assert type(a) is type(b) and a == b, f"{where}: {a!r} != {b!r}"


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: gym.make("CartPole-v1", max_episode_steps=20), id="cartpole-discrete"),
        pytest.param(lambda: gym.make("Pendulum-v1", max_episode_steps=15), id="pendulum-box"),
        pytest.param(lambda: InfoEnv(), id="infos"),
        pytest.param(lambda: InfoEnv(actions=gym.spaces.Box(-1.0, 1.0, shape=(2,))), id="infos-box-actions"),
        pytest.param(lambda: InfoEnv(actions=gym.spaces.MultiDiscrete([2, 3])), id="multidiscrete-actions"),
        pytest.param(lambda: InfoEnv(actions=gym.spaces.MultiBinary(4)), id="multibinary-actions"),
        pytest.param(lambda: InfoEnv(dict_obs=True), id="dict-obs-fallback"),
    ],
)
def test_steps_equal_gymnasium_same_step(make):
    num_envs, steps = 3, 120
    ours = SameStepSyncVectorEnv([make] * num_envs)
    reference = SyncVectorEnv([make] * num_envs, autoreset_mode=AutoresetMode.SAME_STEP)
    assert ours._lean is not isinstance(ours.single_observation_space, gym.spaces.Dict)  # the path under test
    assert_same(ours.reset(seed=7), reference.reset(seed=7), "reset")
    ours.action_space.seed(3)
    ends = 0
    for t in range(steps):
        actions = ours.action_space.sample()
        got, want = ours.step(actions), reference.step(actions)
        assert_same(got, want, f"step {t}")
        assert_same(tuple(ours._env_obs), tuple(reference._env_obs), f"env obs {t}")
        assert_same(ours._autoreset_envs, reference._autoreset_envs, f"autoreset {t}")
        ends += int((want[2] | want[3]).sum())
    assert ends >= 10  # the autoreset path ran many times
    # A masked reset (what EnvGroup does for an env it cuts short) then steps alike too.
    mask = np.array([True, False, True])
    assert_same(ours.reset(options={"reset_mask": mask}), reference.reset(options={"reset_mask": mask}), "masked")
    actions = ours.action_space.sample()
    assert_same(ours.step(actions), reference.step(actions), "after masked reset")


def test_returned_observations_are_copies_unless_copy_is_false():
    envs = SameStepSyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    envs.reset(seed=0)
    first = envs.step(np.array([0, 1]))[0]
    kept = first.copy()
    envs.step(np.array([1, 0]))
    np.testing.assert_array_equal(first, kept)  # the next step did not write into it
    shared = SameStepSyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2, copy=False)
    shared.reset(seed=0)
    assert shared.step(np.array([0, 1]))[0] is shared.step(np.array([1, 0]))[0]


class BadObsEnv(gym.Env):
    """A ``Box(3,)`` uint8 env whose step returns a float observation, or one of the wrong shape."""

    def __init__(self, bad: str):
        self.observation_space = gym.spaces.Box(0, 255, shape=(3,), dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(2)
        self.bad = bad

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, dtype=np.uint8), {}

    def step(self, action):
        obs = np.full(3, 1.5) if self.bad == "float" else np.ones(1, dtype=np.uint8)
        return obs, 0.0, False, False, {}


@pytest.mark.parametrize(("bad", "error"), [("float", TypeError), ("shape", ValueError)])
def test_observations_gymnasium_refuses_are_refused(bad, error):
    """Test that a float observation in an integer space, or one of the wrong shape, raises as in gymnasium.

    Neither is cast or broadcast into the batch.
    """
    for envs in (
        SameStepSyncVectorEnv([lambda: BadObsEnv(bad)] * 2),
        SyncVectorEnv([lambda: BadObsEnv(bad)] * 2, autoreset_mode=AutoresetMode.SAME_STEP),
    ):
        envs.reset(seed=0)
        with pytest.raises(error):
            envs.step(np.array([0, 1]))


def test_wrong_number_of_actions_names_the_shape():
    envs = SameStepSyncVectorEnv([lambda: gym.make("CartPole-v1")] * 2)
    envs.reset(seed=0)
    with pytest.raises(ValueError, match=r"actions for 2 envs.*\(3,\)"):
        envs.step(np.array([0, 1, 0]))
