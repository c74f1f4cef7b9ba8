"""MLPs with their backward written out: ``relu_mlp`` for SAC's critics, the layers of the written-out losses.

:func:`mlp_forward` and :func:`mlp_backward` run ``Linear, act, ..., Linear`` (ReLU or tanh)
and its gradient as plain tensor ops, for code that differentiates a whole loss by hand
(PPO's, ``fast/ppo.py``; SAC's, ``fast/sac.py``, its actor and critics); :func:`relu_mlp`
wraps them in one ``autograd.Function`` for SAC's critics where the loss goes through autograd.

Why for SAC: its update (256x256 networks, batch 256) is bound by its matrix products, and on
CPUs two things around them cost more than autograd's generic rules expect:

- **Narrow products.** A product whose result has a few columns and many rows runs several
  times slower than the same product taken transposed (MKL, one thread; Pendulum's sizes:
  the critics' last-layer weight gradient, their first-layer input gradient). Autograd
  takes the orientation its formulas are written in; here each product is taken in the
  fast one (:func:`_matmul`).
- **New activation buffers.** ``relu`` and its backward each write a new buffer. Here ReLU
  works in place on the output of the product just computed, and its backward in place on
  the gradient the product just wrote (``threshold_backward`` into its own input).

The values are the same products in the same precision; ``tests/fast/test_mlp_grad.py``
checks outputs and every gradient against autograd's, and ``docs/fast_path.md`` has the
figures (``python -m benchmarks.sac_loss``). Where SAC's loss goes through autograd its actor's
layers stay ``nn.Linear``: through :func:`relu_mlp` alone its update was no faster, its
products being half the critics' and its ReLUs a quarter (the whole loss written out,
``fast/sac.py``, is what made the actor's gradient cheaper).

Without gradients (the target critics) the forward is the same ops with ReLU in place, and
no ``autograd.Function`` is involved.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn.modules import module as _module

from rl_lightning.fast.switch import on_for

#: Results with fewer columns than this (and at least as many rows) are computed transposed.
NARROW = 16


def has_call_hooks(modules: Iterable[nn.Module]) -> bool:
    """Whether a forward or backward hook (or pre-hook) would run on a call of any of ``modules``.

    The module's own hooks or global ones. Code that evaluates a network without calling its
    modules checks this first, so a hook a user registered still sees every call and every
    gradient (the code then takes the modules' own forward and autograd's backward).
    """
    m = _module
    global_hooks = (
        m._global_forward_hooks,
        m._global_forward_pre_hooks,
        m._global_backward_hooks,
        m._global_backward_pre_hooks,
    )
    return any(global_hooks) or any(has_own_hooks(module) for module in modules)


def has_own_hooks(module: nn.Module) -> bool:
    """Whether ``module`` has a forward or backward hook (or pre-hook) of its own, not counting global ones."""
    return bool(
        module._forward_hooks or module._forward_pre_hooks or module._backward_hooks or module._backward_pre_hooks
    )


def mlp_params(net: nn.Module, activation: type[nn.Module]) -> list[torch.Tensor] | None:
    """A plain MLP's tensors ``(weight 0, bias 0, weight 1, ...)``, or ``None`` where it is not one.

    Plain means what :func:`~rl_lightning.nets.mlp.mlp` builds: an ``nn.Sequential`` of
    ``nn.Linear`` (with bias) and ``activation``, alternating, first and last ``nn.Linear``
    (exact classes: a subclass may compute something else), with no hook of their own that
    would see their calls (global hooks are the caller's to check). Code that evaluates the
    network by hand may then compute it in its place.
    """
    if type(net) is not nn.Sequential or has_own_hooks(net):
        return None
    params: list[torch.Tensor] = []
    expected = nn.Linear
    # Plain loops and attribute reads: this runs on every update.
    for module in net._modules.values():
        if type(module) is not expected or has_own_hooks(module):
            return None
        if expected is nn.Linear:
            layer = module._parameters
            if layer["bias"] is None:
                return None
            params += (layer["weight"], layer["bias"])
        expected = activation if expected is nn.Linear else nn.Linear
    return params if expected is not nn.Linear else None  # None: empty, or an activation last


def _matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` (2-D or batched 3-D), taken as ``(b^T a^T)^T`` when the result is narrow and tall (see above)."""
    if b.shape[-1] < NARROW <= a.shape[-2]:
        return torch.matmul(b.mT, a.mT).mT
    return torch.matmul(a, b)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    # nn.Linear's layout: weight [out, in] (or stacked [n, out, in]), bias [out] (or [n, out]).
    if weight.dim() == 2:
        return torch.addmm(bias, x, weight.t())
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


#: The hidden activations :func:`mlp_forward` and :func:`mlp_backward` know.
ACTIVATIONS = ("relu", "tanh")


def mlp_forward(
    x: torch.Tensor, params: Sequence[torch.Tensor], activation: str = "relu"
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """``x`` through ``Linear, activation, ..., Linear``: the output and the inputs of every layer.

    Args:
        x: Inputs ``[B, in]`` (or ``[n, B, in]`` with stacked weights).
        params: ``(weight 0, bias 0, weight 1, ...)`` in ``nn.Linear``'s layout (or stacked).
        activation: ``"relu"`` or ``"tanh"``, between layers.

    Returns:
        The output, and the inputs of every layer (``x``, then each hidden activation's output),
        which :func:`mlp_backward` needs.
    """
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}.")
    inputs = [x]
    last = len(params) // 2 - 1
    for i in range(last + 1):
        x = _linear(x, params[2 * i], params[2 * i + 1])
        if i < last:
            # In place: the product's output is still in cache, and nothing else holds it.
            x = x.relu_() if activation == "relu" else x.tanh_()
            inputs.append(x)
    return x, inputs


def mlp_backward(
    grad: torch.Tensor,
    inputs: Sequence[torch.Tensor],
    weights: Sequence[torch.Tensor],
    needs: Sequence[bool],
    activation: str = "relu",
) -> list[torch.Tensor | None]:
    """The gradients of :func:`mlp_forward` from its output's ``grad``.

    Args:
        grad: Gradient of the output.
        inputs: The layers' inputs, as :func:`mlp_forward` returned them.
        weights: The layers' weights.
        needs: Which of ``(x, weight 0, bias 0, weight 1, ...)`` to compute.
        activation: The forward's activation.

    Returns:
        Gradients ``(x, weight 0, bias 0, weight 1, ...)``; ``None`` where not ``needs``.
    """
    grads: list[torch.Tensor | None] = [None] * len(needs)
    for i in reversed(range(len(weights))):
        x, weight = inputs[i], weights[i]
        if needs[1 + 2 * i]:
            grads[1 + 2 * i] = _matmul(grad.mT, x)
        if needs[2 + 2 * i]:
            grads[2 + 2 * i] = grad.sum(-2)
        if i == 0:
            if needs[0]:
                grads[0] = _matmul(grad, weight)
            break
        grad_in = _matmul(grad, weight)
        # The activation's backward in place, from its output: ReLU's zero where it was zero
        # (its input <= 0), tanh's times 1 - tanh^2.
        if activation == "relu":
            grad = torch.ops.aten.threshold_backward.grad_input(grad_in, x, 0, grad_input=grad_in)
        else:
            grad = torch.ops.aten.tanh_backward.grad_input(grad_in, x, grad_input=grad_in)
    return grads


class _ReLUMLP(torch.autograd.Function):
    """Linear, ReLU, ..., Linear with the backward written out (see the module docstring)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        out, inputs = mlp_forward(x, params)
        ctx.save_for_backward(*inputs, *params[0::2])
        return out

    @staticmethod
    @once_differentiable  # the backward's own ops are not tracked: a double backward raises
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        saved = ctx.saved_tensors
        layers = len(saved) // 2
        return tuple(mlp_backward(grad, saved[:layers], saved[layers:], ctx.needs_input_grad))


class _MinOverNets(torch.autograd.Function):
    """``min_i`` of stacked one-output networks, the gradient to the input only, through each row's minimum."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, *params: torch.Tensor) -> torch.Tensor:
        out, inputs = mlp_forward(x, params)
        values, index = out.squeeze(-1).min(0)
        ctx.save_for_backward(index, *inputs, *params[0::2])
        return values

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        index, *saved = ctx.saved_tensors
        layers = len(saved) // 2
        return (min_input_grad(grad, index, saved[:layers], saved[layers:]), *[None] * (2 * layers))


def min_input_grad(
    grad: torch.Tensor, index: torch.Tensor, inputs: Sequence[torch.Tensor], weights: Sequence[torch.Tensor]
) -> torch.Tensor:
    """The input gradient of ``min_i`` over stacked one-output networks (:func:`min_over_nets`), the weights held fixed.

    Args:
        grad: Gradient of the per-row minimum ``[B]``.
        index: Which network gave each row's minimum ``[B]`` (``min(0).indices``).
        inputs: The layers' inputs, as :func:`mlp_forward` returned them (``[n, B, ...]``).
        weights: The layers' stacked weights.

    Returns:
        The gradient of the inputs ``[n, B, in]`` (zero where a network was not the minimum).
    """
    grad_x = inputs[0].new_zeros(inputs[0].shape)
    needs = [True] + [False] * (2 * len(weights))
    for net in range(grad_x.shape[0]):
        # min's gradient reaches only the network that gave each row's minimum (torch's
        # min(0) backward, the same index), so each network back-propagates its own rows.
        rows = (index == net).nonzero().squeeze(-1)
        if rows.numel():
            net_inputs = [x[net].index_select(0, rows) for x in inputs]
            net_grad = grad.index_select(0, rows).unsqueeze(-1)
            grad_rows = mlp_backward(net_grad, net_inputs, [w[net] for w in weights], needs)[0]
            grad_x[net].index_copy_(0, rows, grad_rows)
    return grad_x


def relu_mlp(x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor]) -> torch.Tensor:
    """``x`` through ``Linear, ReLU, ..., Linear`` with the given weights, as ``nn.Linear`` s would compute it.

    Args:
        x: Inputs ``[B, in]``, or ``[n, B, in]`` with stacked weights (one network per ``n``).
        weights: Per layer ``[out, in]``, or stacked ``[n, out, in]``.
        biases: Per layer ``[out]``, or stacked ``[n, out]``.

    Returns:
        ``[B, out]`` (or ``[n, B, out]``), with gradients to whichever of ``x``, weights and
        biases require them.
    """
    params = [p for pair in zip(weights, biases, strict=True) for p in pair]
    if torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in params)):
        return _ReLUMLP.apply(x, *params)
    with torch.no_grad():
        return mlp_forward(x, params)[0]


