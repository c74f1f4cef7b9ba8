"""PPO's minibatch loss of the default actor-critic, networks included, as one autograd node, its gradient written out.

The plain path (``rl_lightning/algos/ppo_loss.py``) evaluates the networks with
``policy.evaluate_actions`` and lets autograd record the loss op by op. On a CartPole-sized
minibatch (128 rows, 64x64 tanh networks, one CPU thread) autograd's bookkeeping for those
~40 small ops costs more than their arithmetic. :func:`minibatch_loss` computes the same
forward as plain tensor ops and writes its backward out (``fast/mlp_grad.py`` for the
layers), and :func:`accumulate_grads` adds the gradients to ``.grad`` without autograd's
engine where that gives the engine's result. ``tests/fast/test_ppo.py`` holds every value
and gradient against the plain path; ``docs/fast_path.md`` has the figures.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from rl_lightning.fast.lightning import add_to_grads, engine_free_leaves
from rl_lightning.fast.mlp_grad import has_call_hooks, mlp_backward, mlp_forward, mlp_params
from rl_lightning.fast.switch import is_class, on_for

#: The policy class whose default networks this path mirrors.
ACTOR_CRITIC = "rl_lightning.nets.actor_critic.ActorCritic"

#: The coefficients :func:`minibatch_loss` takes, in :func:`_objective`'s order.
COEFS = ("clip_coef", "ent_coef", "vf_coef", "norm_adv", "clip_vloss")


def _objective(
    log_prob, entropy, value, old_log_prob, old_value, advantage, returns,
    clip_coef, ent_coef, vf_coef, norm_adv, clip_vloss,
):  # fmt: skip
    """The clipped objective and its gradient: :func:`~rl_lightning.algos.ppo_loss.ppo_loss`, as plain tensor ops.

    Written for a CPU's per-op cost (measured in ``docs/fast_path.md``), with the same values:

    - Constants are cached 0-dim tensors of the inputs' dtype (:func:`_constant`): a Python
      number in a binary op becomes a double tensor cast on every call.
    - The five diagnostics are the row means of one ``[5, B]`` stack, and the loss their
      dot product with the coefficients: two calls instead of five means, a stack and four
      scalar ops.

    Returns:
        ``(loss, diagnostics, log_prob_grad, value_grad, entropy_grad)``: the gradients of
        ``loss`` with respect to each row's log-probability and value (``[B]``), and to each
        row's entropy (one number, the same for every row).
    """
    n = log_prob.shape[0]
    dtype, device = log_prob.dtype, log_prob.device

    def c(value):
        return _constant(value, dtype, device)

    if norm_adv and n > 1:
        advantage = (advantage - advantage.mean()) / (advantage.std() + c(1e-8))
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    unclipped = advantage * ratio
    clipped = advantage * ratio.clamp(1 - clip_coef, 1 + clip_coef)
    # min(unclipped, clipped): where they tie the ratio is inside the clip range (or the
    # advantage is 0), so the gradient is the unclipped term's wherever it is the minimum.
    unclipped_is_min = unclipped <= clipped
    surrogate = torch.where(unclipped_is_min, unclipped, clipped)
    error = value - returns
    if clip_vloss:
        step = value - old_value
        clipped_error = old_value + step.clamp(-clip_coef, clip_coef) - returns
        squared, clipped_squared = error * error, clipped_error * clipped_error
        value_term = torch.max(squared, clipped_squared)
        # d/dvalue of 0.5 * max(e^2, c^2): e where e^2 wins, c where c^2 wins and the clamp
        # passes (|step| <= clip_coef), half of each on a tie.
        weight = (squared > clipped_squared).to(dtype) + c(0.5) * (squared == clipped_squared)
        value_grad = weight * error + (c(1.0) - weight) * (step.abs() <= c(clip_coef)) * clipped_error
    else:
        value_term = error * error
        value_grad = error
    ratio_minus_one = ratio - c(1.0)
    # Per row: surrogate, value error term, entropy, the unbiased low-variance KL estimator k3
    # (Schulman, "Approximating KL Divergence") and whether the ratio left the clip range.
    clipped_out = (ratio_minus_one.abs() > c(clip_coef)).to(dtype)
    terms = torch.stack([surrogate, value_term, entropy, ratio_minus_one - log_ratio, clipped_out])
    # policy_loss = -mean(surrogate), value_loss = 0.5 * mean(value term), then entropy, approx_kl, clip_fraction.
    diagnostics = terms.mean(1) * c((-1.0, 0.5, 1.0, 1.0, 1.0))
    weights = _constant((1.0, vf_coef, -ent_coef), diagnostics.dtype, device)  # its dtype under autocast
    loss = diagnostics[:3].dot(weights)  # policy + vf_coef * value - ent_coef * entropy
    # dL/dlog_prob = -(1/n) * advantage * ratio where the unclipped term is the minimum.
    log_prob_grad = torch.where(unclipped_is_min, unclipped, c(0.0)) * c(-1.0 / n)
    return loss, diagnostics, log_prob_grad, value_grad * c(vf_coef / n), -ent_coef / n


@functools.lru_cache(maxsize=256)
def _constant(value: float | tuple[float, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.tensor(value)`` of this dtype and device, made once (callers never write to it)."""
    return torch.tensor(value, dtype=dtype, device=device)


