"""SAC's networks on image and Dict observations: one encoder for the actor, one for the critics."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning import SAC
from rl_lightning.algos.sac_loss import sac_loss
from rl_lightning.nets.sac import check_continuous_spaces

DICT = gym.spaces.Dict(
    {"image": gym.spaces.Box(0, 255, (3, 36, 36), np.uint8), "state": gym.spaces.Box(-1, 1, (3,), np.float32)}
)
ACTION = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
CNN = {"cnn_channels": [8, 8], "cnn_kernels": [4, 3], "cnn_strides": [2, 1], "cnn_features": 32}


def _model():
    torch.manual_seed(0)
    model = SAC(encoder=CNN, hidden_sizes=[16, 16])
    model.policy = model.build_policy(DICT, ACTION)
    return model


def _batch(n=8):
    obs = lambda: {"image": torch.randint(0, 256, (n, 3, 36, 36), dtype=torch.uint8), "state": torch.randn(n, 3)}  # noqa: E731
    return {
        "obs": obs(), "next_obs": obs(), "action": torch.rand(n, 2) * 2 - 1, "reward": torch.randn(n),
        "terminated": torch.zeros(n, dtype=torch.bool),
    }  # fmt: skip


def _grads(module):
    return [p.grad for p in module.parameters()]


def test_actor_and_critics_have_their_own_encoders_trained_by_their_own_losses():
    """Test that the actor's and the critics' encoders share no parameter, that the actor loss trains only the
    actor's encoder (the critics held fixed) and the critic loss only the critics' (SB3's per-network extractors)."""
    model = _model()
    actor_encoder, critic_encoder = model.policy.encoder, model.critics.encoder
    assert actor_encoder is not None and critic_encoder is not None
    assert {id(p) for p in actor_encoder.parameters()}.isdisjoint(id(p) for p in critic_encoder.parameters())
    assert model.target_critics.encoder is not critic_encoder
    terms = sac_loss(model.policy, model.critics, model.target_critics, model.log_alpha, _batch(), 0.99, -2.0)
    terms.loss_actor.backward(retain_graph=True)
    assert all(g is not None and g.abs().sum() > 0 for g in _grads(actor_encoder))
    assert all(g is None or g.abs().sum() == 0 for g in _grads(critic_encoder))
    model.zero_grad(set_to_none=True)
    terms.loss_qvalue.backward()
    assert all(g is not None and g.abs().sum() > 0 for g in _grads(critic_encoder))
    assert all(g is None for g in _grads(actor_encoder))


def test_polyak_update_moves_the_target_critics_encoder():
    """Test that the target critics' encoder follows the critics' by Polyak averaging like the rest of them."""
    model = _model()
    with torch.no_grad():
        for p in model.critics.encoder.parameters():
            p.add_(1.0)
    before = [p.detach().clone() for p in model.target_critics.encoder.parameters()]
    model.update_targets()
    tau = model.hparams.tau
    for old, new in zip(before, model.target_critics.encoder.parameters(), strict=True):
        torch.testing.assert_close(new, old + tau * 1.0, rtol=1e-4, atol=1e-5)


def test_actions_stay_in_bounds_for_dict_observations():
    """Test that exploration and deterministic actions for Dict observations are in the action bounds."""
    model = _model()
    obs = _batch(64)["obs"]
    for action in (model.policy.explore(obs), model.policy.act(obs)[0]):
        assert action.shape == (64, 2) and action.abs().max() <= 1.0


def test_action_bounds_must_be_finite_with_room_in_every_dimension():
    """Test that an action space with infinite bounds, or a dimension with high == low (its log-probability would be
    +inf), is refused naming the space and the fix."""
    obs = gym.spaces.Box(-1, 1, (3,), np.float32)
    for action in (gym.spaces.Box(np.array([-1.0, 0.5]), np.array([1.0, 0.5])), gym.spaces.Box(-np.inf, np.inf, (2,))):
        with pytest.raises(ValueError, match="finite with high > low in every dimension.*ActionWrapper"):
            check_continuous_spaces(obs, action)
    check_continuous_spaces(obs, ACTION)  # a proper Box passes
