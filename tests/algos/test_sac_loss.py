"""Tests that the plain SAC loss and its networks equal torchrl's SACLoss and TanhNormal, values and gradients."""

import copy
import math
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from benchmarks.dqn_loss import to_torchrl_batch
from rl_lightning.algos.sac_loss import sac_loss
from rl_lightning.nets.sac import QEnsemble, QNetwork, SquashedGaussianActor, squashed_gaussian_sample

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, ValueEstimators

OBS_SPACE = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
# Asymmetric bounds: the affine part of the squashing is not a plain scale.
ACTION_SPACE = gym.spaces.Box(np.array([-2.0, 0.0], np.float32), np.array([2.0, 0.5], np.float32))


def _batch(n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "obs": torch.randn(n, 3, generator=g),
            "action": torch.rand(n, 2, generator=g) * torch.tensor([4.0, 0.5]) - torch.tensor([2.0, 0.0]),
            "reward": torch.randn(n, generator=g),
            "next_obs": torch.randn(n, 3, generator=g),
            "terminated": torch.rand(n, generator=g) < 0.3,
        },
        batch_size=[n],
    )


def _critic_networks(critics: QEnsemble) -> list[QNetwork]:
    """``QNetwork`` s holding the ensemble's slices (torchrl's loss stacks them again)."""
    nets = []
    for i in range(critics.num_nets):
        net = QNetwork(3, 2, (32, 32))
        linears = [m for m in net.net if isinstance(m, torch.nn.Linear)]
        with torch.no_grad():
            for linear, layer in zip(linears, critics.layers, strict=True):
                linear.weight.copy_(layer.weight[i])
                linear.bias.copy_(layer.bias[i])
        nets.append(net)
    return nets


