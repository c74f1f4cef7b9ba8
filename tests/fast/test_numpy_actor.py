"""Tests for the numpy forward pass of small MLPs, and the acting path of ActorCritic that uses it."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from rl_lightning.fast.numpy_actor import MAX_LAYER_SIZE, NumpyMLP
from rl_lightning.nets import ActorCritic, mlp

BOX4 = gym.spaces.Box(-np.inf, np.inf, (4,))


def _obs(rows: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(rows, 4)).astype(np.float32) * 2


@pytest.mark.parametrize("activation", [nn.Tanh, nn.ReLU])
@pytest.mark.parametrize("rows", [1, 4, MAX_LAYER_SIZE // (64 * 32)])
def test_forward_equals_torch(activation, rows):
    """Test that the numpy pass computes the torch forward of Tanh and ReLU MLPs, in float32."""
    torch.manual_seed(0)
    net = mlp(4, (64, 32), 3, activation=activation)
    x = _obs(rows)
    out = NumpyMLP(net)(x)
    assert out is not None and out.dtype == np.float32 and out.shape == (rows, 3)
    np.testing.assert_allclose(out, net(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert np.array_equal(x, _obs(rows))  # the input is not written


def test_sees_in_place_updates_and_new_storage():
    """Test that optimizer-style in-place updates, ``.data`` swaps and dtype round trips are all seen."""
    torch.manual_seed(0)
    net = mlp(4, (8,), 2)
    fast, x = NumpyMLP(net), _obs(5)
    first = fast(x).copy()
    with torch.no_grad():
        net[0].weight.add_(0.5)  # what an optimizer step does
    net[2].bias.data = torch.full((2,), 3.0)  # a new storage
    expected = net(torch.from_numpy(x)).detach().numpy()
    assert not np.allclose(first, expected)
    np.testing.assert_allclose(fast(x), expected, rtol=1e-5, atol=1e-6)
    net.double()
    assert fast(x) is None  # float64 weights: torch's forward
    net.float()
    np.testing.assert_allclose(fast(x), net(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def _forward_hook(net):
    return net[0].register_forward_hook(lambda *args: None)


def _pre_hook(net):
    return net.register_forward_pre_hook(lambda *args: None)


def _global_hook(net):
    return nn.modules.module.register_module_forward_hook(lambda *args: None)


@pytest.mark.parametrize("add_hook", [_forward_hook, _pre_hook, _global_hook])
def test_hooks_send_the_call_to_torch(add_hook):
    """Test that a forward hook (a layer's, the network's, a global one) disables the numpy pass while it is there."""
    net = mlp(4, (8,), 2)
    fast, x = NumpyMLP(net), _obs(3)
    handle = add_hook(net)
    assert fast(x) is None
    handle.remove()
    assert fast(x) is not None


def test_other_layouts_and_sizes_send_the_call_to_torch():
    """Test the refusals: other layer types, a parametrized layer, a replaced layer, layers too large for the rows."""
    x = _obs(3)
    assert NumpyMLP(nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8)))(x) is None
    assert NumpyMLP(nn.Linear(4, 2))(x) is None  # not a Sequential
    assert NumpyMLP(nn.Sequential(nn.Linear(4, 2, bias=False)))(x) is None
    net = mlp(4, (8,), 2)
    fast = NumpyMLP(net)
    rows = MAX_LAYER_SIZE // (8 * 4)  # the first layer is the largest
    assert fast(_obs(rows + 1)) is None and fast(_obs(rows)) is not None
    parametrize.register_parametrization(net[0], "weight", nn.Identity())
    assert fast(x) is None
    net = mlp(4, (8,), 2)
    fast = NumpyMLP(net)
    assert fast(x) is not None
    net[1] = nn.Sigmoid()
    assert fast(x) is None


def _explore_both_ways(policy: ActorCritic, obs: torch.Tensor, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Actions of ``steps`` explore calls on the numpy path, and from the same seed on torch's (gradients on)."""
    torch.manual_seed(7)
    with torch.no_grad():
        fast = torch.stack([policy.explore(obs) for _ in range(steps)])
    torch.manual_seed(7)
    with torch.enable_grad():
        slow = torch.stack([policy.explore(obs).detach() for _ in range(steps)])
    return fast, slow


