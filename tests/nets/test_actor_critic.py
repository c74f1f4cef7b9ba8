"""Tests for the actor-critic networks."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.nets import ActorCritic

BOX4 = gym.spaces.Box(-np.inf, np.inf, (4,))


@pytest.mark.parametrize(
    "action_space, action_shape",
    [(gym.spaces.Discrete(3), (8,)), (gym.spaces.Box(-1, 1, (2,)), (8, 2))],
)
def test_act_and_evaluate_shapes_agree(action_space, action_shape):
    """Test act/evaluate_actions shapes, and that they agree on log-probabilities and values."""
    torch.manual_seed(0)
    policy = ActorCritic(BOX4, action_space)
    obs = torch.randn(8, 4)
    action, log_prob, value = policy.act(obs)
    assert action.shape == action_shape and log_prob.shape == (8,) and value.shape == (8,)
    log_prob2, entropy, value2 = policy.evaluate_actions(obs, action)
    torch.testing.assert_close(log_prob, log_prob2)
    torch.testing.assert_close(value, value2)
    assert entropy.shape == (8,) and (entropy > 0).all()


def test_deterministic_action_is_the_mode():
    """Test that deterministic acting returns argmax for discrete and the mean for continuous."""
    torch.manual_seed(0)
    obs = torch.randn(16, 4)
    discrete = ActorCritic(BOX4, gym.spaces.Discrete(3))
    assert torch.equal(discrete(obs), discrete.actor(discrete._features(obs)).argmax(-1))
    continuous = ActorCritic(BOX4, gym.spaces.Box(-1, 1, (2,)))
    torch.testing.assert_close(continuous(obs), continuous.actor(continuous._features(obs)))


def test_orthogonal_init_scales_policy_head():
    """Test that the policy head starts near-uniform (gain 0.01) per the PPO details."""
    policy = ActorCritic(BOX4, gym.spaces.Discrete(2))
    assert policy.actor[-1].weight.abs().max() < 0.05
    assert policy.critic[-1].weight.abs().max() > 0.1


@pytest.mark.parametrize(
    "obs_space, act_space, match",
    [
        (gym.spaces.Discrete(3), gym.spaces.Discrete(2), "Box observation space"),
        (BOX4, gym.spaces.MultiDiscrete([2, 2]), "Discrete or 1-D Box action"),
    ],
)
def test_unsupported_spaces_rejected(obs_space, act_space, match):
    """Test that unsupported spaces raise a clear TypeError."""
    with pytest.raises(TypeError, match=match):
        ActorCritic(obs_space, act_space)
