"""Tests that the plain PPO loss (rl_lightning/algos/ppo_loss.py) equals torchrl's ClipPPOLoss, values and gradients."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch.distributions import Categorical

from rl_lightning import fast
from rl_lightning.algos import minibatch_loss, ppo_loss
from rl_lightning.nets import ActorCritic

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss


def _batch(policy, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 4, generator=g)
    with torch.no_grad():
        action, log_prob, value = policy.act(obs)
    # Perturb the behaviour log-probs so ratios differ from 1 and clipping is exercised.
    old_log_prob = log_prob + 0.3 * torch.randn(n, generator=g)
    advantage = torch.randn(n, generator=g) * 2 + 0.5
    returns = value + torch.randn(n, generator=g)
    return obs, action, old_log_prob, value, advantage, returns


@pytest.mark.parametrize("ent_coef, vf_coef", [(0.0, 0.5), (0.01, 1.0)])
def test_ppo_loss_matches_torchrl_clip_ppo_loss(ent_coef, vf_coef):
    """Test that ppo_loss gives the value and gradients of ClipPPOLoss on the same batch."""
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(3), normalize_obs=False)
    obs, action, old_log_prob, old_value, advantage, returns = _batch(policy)

    log_prob, entropy, value = policy.evaluate_actions(obs, action)
    ours = ppo_loss(
        log_prob,
        entropy,
        value,
        old_log_prob,
        old_value,
        advantage,
        returns,
        clip_coef=0.2,
        ent_coef=ent_coef,
        vf_coef=vf_coef,
        norm_adv=True,
    )
    ours.loss.backward()
    ours_grads = [p.grad.clone() for p in policy.parameters()]
    policy.zero_grad()

    actor = ProbabilisticActor(
        TensorDictModule(policy.actor, in_keys=["obs"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=Categorical,
        return_log_prob=True,
    )
    critic = ValueOperator(policy.critic, in_keys=["obs"])
    reference = ClipPPOLoss(
        actor,
        critic,
        clip_epsilon=0.2,
        entropy_coeff=ent_coef,
        critic_coeff=vf_coef / 2,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    keys = reference.tensor_keys
    td = TensorDict(
        {
            "obs": obs,
            "action": action,
            keys.sample_log_prob: old_log_prob,
            "advantage": advantage.unsqueeze(-1),
            "value_target": returns.unsqueeze(-1),
            "state_value": old_value.unsqueeze(-1),
        },
        batch_size=[obs.shape[0]],
    )
    out = reference(td)
    total = out["loss_objective"] + out["loss_critic"] + out.get("loss_entropy", torch.tensor(0.0))
    total.backward()
    ref_grads = [p.grad.clone() for p in policy.parameters()]

    torch.testing.assert_close(ours.policy_loss, out["loss_objective"].detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(vf_coef * ours.value_loss, out["loss_critic"].detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.loss.detach(), total.detach(), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours.clip_fraction, out["clip_fraction"], rtol=0, atol=1e-6)
    assert 0.0 < ours.clip_fraction < 1.0
    for a, b in zip(ours_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)


def test_value_clipping_limits_the_update():
    """Test that clip_vloss takes the larger of clipped and unclipped value errors."""
    zeros = torch.zeros(1)
    terms = ppo_loss(
        zeros,
        zeros,
        torch.tensor([1.0]),
        zeros,
        zeros,
        torch.ones(1),
        torch.tensor([2.0]),
        clip_coef=0.2,
        norm_adv=False,
        clip_vloss=True,
    )
    # unclipped error (1 - 2)^2 = 1; clipped value 0.2 -> (0.2 - 2)^2 = 3.24; max -> 0.5 * 3.24
    assert terms.value_loss.item() == pytest.approx(0.5 * 3.24)


def test_diagnostics_are_the_terms_stacked_and_carry_no_gradient():
    """Test that the stacked diagnostics hold the five terms in order, detached."""
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(32, generator=g, requires_grad=i < 3) for i in range(7)]
    terms = ppo_loss(*inputs, ent_coef=0.01, clip_vloss=True)
    expected = torch.stack([terms.policy_loss, terms.value_loss, terms.entropy, terms.approx_kl, terms.clip_fraction])
    assert torch.equal(terms.diagnostics, expected)
    assert terms.loss.requires_grad and not terms.diagnostics.requires_grad
    torch.testing.assert_close(terms.loss, terms.policy_loss + 0.5 * terms.value_loss - 0.01 * terms.entropy)


def test_minibatch_loss_with_the_fast_path_off_is_ppo_loss_on_evaluate_actions():
    """Test that minibatch_loss with the fast path off is ppo_loss of evaluate_actions, recorded by autograd."""
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(3))
    obs, action, old_log_prob, old_value, advantage, returns = _batch(policy)
    batch = {"obs": obs, "action": action, "log_prob": old_log_prob, "value": old_value, "advantage": advantage,
             "return": returns}  # fmt: skip
    with fast.disabled():
        terms = minibatch_loss(policy, batch, ent_coef=0.02)
    log_prob, entropy, value = policy.evaluate_actions(obs, action)
    reference = ppo_loss(log_prob, entropy, value, old_log_prob, old_value, advantage, returns, ent_coef=0.02)
    assert type(terms.loss.grad_fn) is type(reference.loss.grad_fn)  # the autograd graph's last op, not one node
    torch.testing.assert_close(terms.loss, reference.loss, rtol=0, atol=0)
    torch.testing.assert_close(terms.diagnostics, reference.diagnostics, rtol=0, atol=0)
