"""Tests that the plain PPO loss equals torchrl's ClipPPOLoss in value and gradients, and that its
written-out actor-critic path equals the autograd path."""

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch.distributions import Categorical

from rl_lightning.algos import minibatch_loss, ppo_loss
from rl_lightning.algos.ppo_loss import _ActorCriticObjective
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


def _autograd_reference(log_prob, entropy, value, old_log_prob, old_value, advantage, returns, **coefs):
    """The clipped objective recorded op by op (what ppo_loss computed before its gradient was written out)."""
    clip_coef, ent_coef, vf_coef = coefs["clip_coef"], coefs["ent_coef"], coefs["vf_coef"]
    if coefs["norm_adv"]:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    ratio = (log_prob - old_log_prob).exp()
    policy_loss = -torch.min(advantage * ratio, advantage * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    if coefs["clip_vloss"]:
        clipped = old_value + (value - old_value).clamp(-clip_coef, clip_coef)
        value_loss = 0.5 * torch.max((value - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((value - returns) ** 2).mean()
    return policy_loss + vf_coef * value_loss - ent_coef * entropy.mean()


@pytest.mark.parametrize("norm_adv", [True, False])
@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
def test_written_out_gradient_equals_autograd(norm_adv, clip_vloss, ent_coef):
    """Test that ppo_loss's hand-written gradient equals autograd's through the same formulas.

    The batch holds every branch and tie: ratios inside and outside the clip range on both
    sides, exactly 1 and exactly 0 advantages, values that did not move (their clipped and
    unclipped errors tie), values that moved beyond the clip range either way, and errors
    that tie in size with opposite signs.
    """
    g = torch.Generator().manual_seed(1)
    n = 256
    old_log_prob = -torch.rand(n, generator=g)
    old_value = torch.randn(n, generator=g)
    advantage = torch.randn(n, generator=g)
    advantage[:16] = 0.0
    log_prob = old_log_prob + 0.5 * torch.randn(n, generator=g)
    log_prob[16:48] = old_log_prob[16:48]  # ratio exactly 1
    value = old_value + torch.randn(n, generator=g)
    value[48:80] = old_value[48:80]  # the value did not move
    returns = old_value + torch.randn(n, generator=g)
    # Clipped and unclipped value errors tie with opposite signs: |1 - 0.625| = |0.25 - 0.625|.
    old_value[80:96], value[80:96], returns[80:96] = 0.0, 1.0, 0.625
    entropy = torch.rand(n, generator=g)
    coefs = dict(clip_coef=0.25, ent_coef=ent_coef, vf_coef=0.5, norm_adv=norm_adv, clip_vloss=clip_vloss)

    grads = []
    losses = []
    for loss_fn in (lambda *a: ppo_loss(*a, **coefs).loss, lambda *a: _autograd_reference(*a, **coefs)):
        inputs = [t.clone().requires_grad_() for t in (log_prob, entropy, value)]
        loss = loss_fn(*inputs, old_log_prob, old_value, advantage, returns)
        loss.backward()
        losses.append(loss.detach())
        grads.append([t.grad for t in inputs])
    torch.testing.assert_close(losses[0], losses[1], rtol=1e-6, atol=1e-7)
    for ours, reference in zip(grads[0], grads[1], strict=True):
        if ours is None:  # no entropy bonus: no gradient reaches the entropy at all
            assert ent_coef == 0.0 and not reference.any()
            continue
        torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-8)
    ratio = (log_prob - old_log_prob).exp()
    assert ((ratio > 1.25) & (advantage > 0)).any() and ((ratio < 0.75) & (advantage < 0)).any()
    assert ((value - old_value).abs() > 0.25).any()


def test_diagnostics_are_the_terms_stacked_and_carry_no_gradient():
    """Test that the stacked diagnostics hold the five terms in order, detached."""
    g = torch.Generator().manual_seed(2)
    inputs = [torch.randn(32, generator=g, requires_grad=i < 3) for i in range(7)]
    terms = ppo_loss(*inputs, ent_coef=0.01, clip_vloss=True)
    expected = torch.stack([terms.policy_loss, terms.value_loss, terms.entropy, terms.approx_kl, terms.clip_fraction])
    assert torch.equal(terms.diagnostics, expected)
    assert terms.loss.requires_grad and not terms.diagnostics.requires_grad
    torch.testing.assert_close(terms.loss, terms.policy_loss + 0.5 * terms.value_loss - 0.01 * terms.entropy)


# ---------------------------------------------------------------- the written-out actor-critic path
_DISCRETE = (gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(3))
_CONTINUOUS = (gym.spaces.Box(-np.inf, np.inf, (5,)), gym.spaces.Box(-1.0, 1.0, (2,)))


def _minibatch(spaces, n=96, seed=0, normalize_obs=True, **policy_kwargs):
    """A policy (its normalizer fed) and a minibatch whose ratios and value steps cross the clip range."""
    torch.manual_seed(seed)
    policy = ActorCritic(*spaces, normalize_obs=normalize_obs, init_log_std=-0.4, **policy_kwargs)
    g = torch.Generator().manual_seed(seed)
    dim = spaces[0].shape[0]
    if normalize_obs:
        policy.update_normalizer(torch.randn(200, dim, generator=g) * 3 + 1)
    obs = torch.randn(n, dim, generator=g) * 2
    with torch.no_grad():
        # Move the networks off their initial (near-zero-logit) point, so probabilities differ.
        for p in policy.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
        action, log_prob, value = policy.act(obs)
    batch = {
        "obs": obs,
        "action": action,
        "log_prob": log_prob + 0.3 * torch.randn(n, generator=g),
        "value": value + 0.3 * torch.randn(n, generator=g),
        "advantage": torch.randn(n, generator=g) * 2 + 0.3,
        "return": value + torch.randn(n, generator=g),
    }
    return policy, batch


def _generic(policy, batch, **coefs):
    """The loss through evaluate_actions and ppo_loss (autograd through the networks and the distribution)."""
    log_prob, entropy, value = policy.evaluate_actions(batch["obs"], batch["action"])
    keys = ("log_prob", "value", "advantage", "return")
    return ppo_loss(log_prob, entropy, value, *(batch[k] for k in keys), **coefs)


def _grads(policy, terms, direct=False):
    policy.zero_grad(set_to_none=True)
    if direct:
        assert _ActorCriticObjective.accumulate_grads(terms.loss.grad_fn)
    else:
        terms.loss.backward()
    return {name: p.grad.clone() for name, p in policy.named_parameters()}


def _written_out(terms) -> bool:
    return getattr(type(terms.loss.grad_fn), "_forward_cls", None) is _ActorCriticObjective


@pytest.mark.parametrize("spaces", [_DISCRETE, _CONTINUOUS], ids=["discrete", "continuous"])
@pytest.mark.parametrize(
    "coefs",
    [
        dict(clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, norm_adv=True, clip_vloss=True),
        dict(clip_coef=0.1, ent_coef=0.0, vf_coef=1.0, norm_adv=False, clip_vloss=False),
    ],
    ids=["clip_vloss", "plain"],
)
@pytest.mark.parametrize("normalize_obs", [True, False])
def test_minibatch_loss_written_out_equals_autograd_path(spaces, coefs, normalize_obs):
    """Test that the written-out path gives the loss, diagnostics and every gradient of the generic one.

    Both the engine's backward and accumulate_grads (which skips the engine) are compared.
    """
    policy, batch = _minibatch(spaces, normalize_obs=normalize_obs)
    reference = _generic(policy, batch, **coefs)
    expected = _grads(policy, reference)
    terms = minibatch_loss(policy, batch, **coefs)
    assert _written_out(terms)
    torch.testing.assert_close(terms.loss, reference.loss, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(terms.diagnostics, reference.diagnostics, rtol=1e-6, atol=1e-7)
    assert 0.0 < terms.clip_fraction < 1.0
    for direct in (False, True):
        got = _grads(policy, minibatch_loss(policy, batch, **coefs), direct=direct)
        assert got.keys() == expected.keys()
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-7, msg=name)
            assert got[name].is_contiguous()


@pytest.mark.parametrize("custom", ["actor", "critic"])
def test_written_out_path_takes_networks_of_different_depths(custom):
    """Test that an actor and a critic of different depths (both Linear/Tanh) go the written-out way, and right."""
    from rl_lightning.nets.mlp import mlp

    out = 3 if custom == "actor" else 1
    policy, batch = _minibatch(_DISCRETE, **{custom: mlp(4, (32,), out)})
    reference = _generic(policy, batch, ent_coef=0.01, clip_vloss=True)
    expected = _grads(policy, reference)
    terms = minibatch_loss(policy, batch, ent_coef=0.01, clip_vloss=True)
    assert _written_out(terms)
    torch.testing.assert_close(terms.loss, reference.loss, rtol=1e-6, atol=1e-7)
    for direct in (False, True):
        got = _grads(policy, minibatch_loss(policy, batch, ent_coef=0.01, clip_vloss=True), direct=direct)
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-7, msg=name)


def test_accumulate_grads_adds_to_existing_gradients_like_backward():
    """Test that accumulate_grads sums into gradients already there, as AccumulateGrad does."""
    policy, batch = _minibatch(_DISCRETE)
    once = _grads(policy, minibatch_loss(policy, batch, ent_coef=0.01))
    assert _ActorCriticObjective.accumulate_grads(minibatch_loss(policy, batch, ent_coef=0.01).loss.grad_fn)
    for name, p in policy.named_parameters():
        torch.testing.assert_close(p.grad, 2 * once[name], rtol=1e-6, atol=1e-8)


def test_accumulate_grads_leaves_frozen_parameters_alone():
    """Test that a parameter that needs no gradient gets none, on both backward paths, and the rest are right."""
    policy, batch = _minibatch(_DISCRETE)
    expected = _grads(policy, _generic(policy, batch))
    policy.actor[0].weight.requires_grad_(False)
    for direct in (False, True):
        policy.zero_grad(set_to_none=True)
        terms = minibatch_loss(policy, batch)
        assert _written_out(terms)
        if direct:
            assert _ActorCriticObjective.accumulate_grads(terms.loss.grad_fn)
        else:
            terms.loss.backward()
        assert policy.actor[0].weight.grad is None
        for name, p in policy.named_parameters():
            if name != "actor.0.weight":
                torch.testing.assert_close(p.grad, expected[name], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("why", ["tensor_hook", "post_accumulate_hook", "obs_grad", "anomaly"])
def test_accumulate_grads_declines_where_the_engine_would_differ(why):
    """Test that accumulate_grads does nothing and says so where only the engine's backward is right."""
    policy, batch = _minibatch(_DISCRETE)
    seen = []
    if why == "tensor_hook":
        policy.critic[2].bias.register_hook(lambda grad: seen.append(grad))
    elif why == "post_accumulate_hook":
        policy.critic[2].bias.register_post_accumulate_grad_hook(lambda param: seen.append(param))
    elif why == "obs_grad":
        batch["obs"] = batch["obs"].clone().requires_grad_()
    policy.zero_grad(set_to_none=True)
    with torch.autograd.set_detect_anomaly(why == "anomaly"):
        terms = minibatch_loss(policy, batch)
        assert _written_out(terms)
        assert not _ActorCriticObjective.accumulate_grads(terms.loss.grad_fn)
    assert all(p.grad is None for p in policy.parameters())
    terms.loss.backward()  # the engine's backward then runs the hooks and reaches the observations
    if why in ("tensor_hook", "post_accumulate_hook"):
        assert len(seen) == 1
    if why == "obs_grad":
        reference_obs = batch["obs"].detach().clone().requires_grad_()
        _generic(policy, {**batch, "obs": reference_obs}).loss.backward()
        torch.testing.assert_close(batch["obs"].grad, reference_obs.grad, rtol=1e-5, atol=1e-7)


def _relu_actor():
    from torch import nn

    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))


