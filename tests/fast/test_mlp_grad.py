"""Tests for mlp_grad: relu_mlp and mlp_forward/mlp_backward give the outputs and gradients of nn.Linear with
ReLU or tanh through autograd; hooks are respected."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import nn

from rl_lightning.fast.mlp_grad import has_call_hooks, min_over_nets, mlp_backward, mlp_forward, relu_mlp
from rl_lightning.nets.sac import QEnsemble


def _reference(
    x: torch.Tensor, weights: list[torch.Tensor], biases: list[torch.Tensor], activation=torch.relu
) -> torch.Tensor:
    """The MLP as autograd sees it: per layer ``x W^T + b`` (batched for stacked weights), ``activation`` between."""
    for i, (w, b) in enumerate(zip(weights, biases, strict=True)):
        x = x @ w.mT + b.unsqueeze(-2)
        if i < len(weights) - 1:
            x = activation(x)
    return x


def _layers(sizes: list[int], stacked: int | None, seed: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    lead = () if stacked is None else (stacked,)
    weights = [torch.randn(*lead, o, i, generator=generator) / i**0.5 for i, o in itertools.pairwise(sizes)]
    biases = [torch.randn(*lead, o, generator=generator) * 0.1 for o in sizes[1:]]
    return weights, biases


# Narrow first and last layers (3 or 4 inputs, 1 or 2 outputs) take the transposed products;
# 300 rows and 40-wide layers check that wide ones don't, and that nothing assumes a square shape.
SHAPES = [([4, 256, 256, 1], 256), ([3, 64, 2], 300), ([40, 24, 32, 40], 8)]


@pytest.mark.parametrize("sizes, rows", SHAPES)
@pytest.mark.parametrize("stacked", [None, 2])
@pytest.mark.parametrize("grad_of", ["all", "input", "params"])
def test_outputs_and_gradients_equal_autograds(sizes, rows, stacked, grad_of):
    """Test that relu_mlp's output and the gradients of input, weights and biases (those asked for) are autograd's."""
    weights, biases = _layers(sizes, stacked, seed=rows)
    lead = () if stacked is None else (stacked,)
    x = torch.randn(*lead, rows, sizes[0], generator=torch.Generator().manual_seed(1))
    leaves = {"input": [x], "params": weights + biases, "all": [x, *weights, *biases]}[grad_of]
    for leaf in leaves:
        leaf.requires_grad_(True)
    upstream = torch.randn(*x.shape[:-1], sizes[-1], generator=torch.Generator().manual_seed(2))

    expected = _reference(x, weights, biases)
    expected_grads = torch.autograd.grad((expected * upstream).sum(), leaves)
    out = relu_mlp(x, weights, biases)
    grads = torch.autograd.grad((out * upstream).sum(), leaves)

    torch.testing.assert_close(out, expected)
    for got, want in zip(grads, expected_grads, strict=True):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("sizes, rows", SHAPES)
@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_mlp_forward_and_backward_equal_autograds(sizes, rows, activation):
    """Test mlp_forward's output and mlp_backward's gradients (input, weights, biases) against autograd's."""
    weights, biases = _layers(sizes, None, seed=rows)
    x = torch.randn(rows, sizes[0], generator=torch.Generator().manual_seed(1))
    leaves = [t.requires_grad_(True) for t in (x, *weights, *biases)]
    upstream = torch.randn(rows, sizes[-1], generator=torch.Generator().manual_seed(2))
    expected = _reference(x, weights, biases, getattr(torch, activation))
    expected_grads = torch.autograd.grad((expected * upstream).sum(), leaves)
    with torch.no_grad():
        params = [p for pair in zip(weights, biases, strict=True) for p in pair]
        out, inputs = mlp_forward(x, params, activation)
        grads = mlp_backward(upstream, inputs, weights, [True] * (1 + len(params)), activation)
    torch.testing.assert_close(out, expected.detach())
    # mlp_backward's order is (x, weight 0, bias 0, ...); the leaves' (x, weights..., biases...).
    reordered = [grads[0], *grads[1::2], *grads[2::2]]
    for got, want in zip(reordered, expected_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="activation must be one of"):
        mlp_forward(x, params, "gelu")


def test_gradients_accumulate_into_parameters_across_calls():
    """Test that two calls' backward passes add up in .grad, as for nn.Linear (the product may come back transposed)."""
    weights, biases = _layers([4, 32, 1], 2, seed=3)
    params = [nn.Parameter(p) for p in weights + biases]
    x = torch.randn(2, 16, 4)
    for _ in range(2):
        relu_mlp(x, params[:2], params[2:]).square().sum().backward()
    expected = torch.autograd.grad(2 * _reference(x, params[:2], params[2:]).square().sum(), params)
    for param, want in zip(params, expected, strict=True):
        torch.testing.assert_close(param.grad, want, rtol=1e-4, atol=1e-5)


def test_without_gradients_the_input_is_left_alone_and_no_graph_is_built():
    """Test that the no-grad forward (ReLU in place) equals autograd's and writes neither input nor parameters."""
    weights, biases = _layers([3, 16, 16, 2], None, seed=4)
    x = torch.randn(5, 3)
    before = [t.clone() for t in [x, *weights, *biases]]
    out = relu_mlp(x, weights, biases)
    torch.testing.assert_close(out, _reference(x, weights, biases))
    assert out.grad_fn is None
    for now, then in zip([x, *weights, *biases], before, strict=True):
        assert torch.equal(now, then)
    with torch.no_grad():  # parameters requiring grad, under no_grad: no graph either
        assert relu_mlp(x, [w.requires_grad_() for w in weights], biases).grad_fn is None


