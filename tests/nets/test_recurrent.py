"""The recurrent actor-critic: state layout, resets at episode starts, sequence replay equal to step-by-step acting."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning.nets.recurrent import RecurrentActorCritic

OBS = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


def _policy(cell="lstm", shared_core=True, action_space=None, obs_space=OBS, encoder=None):
    torch.manual_seed(0)
    action_space = action_space or gym.spaces.Discrete(2)
    return RecurrentActorCritic(obs_space, action_space, hidden_sizes=(16,), recurrent_size=8, cell=cell,
                                shared_core=shared_core, normalize_obs=False, encoder=encoder)  # fmt: skip


@pytest.mark.parametrize("cell, shared, shape", [("lstm", True, (5, 2, 1, 8)), ("gru", False, (5, 1, 2, 8))])
def test_the_state_is_one_tensor_of_batch_parts_cores_and_width(cell, shared, shape):
    """Test that the state is [B, C, K, H], the env batch first (LSTM: h and c; separate cores: two), act returns
    the next one, and a state of None acts as the initial one."""
    policy = _policy(cell, shared)
    state = policy.initial_state(5)
    assert state.shape == shape and not state.any()
    action, log_prob, value, next_state = policy.act(torch.randn(5, 3), state, torch.zeros(5, dtype=torch.bool))
    assert action.shape == log_prob.shape == value.shape == (5,)
    assert next_state.shape == shape and next_state.abs().sum() > 0
    from_none = policy.act(torch.ones(5, 3), None, torch.ones(5, dtype=torch.bool), deterministic=True)
    from_zeros = policy.act(torch.ones(5, 3), state, torch.ones(5, dtype=torch.bool), deterministic=True)
    assert all(torch.equal(a, b) for a, b in zip(from_none, from_zeros, strict=True))


@pytest.mark.parametrize("cell", ["lstm", "gru"])
def test_an_episode_start_zeroes_the_state_before_the_step(cell):
    """Test that a step flagged as an episode start computes exactly what a fresh state gives, whatever came before."""
    policy = _policy(cell)
    obs = torch.randn(4, 2, 3)
    state = policy.initial_state(2)
    for t in range(3):  # some history
        *_, state = policy.act(obs[t], state, torch.zeros(2, dtype=torch.bool))
    starts = torch.tensor([True, False])
    _, lp, v, after = policy.act(obs[3], state, starts, deterministic=True)
    fresh = policy.initial_state(2)
    _, lp_fresh, v_fresh, after_fresh = policy.act(obs[3], fresh, torch.ones(2, dtype=torch.bool), deterministic=True)
    assert torch.equal(lp[0], lp_fresh[0]) and torch.equal(v[0], v_fresh[0])
    assert torch.equal(after[0], after_fresh[0])
    assert not torch.allclose(v[1], v_fresh[1])  # env 1 kept its memory


@pytest.mark.parametrize("cell, shared", [("lstm", True), ("lstm", False), ("gru", True)])
@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)])
def test_replaying_a_sequence_gives_the_log_probs_and_values_of_acting_step_by_step(cell, shared, action_space):
    """Test that evaluate_actions over sequences [T, B] from their first state equals act at every step, across
    episode starts (so PPO's first-epoch ratio is 1)."""
    policy = _policy(cell, shared, action_space)
    T, B = 7, 3
    obs = torch.randn(T, B, 3)
    starts = torch.zeros(T, B, dtype=torch.bool)
    starts[0] = True
    starts[3, 0] = starts[5, 2] = True
    state0 = state = policy.initial_state(B)
    actions, log_probs, values = [], [], []
    with torch.no_grad():
        for t in range(T):
            a, lp, v, state = policy.act(obs[t], state, starts[t])
            actions.append(a), log_probs.append(lp), values.append(v)
    lp, entropy, v = policy.evaluate_actions(obs, torch.stack(actions), starts, state0)
    torch.testing.assert_close(lp, torch.stack(log_probs), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(v, torch.stack(values), atol=1e-6, rtol=1e-5)
    assert entropy.shape == (T, B) and (entropy > 0).all()
    lp.sum().backward()  # gradients reach the core through time
    assert policy.cores[0].weight_hh_l0.grad.abs().sum() > 0


def test_separate_cores_keep_the_policy_independent_of_the_critic_core():
    """Test that with shared_core=False changing the critic's core moves the values and leaves the log-probs."""
    policy = _policy("lstm", shared_core=False)
    obs, state, starts = torch.randn(4, 3), policy.initial_state(4), torch.zeros(4, dtype=torch.bool)
    _, lp, v, _ = policy.act(obs, state, starts, deterministic=True)
    with torch.no_grad():
        policy.cores[1].weight_ih_l0.add_(1.0)
    _, lp2, v2, _ = policy.act(obs, state, starts, deterministic=True)
    assert torch.equal(lp, lp2) and not torch.allclose(v, v2)


def test_images_and_dicts_go_through_the_encoder_before_the_core():
    """Test that a Dict of an image and a vector acts and replays with the encoder's features as the core's input."""
    space = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (3, 8, 8), np.uint8), "pos": gym.spaces.Box(-1, 1, (2,), np.float32)}
    )
    small_cnn = {"cnn_channels": [4, 8], "cnn_kernels": [2, 2], "cnn_strides": [1, 1], "cnn_features": 16}
    policy = _policy(obs_space=space, encoder=small_cnn)
    assert policy.encoder is not None and policy.cores[0].input_size == policy.encoder.features_dim
    obs = TensorDict({"image": torch.randint(0, 255, (2, 3, 8, 8), dtype=torch.uint8), "pos": torch.randn(2, 2)}, [2])
    action, *_, state = policy.act(obs, policy.initial_state(2), torch.ones(2, dtype=torch.bool))
    assert action.shape == (2,) and state.shape == (2, 2, 1, 8)


def test_bad_settings_are_refused_with_the_fix():
    """Test that an unknown cell and a bad width are refused, naming the setting."""
    with pytest.raises(ValueError, match="cell must be one of"):
        RecurrentActorCritic(OBS, gym.spaces.Discrete(2), cell="rnn")
    with pytest.raises(ValueError, match="recurrent_size must be a positive integer"):
        RecurrentActorCritic(OBS, gym.spaces.Discrete(2), recurrent_size=0)
