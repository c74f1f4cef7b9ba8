"""Tests that the plain DQN loss equals torchrl's DQNLoss in value and gradients."""

import copy
import warnings

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from benchmarks.dqn_loss import to_torchrl_batch
from rl_lightning.algos import dqn_loss
from rl_lightning.nets import QValueNetwork

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.data import Categorical
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss, ValueEstimators


def _batch(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "obs": torch.randn(n, 4, generator=g),
            "action": torch.randint(3, (n,), generator=g),
            "reward": torch.randn(n, generator=g),
            "next_obs": torch.randn(n, 4, generator=g),
            "terminated": torch.rand(n, generator=g) < 0.3,
        },
        batch_size=[n],
    )


@pytest.mark.parametrize("double_dqn", [False, True])
@pytest.mark.parametrize(("ours", "theirs"), [("huber", "smooth_l1"), ("l2", "l2")])
def test_dqn_loss_matches_torchrl_dqn_loss(double_dqn, ours, theirs):
    """Test that dqn_loss gives the value and gradients of DQNLoss, with a target network that differs."""
    torch.manual_seed(0)
    net = QValueNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(3), hidden_sizes=(32, 32))
    reference = DQNLoss(
        QValueActor(net, in_keys=["observation"], spec=Categorical(3)),
        loss_function=theirs,
        delay_value=True,
        double_dqn=double_dqn,
    )
    reference.make_value_estimator(ValueEstimators.TD0, gamma=0.9)
    with torch.no_grad():  # move torchrl's target away from the online network, and ours with it
        reference.target_value_network_params.apply_(lambda p: p.add_(0.1 * torch.randn_like(p)))
    target = copy.deepcopy(net)
    with torch.no_grad():
        for p, value in zip(target.parameters(), reference.target_value_network_params.values(True, True), strict=True):
            p.copy_(value)
    batch = _batch()

    terms = dqn_loss(net, target, batch, 0.9, double_dqn, ours)
    terms.loss.backward()
    ours_grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    expected = reference(to_torchrl_batch(batch))["loss"]
    expected.backward()
    ref_grads = [p.grad.clone() for p in net.parameters()]

    torch.testing.assert_close(terms.loss.detach(), expected.detach(), rtol=1e-5, atol=1e-6)
    for a, b in zip(ours_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_double_dqn_lets_the_online_network_pick_the_next_action():
    """Test the double-DQN target by hand: the online argmax, valued by the target network."""
    online, target = torch.nn.Linear(1, 2), torch.nn.Linear(1, 2)
    with torch.no_grad():
        online.weight.zero_()
        target.weight.zero_()
        online.bias.copy_(torch.tensor([1.0, 0.0]))  # online prefers action 0 ...
        target.bias.copy_(torch.tensor([2.0, 5.0]))  # ... target values it at 2 (and action 1 at 5)
    batch = TensorDict(
        {
            "obs": torch.zeros(1, 1),
            "action": torch.zeros(1, dtype=torch.long),
            "reward": torch.zeros(1),
            "next_obs": torch.zeros(1, 1),
            "terminated": torch.zeros(1, dtype=torch.bool),
        },
        batch_size=[1],
    )
    # Q(s, 0) = 1; target r + gamma * Q_target(s', a'): a' = 0 (double) -> 2, a' = 1 (max) -> 5.
    double = dqn_loss(online, target, batch, gamma=1.0, double_dqn=True, loss_function="l2")
    plain = dqn_loss(online, target, batch, gamma=1.0, double_dqn=False, loss_function="l2")
    assert double.td_error.item() == pytest.approx(1.0) and double.loss.item() == pytest.approx(1.0)
    assert plain.td_error.item() == pytest.approx(4.0) and plain.loss.item() == pytest.approx(16.0)