def min_over_nets(x: torch.Tensor, weights: Sequence[torch.Tensor], biases: Sequence[torch.Tensor]) -> torch.Tensor:
    """``min_i`` over stacked one-output ReLU MLPs, held fixed: the gradient goes to ``x`` alone.

    SAC's actor loss takes the smaller of the twin critics' values per row. Its gradient
    reaches only the critic that gave each row's minimum, so instead of back-propagating
    both critics over every row (half of it zeros), each critic back-propagates its own
    rows: half the rows through the 256x256 layer's input-gradient product. The weights get no
    gradient (detached, whether or not they require one), as in the actor loss.

    Args:
        x: Inputs ``[n, B, in]``.
        weights: Stacked per layer ``[n, out, in]``, the last with ``out = 1``.
        biases: Stacked per layer ``[n, out]``.

    Returns:
        ``[B]``: per row, the minimum over the ``n`` networks (``relu_mlp(...).squeeze(-1).min(0).values``).
    """
    params = [p.detach() for pair in zip(weights, biases, strict=True) for p in pair]
    if torch.is_grad_enabled() and x.requires_grad:
        return _MinOverNets.apply(x, *params)
    with torch.no_grad():
        return mlp_forward(x, params)[0].squeeze(-1).min(0).values


def ensemble_forward(layers: Sequence[nn.Module], x: torch.Tensor, detach_params: bool) -> torch.Tensor | None:
    """Stacked ReLU critics (``QEnsemble``'s layers, each with ``weight`` and ``bias``) through :func:`relu_mlp`.

    Returns:
        The output ``[n, B, out]``, or ``None`` (the switch is off, or a hook watches a layer:
        call the layers).
    """
    if not on_for("torch") or has_call_hooks(layers):
        return None
    weights, biases = [layer.weight for layer in layers], [layer.bias for layer in layers]
    if detach_params:
        weights, biases = [w.detach() for w in weights], [b.detach() for b in biases]
    return relu_mlp(x, weights, biases)


def ensemble_min(layers: Sequence[nn.Module], x: torch.Tensor) -> torch.Tensor | None:
    """:func:`min_over_nets` of stacked ReLU critics, or ``None`` (as in :func:`ensemble_forward`)."""
    if not on_for("torch") or has_call_hooks(layers):
        return None
    return min_over_nets(x, [layer.weight for layer in layers], [layer.bias for layer in layers])