_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def _log_prob_entropy_grads(
    policy: nn.Module, out: torch.Tensor, action: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, Callable[[torch.Tensor, float], tuple[torch.Tensor, torch.Tensor | None]]]:
    """``policy.log_prob_entropy(out, action)``, and its gradient written out for a loss differentiated by hand.

    Returns:
        ``(log_prob, entropy, grads)``: ``grads(log_prob_grad, entropy_grad)`` maps the
        loss's gradient with respect to each row's log-probability (``[B]``) and to each
        row's entropy (one number for every row) to its gradient with respect to ``out``
        and, for continuous actions, to ``log_std`` (``None`` for discrete ones). The
        formulas are the derivatives autograd takes through the log-probability and
        entropy (``tests/fast/test_ppo.py`` compares); calling ``grads`` is optional.
    """
    if policy.discrete:
        log_p = torch.log_softmax(out, -1)
        index = action.long().unsqueeze(-1)
        log_prob = log_p.gather(-1, index).squeeze(-1)
        # Clamped like Categorical.logits (for the entropy only, so the policy gradient
        # does not pass through the clamp), so a probability of 0 gives entropy 0, not nan.
        log_p = log_p.clamp(min=torch.finfo(out.dtype).min)
        p = log_p.exp()
        entropy = -(p * log_p).sum(-1)

        def grads(log_prob_grad: torch.Tensor, entropy_grad: float) -> tuple[torch.Tensor, None]:
            # log_softmax's backward: d log p_a / d out_k = [k = a] - p_k, and
            # d entropy / d out_k = -p_k (log p_k + entropy).
            grad = -p * (log_prob_grad.unsqueeze(-1) + entropy_grad * (log_p + entropy.unsqueeze(-1)))
            return grad.scatter_add_(-1, index, log_prob_grad.unsqueeze(-1)), None

        return log_prob, entropy, grads
    log_std = policy.log_std.expand_as(out)
    diff = action - out
    twice_var = 2 * (2 * log_std).exp()
    log_prob = (-(diff**2) / twice_var - log_std - _HALF_LOG_2PI).sum(-1)
    entropy = (0.5 + _HALF_LOG_2PI + log_std).sum(-1)

    def grads(log_prob_grad: torch.Tensor, entropy_grad: float) -> tuple[torch.Tensor, torch.Tensor]:
        # d log_prob / d mean = (a - mean) / var; d log_prob / d log_std = (a - mean)^2 / var - 1;
        # d entropy / d log_std = 1 on every row.
        scaled = diff * (2 / twice_var) * log_prob_grad.unsqueeze(-1)
        log_std_grad = (scaled * diff).sum(0) - log_prob_grad.sum() + entropy_grad * out.shape[0]
        return scaled, log_std_grad

    return log_prob, entropy, grads


