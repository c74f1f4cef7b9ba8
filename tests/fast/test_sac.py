"""Tests that the fast path's written-out SAC objective (rl_lightning/fast/sac.py) equals the plain autograd path:
the losses, the logged terms, the random draws and every gradient."""

import copy
import math

import gymnasium as gym
import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from tensordict.nn import NormalParamExtractor
from torch import nn

from rl_lightning import SAC, fast
from rl_lightning.algos.sac_loss import sac_loss, sac_objective
from rl_lightning.fast.sac import _SACObjective, objective
from rl_lightning.nets.sac import QEnsemble, SquashedGaussianActor
from tests.helpers import quiet_trainer, tiny_replay_data

OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)


def _networks(action_space, hidden_sizes=(32, 32), seed=0, spread=0.3):
    """Actor, critics and target critics, moved off their initial point (targets apart from the critics)."""
    torch.manual_seed(seed)
    actor = SquashedGaussianActor(OBS, action_space, hidden_sizes)
    critics = QEnsemble(OBS.shape[0], action_space.shape[0], hidden_sizes)
    targets = copy.deepcopy(critics).requires_grad_(False)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in [*actor.parameters(), *critics.parameters(), *targets.parameters()]:
            p.add_(spread * torch.randn(p.shape, generator=g))
    return actor, critics, targets


def _batch(action_space, n=64, seed=0, obs_scale=1.0):
    g = torch.Generator().manual_seed(seed)
    low, high = (torch.as_tensor(b) for b in (action_space.low, action_space.high))
    dim = OBS.shape[0]
    return TensorDict(
        {
            "obs": obs_scale * torch.randn(n, dim, generator=g),
            "action": low + (high - low) * torch.rand(n, action_space.shape[0], generator=g),
            "reward": torch.randn(n, generator=g),
            "next_obs": obs_scale * torch.randn(n, dim, generator=g),
            "terminated": torch.rand(n, generator=g) < 0.3,
        },
        batch_size=[n],
    )


def _run(actor, critics, targets, log_alpha, batch, gamma, target_entropy, written_out, accumulate=False, seed=7):
    """The summed loss, the five terms, every gradient by name and the random state after, on one path."""
    params = {
        "log_alpha": log_alpha,
        **dict(actor.named_parameters(prefix="actor")),
        **dict(critics.named_parameters(prefix="critics")),
    }  # noqa: E501
    for p in params.values():
        p.grad = None
    torch.manual_seed(seed)
    if written_out:
        total, terms = objective(actor, critics, targets, log_alpha, batch, gamma, target_entropy)
        assert type(total.grad_fn).__name__ == "_SACObjectiveBackward"
        if accumulate:
            assert _SACObjective.accumulate_grads(total.grad_fn)
        else:
            total.backward()
    else:
        with fast.disabled():
            plain = sac_loss(actor, critics, targets, log_alpha, batch, gamma, target_entropy)
            total = plain.loss_qvalue + plain.loss_actor + plain.loss_alpha
            terms = torch.stack([t.detach() for t in plain])
            total.backward()
    rng = torch.get_rng_state()
    return total.detach(), terms, {k: p.grad for k, p in params.items()}, rng


BOUNDS = {
    "pendulum": gym.spaces.Box(-2.0, 2.0, (1,), np.float32),
    "asymmetric-2d": gym.spaces.Box(np.array([-1.0, 0.0], np.float32), np.array([2.0, 3.0], np.float32)),
    "unit-3d": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
}