@pytest.mark.parametrize("normalize_obs", [False, True])
@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))])
def test_explore_draws_what_the_torch_path_draws(normalize_obs, action_space):
    """Test that explore without gradients (numpy) samples the torch path's actions from the same seed."""
    torch.manual_seed(0)
    policy = ActorCritic(BOX4, action_space, normalize_obs=normalize_obs)
    with torch.no_grad():
        policy.actor[-1].weight.mul_(100)  # spread logits: the draws then depend on the network
    if normalize_obs:
        policy.update_normalizer(torch.from_numpy(_obs(64, seed=1)) * 3 + 1)
    obs = torch.from_numpy(_obs(4))
    fast, slow = _explore_both_ways(policy, obs, steps=300)
    if policy.discrete:
        assert torch.equal(fast, slow)
        assert len(torch.unique(fast)) == 3
    else:
        torch.testing.assert_close(fast, slow)


def test_explore_takes_the_numpy_path_only_where_it_may(monkeypatch):
    """Test that explore skips nn.Linear.forward without gradients, and a hook on the actor still runs."""
    calls = []
    forward = nn.Linear.forward
    monkeypatch.setattr(nn.Linear, "forward", lambda self, x: calls.append(1) or forward(self, x))
    policy = ActorCritic(BOX4, gym.spaces.Discrete(2))
    obs = torch.from_numpy(_obs(4))
    with torch.no_grad():
        policy.explore(obs)
    assert calls == []
    seen = []
    policy.actor.register_forward_hook(lambda module, args, out: seen.append(out.shape))
    with torch.no_grad():
        policy.explore(obs)
    assert seen == [(4, 2)] and len(calls) == 3
    policy.actor = mlp(4, (16,), 2)  # a replaced actor is mirrored afresh
    calls.clear()
    with torch.no_grad():
        action = policy.explore(obs)
    assert calls == [] and action.shape == (4,)


def test_replaced_parameters_are_mirrored_afresh():
    """Test that a new Parameter object (``assign=True`` loads, assignment) or a removed bias is seen."""
    torch.manual_seed(0)
    net, other = mlp(4, (8,), 2), mlp(4, (8,), 2)
    fast, x = NumpyMLP(net), _obs(3)
    assert fast(x) is not None
    net.load_state_dict(other.state_dict(), assign=True)
    np.testing.assert_allclose(fast(x), other(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    net[2].weight = nn.Parameter(torch.ones(2, 8))
    np.testing.assert_allclose(fast(x), net(torch.from_numpy(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    net[2].bias = None
    assert fast(x) is None  # no bias: not a layout it mirrors


def test_a_leading_activation_is_refused_and_the_input_left_alone():
    """Test that a network starting with an activation takes torch's path (the numpy pass works in place)."""
    x = _obs(3)
    assert NumpyMLP(nn.Sequential(nn.Tanh(), nn.Linear(4, 2)))(x) is None
    assert np.array_equal(x, _obs(3))


def test_copies_and_pickles_sample_like_the_original():
    """Test that a deepcopy or a pickle round trip of a policy that has explored draws the original's actions."""
    import copy
    import io

    torch.manual_seed(0)
    policy = ActorCritic(BOX4, gym.spaces.Discrete(3), normalize_obs=False)
    with torch.no_grad():
        policy.actor[-1].weight.mul_(100)
    obs = torch.from_numpy(_obs(4))
    with torch.no_grad():
        policy.explore(obs)  # builds the numpy views and the noise buffer
    saved = io.BytesIO()
    torch.save(policy, saved)
    saved.seek(0)
    copies = [copy.deepcopy(policy), torch.load(saved, weights_only=False)]
    expected, _ = _explore_both_ways(policy, obs, steps=200)
    for other in copies:
        actions, _ = _explore_both_ways(other, obs, steps=200)
        assert torch.equal(actions, expected)


def test_inference_mode_then_no_grad():
    """Test that explore works under inference_mode and afterwards under no_grad (the noise buffer is reused)."""
    policy = ActorCritic(BOX4, gym.spaces.Discrete(2))
    obs = torch.from_numpy(_obs(4))
    with torch.inference_mode():
        first = policy.explore(obs)
    with torch.no_grad():
        second = policy.explore(obs)
    assert first.shape == second.shape == (4,)


def test_wrong_observation_width_raises_as_on_the_torch_path():
    """Test that observations of the wrong width raise instead of broadcasting against the normalizer."""
    policy = ActorCritic(BOX4, gym.spaces.Discrete(2))
    with torch.no_grad(), pytest.raises(RuntimeError, match="invalid for input of size"):
        policy.explore(torch.zeros(4, 1))