def _reference(policy, critics, target_critics, init_alpha, gamma, target_entropy) -> SACLoss:
    """torchrl's ``SACLoss`` over the same actor, critics and targets (how SAC built it before the plain loss)."""
    actor = ProbabilisticActor(
        TensorDictModule(policy.net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": policy.low, "high": policy.high},
        return_log_prob=True,
    )
    qnets = [ValueOperator(net, in_keys=["observation", "action"]) for net in _critic_networks(critics)]
    loss = SACLoss(
        actor, qnets, num_qvalue_nets=2, loss_function="l2", alpha_init=init_alpha, target_entropy=target_entropy
    )
    loss.make_value_estimator(ValueEstimators.TD0, gamma=gamma)
    with torch.no_grad():
        for layer, name in zip(target_critics.layers, ("0", "2", "4"), strict=True):
            loss.target_qvalue_network_params["module", "net", name, "weight"].copy_(layer.weight)
            loss.target_qvalue_network_params["module", "net", name, "bias"].copy_(layer.bias)
    return loss


def _nets(seed=0):
    torch.manual_seed(seed)
    policy = SquashedGaussianActor(OBS_SPACE, ACTION_SPACE, (32, 32))
    critics = QEnsemble(3, 2, (32, 32))
    target_critics = copy.deepcopy(critics).requires_grad_(False)
    with torch.no_grad():  # targets that differ from the online critics, as after some updates
        for p in target_critics.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return policy, critics, target_critics


@pytest.mark.parametrize(("init_alpha", "gamma", "target_entropy"), [(1.0, 0.99, -2.0), (0.3, 0.9, -0.5)])
def test_sac_loss_matches_torchrl_sac_loss(init_alpha, gamma, target_entropy):
    """Test that sac_loss gives SACLoss's losses, alpha, entropy and every gradient on the same batch and draws."""
    policy, critics, target_critics = _nets()
    log_alpha = torch.nn.Parameter(torch.tensor(math.log(init_alpha)))
    reference = _reference(policy, critics, target_critics, init_alpha, gamma, target_entropy)
    batch = _batch()

    torch.manual_seed(1)
    terms = sac_loss(policy, critics, target_critics, log_alpha, batch, gamma, target_entropy)
    (terms.loss_qvalue + terms.loss_actor + terms.loss_alpha).backward()
    ours_actor = [p.grad.clone() for p in policy.parameters()]
    policy.zero_grad()  # the reference shares the actor's parameters: keep ours, then take its own
    torch.manual_seed(1)
    expected = reference(to_torchrl_batch(batch))
    (expected["loss_qvalue"] + expected["loss_actor"] + expected["loss_alpha"]).backward()

    for name in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
        torch.testing.assert_close(getattr(terms, name).detach(), expected[name].detach(), msg=name)
    for ours, theirs in zip(ours_actor, policy.parameters(), strict=True):
        assert ours.abs().sum() > 0
        torch.testing.assert_close(ours, theirs.grad, rtol=1e-4, atol=1e-6)
    their_critics = list(reference.qvalue_network_params.values(True, True))
    for ours, theirs in zip(critics.parameters(), their_critics, strict=True):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(log_alpha.grad, reference.log_alpha.grad)
    assert all(p.grad is None for p in target_critics.parameters())


def test_terminated_transitions_do_not_bootstrap():
    """Test that the critic target is the reward alone for terminated transitions, whatever the next observation."""
    policy, critics, target_critics = _nets()
    log_alpha = torch.zeros((), requires_grad=True)

    def q_loss(terminated, next_obs):
        batch = _batch(n=8)
        batch["terminated"] = torch.full((8,), terminated)
        batch["next_obs"] = next_obs
        torch.manual_seed(0)
        return float(sac_loss(policy, critics, target_critics, log_alpha, batch, 0.99, -2.0).loss_qvalue)

    a, b = torch.zeros(8, 3), torch.ones(8, 3)
    assert q_loss(False, a) != pytest.approx(q_loss(False, b))
    assert q_loss(True, a) == pytest.approx(q_loss(True, b))


def test_squashed_gaussian_sample_matches_torchrl_tanh_normal():
    """Test that squashed_gaussian_sample gives TanhNormal's rsample_and_log_prob values and gradients."""
    torch.manual_seed(0)
    low, high = torch.tensor([-2.0, 0.0]), torch.tensor([2.0, 0.5])
    loc = (2 * torch.randn(128, 2)).requires_grad_()  # some samples far into tanh's flat tails
    scale = torch.nn.functional.softplus(torch.randn(128, 2)).add(1e-3).requires_grad_()
    torch.manual_seed(1)
    action, log_prob = squashed_gaussian_sample(loc, scale, torch.empty_like(loc).normal_(), low, high)
    (action.sum() + log_prob.sum()).backward()
    ours = (loc.grad.clone(), scale.grad.clone())
    loc.grad = scale.grad = None

    torch.manual_seed(1)
    expected_action, expected_log_prob = TanhNormal(loc, scale, low=low, high=high).rsample_and_log_prob()
    (expected_action.sum() + expected_log_prob.sum()).backward()

    assert ((action >= low) & (action <= high)).all()
    torch.testing.assert_close(action, expected_action)
    torch.testing.assert_close(log_prob, expected_log_prob)
    torch.testing.assert_close(ours[0], loc.grad)
    torch.testing.assert_close(ours[1], scale.grad)


def test_explore_draws_what_torchrl_tanh_normal_samples():
    """Test that the actor's exploration actions equal TanhNormal(loc, scale).sample() under the same seed."""
    policy = SquashedGaussianActor(OBS_SPACE, ACTION_SPACE, (32, 32))
    obs = torch.randn(16, 3)
    torch.manual_seed(5)
    ours = policy.explore(obs)
    torch.manual_seed(5)
    expected = TanhNormal(*policy._loc_scale(obs), low=policy.low, high=policy.high).sample()
    torch.testing.assert_close(ours, expected)


def test_q_ensemble_equals_separate_q_networks_and_detached_weights_get_no_gradient():
    """Test that QEnsemble's outputs are its QNetworks', and that detach_params sends gradients to the inputs only."""
    torch.manual_seed(0)
    critics = QEnsemble(3, 2, (32, 32))
    obs, action = torch.randn(10, 3), torch.randn(10, 2, requires_grad=True)
    q = critics(obs, action)
    assert q.shape == (2, 10)
    for i, net in enumerate(_critic_networks(critics)):
        torch.testing.assert_close(q[i], net(obs, action).squeeze(-1))
    critics(obs, action, detach_params=True).sum().backward()
    assert action.grad is not None and action.grad.abs().sum() > 0
    assert all(p.grad is None for p in critics.parameters())