def test_a_saved_activation_changed_before_backward_is_an_error():
    """Test that modifying the input in place after the forward makes backward fail, as autograd's own ops do."""
    weights, biases = _layers([3, 8, 1], None, seed=5)
    x = torch.randn(4, 3, requires_grad=True)
    y = x * 1.0
    out = relu_mlp(y, weights, biases)
    y.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()


def test_q_ensemble_hooks_see_every_layer_call_and_results_do_not_change():
    """Test that a hook on a critic layer (or a global one) makes QEnsemble call its layers, with equal results."""
    torch.manual_seed(0)
    critics = QEnsemble(3, 1, (16, 16))
    obs, action = torch.randn(6, 3), torch.randn(6, 1, requires_grad=True)
    fast = critics(obs, action)
    (grad_fast,) = torch.autograd.grad(fast.sum(), action)
    assert not has_call_hooks(critics.layers)

    seen = []
    handle = critics.layers[1].register_forward_hook(lambda module, args, output: seen.append(output.shape))
    hooked = critics(obs, action)
    (grad_hooked,) = torch.autograd.grad(hooked.sum(), action)
    handle.remove()
    assert seen == [torch.Size([2, 6, 16])]
    torch.testing.assert_close(hooked, fast)
    torch.testing.assert_close(grad_hooked, grad_fast)

    seen.clear()
    handle = nn.modules.module.register_module_forward_hook(lambda module, args, output: seen.append(type(module)))
    try:
        assert has_call_hooks(critics.layers)
        torch.testing.assert_close(critics(obs, action), fast)
    finally:
        handle.remove()
    assert seen.count(type(critics.layers[0])) == 3
    assert not has_call_hooks(critics.layers)


@pytest.mark.parametrize("nets", [2, 3])
@pytest.mark.parametrize("case", ["mixed", "one net always lowest"])
def test_min_over_nets_equals_autograds_min_and_leaves_the_weights_alone(nets, case):
    """Test that min_over_nets' values and input gradient are those of min(0) through autograd, weights untouched."""
    weights, biases = _layers([4, 32, 32, 1], nets, seed=nets)
    if case == "one net always lowest":
        biases[-1][0] -= 100.0
    params = [nn.Parameter(p.clone()) for p in weights + biases]
    x = torch.randn(nets, 40, 4, generator=torch.Generator().manual_seed(6)).requires_grad_()
    upstream = torch.randn(40, generator=torch.Generator().manual_seed(7))

    # The networks' values through relu_mlp (checked against autograd's above), so that both
    # sides pick each row's minimum from the same numbers; min(0) and its backward by autograd.
    reference = relu_mlp(x, [p.detach() for p in params[:3]], [p.detach() for p in params[3:]]).squeeze(-1)
    expected = reference.min(0).values
    (expected_grad,) = torch.autograd.grad((expected * upstream).sum(), x)
    out = min_over_nets(x, params[:3], params[3:])
    (out * upstream).sum().backward()

    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(x.grad, expected_grad, rtol=1e-4, atol=1e-5)
    assert all(p.grad is None for p in params)
    if case == "one net always lowest":
        assert x.grad[1:].abs().sum() == 0 and x.grad[0].abs().sum() > 0
    else:  # every network gave some rows' minimum, so each back-propagated some rows
        assert len(reference.min(0).indices.unique()) == nets


def test_q_ensemble_min_q_equals_the_detached_forward_min():
    """Test that QEnsemble.min_q matches forward(detach_params=True).min(0) in value and action gradient."""
    torch.manual_seed(1)
    critics = QEnsemble(3, 2, (32, 32))
    obs, action = torch.randn(50, 3), torch.randn(50, 2, requires_grad=True)
    expected = critics(obs, action, detach_params=True).min(0).values
    (expected_grad,) = torch.autograd.grad(expected.square().sum(), action)
    got = critics.min_q(obs, action)
    (grad,) = torch.autograd.grad(got.square().sum(), action)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-4, atol=1e-5)
    assert all(p.grad is None for p in critics.parameters())
    with torch.no_grad():
        torch.testing.assert_close(critics.min_q(obs, action), expected.detach())


def test_a_backward_hook_on_a_critic_layer_sees_the_gradient():
    """Test that a full backward hook on a critic layer makes QEnsemble take autograd's path: the hook sees it."""
    torch.manual_seed(2)
    critics = QEnsemble(3, 1, (16, 16))
    obs, action = torch.randn(6, 3), torch.randn(6, 1)
    critics(obs, action).sum().backward()
    expected = [p.grad.clone() for p in critics.parameters()]
    critics.zero_grad()
    seen = []
    critics.layers[0].register_full_backward_hook(lambda module, grad_in, grad_out: seen.append(grad_out[0].shape))
    assert has_call_hooks(critics.layers)
    critics(obs, action).sum().backward()
    assert seen == [torch.Size([2, 6, 16])]
    for param, want in zip(critics.parameters(), expected, strict=True):
        torch.testing.assert_close(param.grad, want)


def test_a_double_backward_is_refused():
    """Test that differentiating relu_mlp's gradient again raises instead of returning a wrong second derivative."""
    weights, biases = _layers([3, 8, 1], None, seed=6)
    x = torch.randn(4, 3, requires_grad=True)
    (grad,) = torch.autograd.grad(relu_mlp(x, weights, biases).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad"):
        grad.sum().backward()