@pytest.mark.parametrize("why", ["custom_actor", "layer_hook", "global_hook", "no_bias", "parametrized", "autocast"])
def test_minibatch_loss_takes_the_generic_path_where_the_networks_are_not_plain(why):
    """Test that networks the written-out path does not mirror (or would hide from a hook) go through autograd."""
    from torch import nn

    calls = []
    kwargs = {"actor": _relu_actor()} if why == "custom_actor" else {}
    policy, batch = _minibatch(_DISCRETE, **kwargs)
    handle = None
    if why == "layer_hook":
        policy.critic[2].register_forward_hook(lambda *a: calls.append(1))
    elif why == "global_hook":
        handle = nn.modules.module.register_module_forward_hook(lambda *a: calls.append(1))
    elif why == "no_bias":
        policy.actor[4] = nn.Linear(64, 3, bias=False)
    elif why == "parametrized":
        nn.utils.parametrizations.weight_norm(policy.actor[0])
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=why == "autocast"):
            terms = minibatch_loss(policy, batch, ent_coef=0.01)
    finally:
        if handle is not None:
            handle.remove()
    assert not _written_out(terms)
    assert policy.tanh_layers() is None or why in ("autocast", "global_hook")  # the global hook is gone now
    if why in ("layer_hook", "global_hook"):
        assert calls
    if why != "autocast":  # same values as the generic path, gradients included
        expected = _grads(policy, _generic(policy, batch, ent_coef=0.01))
        got = _grads(policy, terms)
        for name in expected:
            torch.testing.assert_close(got[name], expected[name], rtol=1e-6, atol=1e-8)


def test_minibatch_loss_refuses_unknown_coefficients_and_double_backward():
    """Test the written-out path's errors: an unknown coefficient names itself; a double backward raises."""
    policy, batch = _minibatch(_DISCRETE)
    with pytest.raises(TypeError, match="clip_coeff"):
        minibatch_loss(policy, batch, clip_coeff=0.2)
    params = list(policy.parameters())
    grads = torch.autograd.grad(minibatch_loss(policy, batch).loss, params, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(sum(g.sum() for g in grads), params)
