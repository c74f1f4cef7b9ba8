"""KeepEntries: a partially observed task from a fully observed one."""

import gymnasium as gym
import numpy as np
import pytest

from rl_lightning.envs.partial_obs import KeepEntries


def test_cartpole_without_velocities_keeps_position_and_angle():
    """Test that indices [0, 2] give CartPole's position and angle, with their bounds, step after step."""
    full, masked = gym.make("CartPole-v1"), KeepEntries(gym.make("CartPole-v1"), [0, 2])
    obs_full, _ = full.reset(seed=3)
    obs, _ = masked.reset(seed=3)
    assert masked.observation_space.shape == (2,)
    np.testing.assert_array_equal(masked.observation_space.high, full.observation_space.high[[0, 2]])
    np.testing.assert_array_equal(obs, obs_full[[0, 2]])
    for _ in range(5):
        obs_full, *_ = full.step(1)
        obs, *_ = masked.step(1)
        np.testing.assert_array_equal(obs, obs_full[[0, 2]])


@pytest.mark.parametrize("indices", [[4], [], [-1]])
def test_out_of_range_indices_are_refused_with_the_valid_range(indices):
    """Test that an index outside 0..3 (or none) names the valid range."""
    with pytest.raises(ValueError, match=r"0\.\.3"):
        KeepEntries(gym.make("CartPole-v1"), indices)
