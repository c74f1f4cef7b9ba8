"""PPO's mathematics (rl_lightning/algos/ppo_loss.py): GAE equals torchrl's and hand-computed values; the loss equals
torchrl's ClipPPOLoss, values and gradients."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch.distributions import Categorical

from rl_lightning.algos import compute_gae, ppo_loss
from rl_lightning.nets import ActorCritic

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss


def _rollout(reward, value, next_value, terminated, truncated) -> TensorDict:
    """The rollout columns compute_gae reads, ``[T, N]``."""
    columns = {"reward": reward, "value": value, "next_value": next_value, "terminated": terminated}
    return TensorDict({**columns, "truncated": truncated}, batch_size=reward.shape)


def _batch(policy, n=64, seed=0):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(n, 4, generator=g)
    with torch.no_grad():
        action, log_prob, value, _ = policy.act(obs)
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

    log_prob, entropy, value = (x[0] for x in policy.evaluate_actions(obs[None], action[None]))  # sequences of 1
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


def test_gae_hand_computed_terminated_and_truncated():
    """Test GAE against hand-computed values: env 0 terminates at t=1, env 1 is truncated at t=2."""
    gamma, lam = 0.9, 0.8  # gamma * lambda = 0.72
    reward = torch.ones(4, 2)
    value = torch.tensor([[0.5, 0.5], [0.6, 0.6], [0.7, 0.7], [0.8, 0.8]])
    # next_value[t] = V(s_{t+1}); 99 after termination must be ignored; 2.0 is V(final obs)
    # of the truncated episode; 0.9 is the value after the rollout.
    next_value = torch.tensor([[0.6, 0.6], [99.0, 0.7], [0.8, 2.0], [0.9, 0.9]])
    terminated = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 0]], dtype=torch.bool)
    truncated = torch.tensor([[0, 0], [0, 0], [0, 1], [0, 0]], dtype=torch.bool)
    adv, ret = compute_gae(_rollout(reward, value, next_value, terminated, truncated), gamma, lam)
    # Env 0: deltas 1.04, 0.4, 1.02, 1.01; the recursion stops at t=1.
    expected_0 = [1.04 + 0.72 * 0.4, 0.4, 1.02 + 0.72 * 1.01, 1.01]
    # Env 1: deltas 1.04, 1.03, 1 + 0.9 * 2.0 - 0.7 = 2.1, 1.01; the recursion stops at t=2.
    a1 = 1.03 + 0.72 * 2.1
    expected_1 = [1.04 + 0.72 * a1, a1, 2.1, 1.01]
    torch.testing.assert_close(adv, torch.tensor([expected_0, expected_1]).T)
    torch.testing.assert_close(ret, adv + value)


@pytest.mark.parametrize("num_envs", [1, 4, 16])
def test_gae_equals_torchrls_on_random_rollouts(num_envs):
    """Test that compute_gae gives torchrl's generalized_advantage_estimate on random rollouts with terminated and
    truncated episode ends (torchrl: done stops the recursion, terminated the bootstrap)."""
    from torchrl.objectives.value.functional import generalized_advantage_estimate

    g = torch.Generator().manual_seed(num_envs)
    steps = 300
    reward, value, next_value = (torch.randn(steps, num_envs, generator=g) for _ in range(3))
    ended = torch.rand(steps, num_envs, generator=g) < 0.05
    terminated = ended & (torch.rand(steps, num_envs, generator=g) < 0.5)
    truncated = ended & ~terminated
    assert terminated.any() and truncated.any()
    adv, ret = compute_gae(_rollout(reward, value, next_value, terminated, truncated), 0.99, 0.95)
    expected, target = generalized_advantage_estimate(
        0.99, 0.95, value[..., None], next_value[..., None], reward[..., None], ended[..., None],
        terminated[..., None], time_dim=0,
    )  # fmt: skip
    torch.testing.assert_close(adv, expected[..., 0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ret, target[..., 0], rtol=1e-5, atol=1e-5)