@pytest.mark.parametrize("bounds", list(BOUNDS), ids=list(BOUNDS))
@pytest.mark.parametrize(("init_alpha", "gamma", "target_entropy"), [(1.0, 0.99, -1.0), (0.2, 0.9, 0.5)])
@pytest.mark.parametrize("accumulate", [False, True], ids=["engine", "no-engine"])
def test_written_out_objective_equals_the_plain_losses(bounds, init_alpha, gamma, target_entropy, accumulate):
    """Test that the written-out objective gives the plain path's losses, terms, draws and gradients.

    Both backward routes: autograd's engine calling the node's backward, and ``accumulate_grads``
    writing ``.grad`` itself. The batch holds terminated and bootstrapped rows.
    """
    space = BOUNDS[bounds]
    actor, critics, targets = _networks(space)
    log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)))
    batch = _batch(space)
    args = (actor, critics, targets, log_alpha, batch, gamma, target_entropy)
    total, terms, grads, rng = _run(*args, written_out=False)
    got_total, got_terms, got_grads, got_rng = _run(*args, written_out=True, accumulate=accumulate)
    torch.testing.assert_close(got_total, total, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_terms, terms, rtol=1e-5, atol=1e-6)
    assert torch.equal(got_rng, rng)  # the same draws, in the same order
    assert grads.keys() == got_grads.keys()
    for name, grad in grads.items():
        assert grad is not None and grad.abs().sum() > 0, name
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_saturated_actions_and_wide_scales_take_the_plain_gradient():
    """Test the gradient where tanh saturates past the clamp and softplus passes its linear threshold.

    Large observations and weights drive ``u`` far out (the squash's clamp cuts the gradient)
    and the scale head's input past 20 (softplus's gradient is then exactly 1).
    """
    space = BOUNDS["asymmetric-2d"]
    actor, critics, targets = _networks(space, spread=2.0)
    batch = _batch(space, obs_scale=30.0)
    log_alpha = nn.Parameter(torch.tensor(-1.0))
    with torch.no_grad():
        z = actor.net[0](batch["obs"])
        loc, raw = z.chunk(2, -1)
    assert (loc.abs() > 20).any() and (raw > 20).any()
    args = (actor, critics, targets, log_alpha, batch, 0.99, -2.0)
    _, terms, grads, _ = _run(*args, written_out=False)
    _, got_terms, got_grads, _ = _run(*args, written_out=True, accumulate=True)
    torch.testing.assert_close(got_terms, terms, rtol=1e-5, atol=1e-5)
    for name, grad in grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_an_actor_and_critics_of_different_depths_take_the_plain_gradient():
    """Test the written-out objective on an actor of two hidden layers and critics of one."""
    space = BOUNDS["asymmetric-2d"]
    torch.manual_seed(0)
    actor = SquashedGaussianActor(OBS, space, (32, 32))
    critics = QEnsemble(OBS.shape[0], space.shape[0], (16,))
    targets = copy.deepcopy(critics).requires_grad_(False)
    log_alpha = nn.Parameter(torch.tensor(-0.5))
    args = (actor, critics, targets, log_alpha, _batch(space), 0.99, -2.0)
    _, terms, grads, _ = _run(*args, written_out=False)
    _, got_terms, got_grads, _ = _run(*args, written_out=True, accumulate=True)
    torch.testing.assert_close(got_terms, terms, rtol=1e-5, atol=1e-6)
    for name, grad in grads.items():
        torch.testing.assert_close(got_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_a_scaled_loss_scales_every_gradient_and_accumulate_adds_to_existing_ones():
    """Test that backward of 3 * loss gives 3 times the gradients, and accumulate_grads sums like AccumulateGrad."""
    space = BOUNDS["pendulum"]
    actor, critics, targets = _networks(space)
    log_alpha = nn.Parameter(torch.tensor(0.0))
    batch = _batch(space)
    _, _, once, _ = _run(actor, critics, targets, log_alpha, batch, 0.99, -1.0, written_out=True, accumulate=True)
    once = {k: g.clone() for k, g in once.items()}
    params = [log_alpha, *actor.parameters(), *critics.parameters()]
    for p in params:
        p.grad = None
    torch.manual_seed(7)
    total, _ = objective(actor, critics, targets, log_alpha, batch, 0.99, -1.0)
    (3.0 * total).backward()
    for p, grad in zip(params, once.values(), strict=True):
        torch.testing.assert_close(p.grad, 3.0 * grad, rtol=1e-4, atol=1e-6)
    torch.manual_seed(7)
    total, _ = objective(actor, critics, targets, log_alpha, batch, 0.99, -1.0)
    assert _SACObjective.accumulate_grads(total.grad_fn)
    for p, grad in zip(params, once.values(), strict=True):
        torch.testing.assert_close(p.grad, 4.0 * grad, rtol=1e-4, atol=1e-6)


def test_frozen_parameters_get_no_gradient_and_hooked_ones_send_the_engine():
    """Test that a parameter that needs no gradient gets none, and that a tensor hook makes accumulate_grads decline."""
    space = BOUNDS["pendulum"]
    actor, critics, targets = _networks(space)
    log_alpha = nn.Parameter(torch.tensor(0.0))
    batch = _batch(space)
    _, _, expected, _ = _run(actor, critics, targets, log_alpha, batch, 0.99, -1.0, written_out=False)
    expected = {k: g.clone() for k, g in expected.items()}
    frozen = ("actor.net.0.0.weight", "critics.layers.1.bias", "log_alpha")
    for p in (actor.net[0][0].weight, critics.layers[1].bias, log_alpha):
        p.requires_grad_(False)
    _, _, grads, _ = _run(actor, critics, targets, log_alpha, batch, 0.99, -1.0, written_out=True, accumulate=True)
    for name, grad in grads.items():
        if name in frozen:
            assert grad is None, name
        else:
            torch.testing.assert_close(grad, expected[name], rtol=1e-4, atol=1e-6, msg=name)
    with torch.autograd.set_detect_anomaly(True):
        total, _ = objective(actor, critics, targets, log_alpha, batch, 0.99, -1.0)
        assert not _SACObjective.accumulate_grads(total.grad_fn)  # anomaly mode: the engine's backward
    seen = []
    critics.layers[0].bias.register_hook(seen.append)
    torch.manual_seed(7)
    total, _ = objective(actor, critics, targets, log_alpha, batch, 0.99, -1.0)
    assert not _SACObjective.accumulate_grads(total.grad_fn)
    total.backward()  # the engine then runs the hook
    assert len(seen) == 1


def test_a_double_backward_raises_and_a_nan_reaches_the_terms_and_gradients():
    """Test that the node refuses a double backward, and that a NaN reward shows in the critic loss and gradients
    (what the update guard reads)."""
    space = BOUNDS["pendulum"]
    actor, critics, targets = _networks(space)
    log_alpha = nn.Parameter(torch.tensor(0.0))
    batch = _batch(space)
    total, _ = objective(actor, critics, targets, log_alpha, batch, 0.99, -1.0)
    params = [log_alpha, *actor.parameters(), *critics.parameters()]
    grads = torch.autograd.grad(total, params, create_graph=True)
    with pytest.raises(RuntimeError):
        torch.autograd.grad(sum(g.sum() for g in grads), params)
    batch["reward"][3] = float("nan")
    _, terms, grads, _ = _run(actor, critics, targets, log_alpha, batch, 0.99, -1.0, written_out=True, accumulate=True)
    assert terms[1].isnan() and terms[0].isfinite()  # loss_qvalue, loss_actor
    assert not grads["critics.layers.0.weight"].isfinite().all()
    assert grads["actor.net.0.0.weight"].isfinite().all()


def _image_actor():
    space = gym.spaces.Box(0, 255, (3, 36, 36), np.uint8)
    cnn = {"cnn_channels": [8], "cnn_kernels": [4], "cnn_strides": [2], "cnn_features": 16}
    return SquashedGaussianActor(space, BOUNDS["pendulum"], (16, 16), cnn)


@pytest.mark.parametrize(
    "why",
    [
        "switch_off", "encoder", "critic_encoder", "layer_hook", "global_hook", "mapping_hook", "scale_mapping",
        "subclass", "bf16", "float64_reward", "obs_grad", "obs_shape", "autocast",
    ],
)  # fmt: skip
def test_the_plain_path_runs_where_the_networks_are_not_the_default(why):
    """Test that the written-out objective declines (None) where it does not mirror the networks, and
    sac_objective then gives the plain losses with their gradients."""
    space = BOUNDS["pendulum"]
    actor, critics, targets = _networks(space)
    log_alpha = nn.Parameter(torch.tensor(0.0))
    batch = _batch(space)
    calls, handle = [], None
    if why == "encoder":
        actor = _image_actor()
    elif why == "layer_hook":
        actor.net[0][2].register_forward_hook(lambda *a: calls.append(1))
    elif why == "global_hook":
        handle = nn.modules.module.register_module_forward_hook(lambda *a: calls.append(1))
    elif why == "scale_mapping":
        actor.net[1] = NormalParamExtractor(scale_mapping="exp")
    elif why == "subclass":
        critics.__class__ = type("MyCritics", (QEnsemble,), {})
    elif why == "bf16":
        actor = actor.to(torch.bfloat16)
    elif why == "critic_encoder":
        critics.encoder = nn.Identity()
    elif why == "mapping_hook":
        actor.net[1].scale_mapping.register_forward_hook(lambda *a: calls.append(1))
    elif why == "float64_reward":
        batch["reward"] = batch["reward"].double()
    elif why == "obs_grad":
        batch["obs"] = batch["obs"].clone().requires_grad_()
    elif why == "obs_shape":
        batch["obs"] = batch["obs"].unsqueeze(1)  # [B, 1, 5]: flattened by the actor, not by the written-out path
    try:
        with fast.disabled() if why == "switch_off" else torch.autocast("cpu", enabled=why == "autocast"):
            assert objective(actor, critics, targets, log_alpha, batch, 0.99, -1.0) is None
            if why not in ("encoder", "bf16", "obs_shape"):  # (their own batch, dtype or a critic on flat obs)
                total, terms = sac_objective(actor, critics, targets, log_alpha, batch, 0.99, -1.0)
                assert total.grad_fn is not None and terms.loss_actor.requires_grad  # the plain terms, differentiable
                if why == "obs_grad":
                    total.backward()
                    assert batch["obs"].grad is not None and batch["obs"].grad.abs().sum() > 0
    finally:
        if handle is not None:
            handle.remove()
    if why in ("layer_hook", "global_hook", "mapping_hook"):
        assert calls


def test_sac_fit_with_the_fast_path_ends_where_the_plain_fit_ends():
    """Test that a whole SAC fit on the fast path (written-out objective among its shortcuts) ends with the
    weights of the same fit on the plain path, within float32 rounding."""

    def fit():
        pl.seed_everything(0)
        model = SAC(total_timesteps=160, hidden_sizes=(32, 32))
        trainer = quiet_trainer(max_epochs=-1)
        trainer.fit(model, tiny_replay_data("Pendulum-v1", eval_interval=1000))
        assert trainer.global_step > 50
        return {k: v.clone() for k, v in model.state_dict().items()}, model

    fast_weights, model = fit()
    with fast.disabled():
        plain_weights, _ = fit()
    assert fast_weights.keys() == plain_weights.keys()
    for key, value in plain_weights.items():
        torch.testing.assert_close(fast_weights[key], value, rtol=1e-4, atol=1e-5, msg=key)
    assert model.log_alpha.item() != 0.0  # it learned: the temperature moved from log(1)
