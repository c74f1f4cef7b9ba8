"""Tests that the fast path's written-out PPO loss (rl_lightning/fast/ppo.py) equals the plain autograd loss:
values, diagnostics and every gradient."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning import fast
from rl_lightning.algos import minibatch_loss, ppo_loss
from rl_lightning.fast.ppo import _ActorCriticObjective, _objective, tanh_layers
from rl_lightning.nets import ActorCritic


@pytest.mark.parametrize("norm_adv", [True, False])
@pytest.mark.parametrize("clip_vloss", [True, False])
@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
def test_written_out_gradient_equals_autograd(norm_adv, clip_vloss, ent_coef):
    """Test that the written-out objective's gradient equals autograd's through the plain ppo_loss.

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

    inputs = [t.clone().requires_grad_() for t in (log_prob, entropy, value)]
    reference = ppo_loss(*inputs, old_log_prob, old_value, advantage, returns, **coefs)
    reference.loss.backward()
    loss, diagnostics, log_prob_grad, value_grad, entropy_grad = _objective(
        log_prob, entropy, value, old_log_prob, old_value, advantage, returns, *coefs.values()
    )
    torch.testing.assert_close(loss, reference.loss.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(diagnostics, reference.diagnostics, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(log_prob_grad, inputs[0].grad, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(value_grad, inputs[2].grad, rtol=1e-5, atol=1e-8)
    torch.testing.assert_close(torch.full_like(entropy, entropy_grad), inputs[1].grad, rtol=1e-5, atol=1e-8)
    ratio = (log_prob - old_log_prob).exp()
    assert ((ratio > 1.25) & (advantage > 0)).any() and ((ratio < 0.75) & (advantage < 0)).any()
    assert ((value - old_value).abs() > 0.25).any()


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
    return policy, _perturbed_batch(policy, obs, n, g)


def _perturbed_batch(policy, obs, n, g):
    """Move the networks off their initial (near-zero-logit) point, so probabilities differ, and build a
    minibatch of ``obs`` whose ratios and value steps cross the clip range."""
    with torch.no_grad():
        for p in policy.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
        action, log_prob, value = policy.act(obs)
    return {
        "obs": obs,
        "action": action,
        "log_prob": log_prob + 0.3 * torch.randn(n, generator=g),
        "value": value + 0.3 * torch.randn(n, generator=g),
        "advantage": torch.randn(n, generator=g) * 2 + 0.3,
        "return": value + torch.randn(n, generator=g),
    }


def _generic(policy, batch, **coefs):
    """The plain path: evaluate_actions and ppo_loss (autograd through the networks and the distribution)."""
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
    assert tanh_layers(policy) is None or why in ("autocast", "global_hook")  # the global hook is gone now
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


def test_the_switch_turns_the_written_out_path_off():
    """Test that with the fast path off a default actor-critic takes the plain autograd path, to the same loss."""
    policy, batch = _minibatch(_DISCRETE)
    assert _written_out(minibatch_loss(policy, batch))
    with fast.disabled():
        terms = minibatch_loss(policy, batch)
    assert not _written_out(terms) and fast.enabled()
    torch.testing.assert_close(terms.loss, minibatch_loss(policy, batch).loss, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("hidden_sizes", [(64, 64), ()], ids=["mlp-heads", "linear-heads"])
def test_written_out_heads_on_a_shared_encoder_equal_autograd(hidden_sizes):
    """Test that on image-and-vector observations the written-out heads pass the encoder its gradient.

    The features need a gradient there (the shared encoder learns from both heads), so
    accumulate_grads declines and autograd carries the written-out backward into the CNN.
    """
    space = gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (6, 6, 2), np.uint8), "state": gym.spaces.Box(-np.inf, np.inf, (3,))}
    )
    torch.manual_seed(0)
    encoder = {"cnn_channels": [4, 8], "cnn_kernels": [2, 2], "cnn_strides": [1, 1], "cnn_features": 16}
    policy = ActorCritic(space, gym.spaces.Discrete(3), hidden_sizes=hidden_sizes, encoder=encoder)
    g = torch.Generator().manual_seed(1)
    n = 64
    obs = {
        "image": torch.randint(0, 256, (n, 6, 6, 2), dtype=torch.uint8, generator=g),
        "state": torch.randn(n, 3, generator=g),
    }
    policy.update_normalizer(obs)
    batch = _perturbed_batch(policy, obs, n, g)
    coefs = dict(clip_coef=0.2, ent_coef=0.01, vf_coef=0.5, norm_adv=True, clip_vloss=True)
    reference = _generic(policy, batch, **coefs)
    expected = _grads(policy, reference)
    terms = minibatch_loss(policy, batch, **coefs)
    assert _written_out(terms)
    assert not _ActorCriticObjective.accumulate_grads(terms.loss.grad_fn)
    torch.testing.assert_close(terms.loss, reference.loss, rtol=1e-6, atol=1e-7)
    got = _grads(policy, minibatch_loss(policy, batch, **coefs))
    assert any(name.startswith("encoder.") for name in expected)
    for name in expected:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-5, atol=1e-6, msg=name)