def tanh_layers(policy: nn.Module) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
    """An actor-critic's actor and critic tensors ``(weight 0, bias 0, weight 1, ...)``, when both are default networks.

    Default means what :func:`~rl_lightning.nets.mlp.mlp` builds with its default
    activation: an ``nn.Sequential`` of ``nn.Linear`` (with bias) and ``nn.Tanh``,
    alternating, first and last ``nn.Linear``; and no hook, the modules' own or a global
    one, that would see their calls. A loss that differentiates the networks by hand
    (:func:`minibatch_loss`) may then compute them in their place; ``None``
    otherwise, and the plain path calls them.
    """
    if has_call_hooks(()):  # a global hook
        return None
    actor, critic = mlp_params(policy.actor, nn.Tanh), mlp_params(policy.critic, nn.Tanh)
    return None if actor is None or critic is None else (actor, critic)


class _ActorCriticObjective(torch.autograd.Function):
    """The loss of a default actor-critic's minibatch, networks included, as one autograd node.

    :func:`minibatch_loss` takes this path when the policy's actor and critic are the default
    tanh MLPs (:func:`tanh_layers`):
    the networks' forward (:func:`~rl_lightning.fast.mlp_grad.mlp_forward`), the action
    distribution's log-probability and entropy, and the clipped objective run as plain
    tensor ops, and the gradients of all of them are written out
    (:func:`~rl_lightning.fast.mlp_grad.mlp_backward`). Autograd records one node instead of
    about forty (six products, four tanh, the distribution, the objective, the views between).
    The values and every gradient are those of the plain path (``tests/fast/test_ppo.py``).
    """

    @staticmethod
    def forward(
        ctx, policy, features, action, old_log_prob, old_value, advantage, returns, coefs, log_std, n_actor, *params
    ):  # fmt: skip
        # log_std is an input so that autograd knows it (the distribution reads policy.log_std);
        # params are the actor's n_actor tensors, then the critic's.
        actor_params, critic_params = params[:n_actor], params[n_actor:]
        out, actor_inputs = mlp_forward(features, actor_params, "tanh")
        value, critic_inputs = mlp_forward(features, critic_params, "tanh")
        log_prob, entropy, distribution_grads = _log_prob_entropy_grads(policy, out, action)
        loss, diagnostics, log_prob_grad, value_grad, entropy_grad = _objective(
            log_prob, entropy, value.squeeze(-1), old_log_prob, old_value, advantage, returns, *coefs
        )
        out_grad, log_std_grad = distribution_grads(log_prob_grad, entropy_grad)
        # The gradients up to each network's output are known now, the loss being a scalar;
        # backward scales them by the loss's incoming gradient (1 for a plain backward). The
        # backward needs the layers' inputs and weights (not the biases).
        ctx.save_for_backward(
            out_grad, value_grad.unsqueeze(-1), log_std_grad,
            *actor_inputs, *actor_params[0::2], *critic_inputs, *critic_params[0::2],
        )  # fmt: skip
        ctx.actor_layers, ctx.critic_layers = len(actor_inputs), len(critic_inputs)
        ctx.log_std_is_tensor = log_std is not None  # it has an edge in the graph only then
        ctx.mark_non_differentiable(diagnostics)
        return loss, diagnostics

    @staticmethod
    @once_differentiable  # the backward's own ops are not tracked: a double backward raises
    def backward(ctx, grad, _):
        return _ActorCriticObjective._gradients(ctx, grad)

    #: Position of the first parameter among forward's inputs (after ctx).
    _FIRST_PARAM = 10

    @staticmethod
    def _gradients(ctx, grad: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        """The gradients of :meth:`forward`'s inputs; ``grad`` is the loss's (``None``: 1, nothing to scale)."""
        out_grad, value_grad, log_std_grad, *saved = ctx.saved_tensors
        if grad is not None:
            out_grad, value_grad = out_grad * grad, value_grad * grad
            log_std_grad = log_std_grad * grad if log_std_grad is not None else None
        a, c = ctx.actor_layers, ctx.critic_layers
        actor_inputs, actor_weights = saved[:a], saved[a : 2 * a]
        critic_inputs, critic_weights = saved[2 * a : 2 * a + c], saved[2 * a + c :]
        needs = ctx.needs_input_grad
        first = _ActorCriticObjective._FIRST_PARAM
        actor_needs = (needs[1], *needs[first : first + 2 * a])
        critic_needs = (needs[1], *needs[first + 2 * a :])
        actor_grads = mlp_backward(out_grad, actor_inputs, actor_weights, actor_needs, "tanh")
        critic_grads = mlp_backward(value_grad, critic_inputs, critic_weights, critic_needs, "tanh")
        features_grad = actor_grads[0] + critic_grads[0] if needs[1] else None
        log_std_grad = log_std_grad if needs[8] else None
        return (None, features_grad, *[None] * 6, log_std_grad, None, *actor_grads[1:], *critic_grads[1:])

    @staticmethod
    @torch.no_grad()
    def accumulate_grads(node) -> bool:
        """``loss.backward()`` for this node's loss without autograd's engine, where that is the same.

        The engine's fixed cost (graph task, ready queue, one ``AccumulateGrad`` node per
        parameter) is more than the written-out backward's arithmetic on a CartPole-sized
        minibatch (``docs/fast_path.md``). Here the gradients are computed by
        :meth:`_gradients` and added to ``.grad`` as ``AccumulateGrad`` adds them (set when
        there is none, else summed in place). That is the engine's result only when every input
        that needs a gradient is a leaf with no tensor hook, the input features need none, and
        anomaly detection is off; otherwise this returns ``False`` and does nothing, and the
        caller runs ``loss.backward()``. Hooks registered on autograd's graph nodes themselves
        (as DDP's reducer does) cannot be seen from here: callers take this path only where no
        strategy does that (:func:`~rl_lightning.fast.lightning.backward_runs_alone`). The graph is
        kept, as with ``retain_graph=True``.

        Args:
            node: The ``grad_fn`` of a loss this Function returned.

        Returns:
            Whether the gradients were accumulated.
        """
        # One edge per tensor input: features, the five rollout tensors, log_std (if a tensor), parameters.
        edges = node.next_functions
        leaves = engine_free_leaves(edges[6:])
        if edges[0][0] is not None or leaves is None:
            return False
        grads = _ActorCriticObjective._gradients(node, None)
        grads = ((grads[8],) if node.log_std_is_tensor else ()) + grads[_ActorCriticObjective._FIRST_PARAM :]
        add_to_grads(leaves, grads)
        return True


def minibatch_loss(policy: nn.Module, batch: Mapping[str, torch.Tensor], coefs: Mapping[str, float | bool]):
    """The PPO loss of a rollout minibatch under a default actor-critic, or ``None`` where the plain path must run.

    Args:
        policy: An :class:`~rl_lightning.nets.ActorCritic` (its ``actor``, ``critic``,
            ``features``, ``discrete`` and ``log_std`` are read).
        batch: Rollout minibatch with keys ``obs``, ``action``, ``log_prob``, ``value``,
            ``advantage``, ``return``.
        coefs: Every name in :data:`COEFS`.

    Returns:
        ``(loss, diagnostics)`` as the plain :func:`~rl_lightning.algos.ppo_loss.ppo_loss`
        computes them, or ``None``: the switch is off, the actions are not Categorical or
        Gaussian, a network is not a default one or is hooked (:func:`tanh_layers`), or
        autocast is on.
    """
    if not (on_for("torch") and is_class(policy, ACTOR_CRITIC)):
        return None
    if policy.action_kind not in ("categorical", "gaussian"):  # written out for these two distributions only
        return None
    layers = tanh_layers(policy)
    if layers is None:
        return None
    features = policy.features(batch["obs"])
    if torch.is_autocast_enabled(features.device.type):
        return None
    return _ActorCriticObjective.apply(
        policy, features, batch["action"], batch["log_prob"], batch["value"], batch["advantage"], batch["return"],
        tuple(coefs[name] for name in COEFS), policy.log_std, len(layers[0]), *layers[0], *layers[1],
    )  # fmt: skip
