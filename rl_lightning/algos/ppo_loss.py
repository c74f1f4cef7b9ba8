"""The PPO clipped-surrogate loss as a short pure function with a hand-written gradient.

Reference: torchrl's ``ClipPPOLoss`` (``torchrl/objectives/ppo.py``) with
``loss_critic_type="l2"``, ``critic_coef = vf_coef / 2`` and ``normalize_advantage=True``.
``tests/algos/test_ppo_loss.py`` checks that this function's value and gradients equal it
on the same batch, and that the hand-written gradient equals autograd's through the same
formulas (ties included). It is written out because the TensorDict machinery around
``ClipPPOLoss`` nearly doubles the cost of an update step on small networks
(``benchmarks/ppo_loss.py`` measures both).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping

import torch
from torch.autograd.function import once_differentiable

from rl_lightning.nets import ActorCritic
from rl_lightning.nets.mlp_grad import mlp_backward, mlp_forward


@dataclasses.dataclass
class PPOLossTerms:
    """The loss and its diagnostics (all scalar tensors; diagnostics are detached)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_fraction: torch.Tensor
    #: The five diagnostics above stacked in that order (one tensor to keep per update).
    diagnostics: torch.Tensor | None = None


def _objective(
    log_prob, entropy, value, old_log_prob, old_value, advantage, returns,
    clip_coef, ent_coef, vf_coef, norm_adv, clip_vloss,
):  # fmt: skip
    """The clipped objective and its gradient: what :func:`ppo_loss` documents, as plain tensor ops.

    Written for a CPU's per-op cost: 0.21 against 0.26 ms on 128 rows (one thread, tight
    loop) than the same formulas spelled plainly, and ``training_step`` 1.01-1.04x faster
    inside a fit (three interleaved runs); the same values:

    - Constants are cached 0-dim tensors of the inputs' dtype (:func:`_constant`): a Python
      number in a binary op becomes a double tensor cast on every call, 6.8 against 3.4 us.
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


class _ClippedObjective(torch.autograd.Function):
    """The loss as one autograd node: its gradient is written out instead of recorded op by op.

    On a CartPole-sized minibatch (128 rows, 64x64 networks, one CPU thread) the loss's
    ~25 small ops cost more in autograd bookkeeping than in arithmetic; one node with the
    closed-form gradient makes forward + backward ~0.11 ms cheaper per minibatch (0.58 ->
    0.62 ms forward, 0.64 -> 0.51 ms backward, measured interleaved inside a fit; about 3% of
    a CleanRL-settings PPO iteration). The gradients follow autograd's conventions exactly:
    ``torch.min``/``torch.max`` split a tie evenly, ``clamp`` passes the gradient inside its
    closed interval (``tests/algos/test_ppo_loss.py`` compares them with autograd's).
    """

    @staticmethod
    def forward(ctx, *inputs):
        loss, diagnostics, log_prob_grad, value_grad, ctx.entropy_grad = _objective(*inputs)
        ctx.save_for_backward(log_prob_grad, value_grad)
        ctx.mark_non_differentiable(diagnostics)
        return loss, diagnostics

    @staticmethod
    def backward(ctx, grad, _):
        log_prob_grad, value_grad = ctx.saved_tensors
        needs = ctx.needs_input_grad
        return (
            log_prob_grad * grad if needs[0] else None,
            # No gradient at all without an entropy bonus: backward skips the entropy's graph.
            (grad * ctx.entropy_grad).expand_as(log_prob_grad) if needs[1] and ctx.entropy_grad else None,
            value_grad * grad if needs[2] else None,
            *([None] * 9),
        )


class _ActorCriticObjective(torch.autograd.Function):
    """The loss of a default actor-critic's minibatch, networks included, as one autograd node.

    :func:`minibatch_loss` takes this path when the policy's actor and critic are the default
    tanh MLPs (:meth:`ActorCritic.tanh_layers <rl_lightning.nets.ActorCritic.tanh_layers>`):
    the networks' forward (:func:`~rl_lightning.nets.mlp_grad.mlp_forward`), the action
    distribution's log-probability and entropy, and the clipped objective run as plain
    tensor ops, and the gradients of all of them are written out
    (:func:`~rl_lightning.nets.mlp_grad.mlp_backward`). Autograd records one node instead of
    about forty (six products, four tanh, the distribution, the objective, the views between),
    and its engine's per-node work was most of what a CartPole-sized update cost beside the
    arithmetic. With :meth:`accumulate_grads` for the backward, PPO's ``training_step`` at
    CleanRL's CartPole settings ran 1.16-1.18x faster (three runs alternating the two paths
    epoch by epoch inside a fit; ``docs/algos/ppo.md``). The values and every gradient are
    those of the generic path (``tests/algos/test_ppo_loss.py``).
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
        log_prob, entropy, distribution_grads = policy._log_prob_entropy_grads(out, action)
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
        parameter) is about 0.15 ms per call on these CPUs, more than the written-out backward's
        arithmetic on a CartPole-sized minibatch. Here the gradients are computed by
        :meth:`_gradients` and added to ``.grad`` as ``AccumulateGrad`` adds them (set when
        there is none, else summed in place). That is the engine's result only when every input
        that needs a gradient is a leaf with no tensor hook, the input features need none, and
        anomaly detection is off; otherwise this returns ``False`` and does nothing, and the
        caller runs ``loss.backward()``. Hooks registered on autograd's graph nodes themselves
        (as DDP's reducer does) cannot be seen from here: callers take this path only where no
        strategy does that (:func:`~rl_lightning.algos.base.backward_runs_alone`). The graph is
        kept, as with ``retain_graph=True``.

        Args:
            node: The ``grad_fn`` of a loss this Function returned.

        Returns:
            Whether the gradients were accumulated.
        """
        # One edge per tensor input: features, the five rollout tensors, log_std (if a tensor), parameters.
        edges = node.next_functions
        if edges[0][0] is not None or torch.is_anomaly_enabled():
            return False
        leaves = []
        for fn, _ in edges[6:]:
            leaf = getattr(fn, "variable", None) if fn is not None else None
            if fn is not None and (leaf is None or leaf._backward_hooks or leaf._post_accumulate_grad_hooks):
                return False
            leaves.append(leaf)
        grads = _ActorCriticObjective._gradients(node, None)
        grads = ((grads[8],) if node.log_std_is_tensor else ()) + grads[_ActorCriticObjective._FIRST_PARAM :]
        for leaf, grad in zip(leaves, grads, strict=True):
            if leaf is not None and grad is not None:
                if leaf.grad is None:
                    leaf.grad = grad.contiguous()  # AccumulateGrad's layout for a contiguous parameter
                else:
                    leaf.grad += grad
        return True


def ppo_loss(
    log_prob: torch.Tensor,
    entropy: torch.Tensor,
    value: torch.Tensor,
    old_log_prob: torch.Tensor,
    old_value: torch.Tensor,
    advantage: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float = 0.2,
    ent_coef: float = 0.0,
    vf_coef: float = 0.5,
    norm_adv: bool = True,
    clip_vloss: bool = False,
) -> PPOLossTerms:
    """Clipped PPO objective (Schulman et al., 2017, eq. 7 and 9), to be minimized.

    Args:
        log_prob: ``log pi(a|s)`` under the current policy, ``[B]``.
        entropy: Policy entropy at ``s``, ``[B]``.
        value: Current value estimate, ``[B]``.
        old_log_prob: Log-probability under the policy that collected the data, ``[B]``.
        old_value: Value estimate at collection time, ``[B]``.
        advantage: GAE advantages, ``[B]``.
        returns: Value targets (advantage + old value), ``[B]``.
        clip_coef: Ratio clipping epsilon (and value clipping range when ``clip_vloss``).
        ent_coef: Entropy bonus coefficient.
        vf_coef: Value loss coefficient; the value loss is ``0.5 * MSE`` as in CleanRL.
        norm_adv: Normalize advantages over the minibatch
            ("The 37 Implementation Details of PPO", detail 7).
        clip_vloss: Clip the value update around ``old_value`` (detail 9).

    Returns:
        The total loss and its terms.
    """
    loss, diagnostics = _ClippedObjective.apply(
        log_prob, entropy, value, old_log_prob, old_value, advantage, returns,
        clip_coef, ent_coef, vf_coef, norm_adv, clip_vloss,
    )  # fmt: skip
    return PPOLossTerms(loss, *diagnostics.unbind(), diagnostics)


def minibatch_loss(policy, batch: Mapping[str, torch.Tensor], **coefs) -> PPOLossTerms:
    """Evaluate a rollout minibatch under ``policy`` and return its PPO loss terms.

    An :class:`~rl_lightning.nets.ActorCritic` with the default networks takes the written-out
    path (:class:`_ActorCriticObjective`; the same values and gradients); any other policy,
    a hooked network, or autocast goes through ``policy.evaluate_actions`` and :func:`ppo_loss`.

    Args:
        policy: Has ``evaluate_actions(obs, action) -> (log_prob, entropy, value)``.
        batch: Rollout minibatch with keys ``obs``, ``action``, ``log_prob``, ``value``,
            ``advantage``, ``return`` (rows of the rollout ``RolloutDataset`` yields).
        **coefs: ``clip_coef``, ``ent_coef``, ``vf_coef``, ``norm_adv``, ``clip_vloss`` (as in :func:`ppo_loss`).
    """
    layers = policy.tanh_layers() if isinstance(policy, ActorCritic) else None
    if layers is not None:
        features = policy._features(batch["obs"])
        if not torch.is_autocast_enabled(features.device.type):
            unknown = sorted(coefs.keys() - _COEF_DEFAULTS.keys())
            if unknown:
                raise TypeError(f"minibatch_loss: unknown coefficients {unknown}, known: {list(_COEF_DEFAULTS)}")
            values = tuple(coefs.get(name, default) for name, default in _COEF_DEFAULTS.items())
            loss, diagnostics = _ActorCriticObjective.apply(
                policy, features, batch["action"], batch["log_prob"], batch["value"], batch["advantage"],
                batch["return"], values, policy.log_std, len(layers[0]), *layers[0], *layers[1],
            )  # fmt: skip
            return PPOLossTerms(loss, *diagnostics.unbind(), diagnostics)
    log_prob, entropy, value = policy.evaluate_actions(batch["obs"], batch["action"])
    return ppo_loss(
        log_prob, entropy, value, batch["log_prob"], batch["value"], batch["advantage"], batch["return"], **coefs
    )


#: :func:`ppo_loss`'s coefficients and their defaults, in :func:`_objective`'s order.
_COEF_DEFAULTS = {
    name: param.default
    for name, param in inspect.signature(ppo_loss).parameters.items()
    if param.default is not inspect.Parameter.empty
}
