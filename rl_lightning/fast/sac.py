"""SAC's three losses on a replay batch, networks included, as one autograd node, their gradient written out.

The plain path (``rl_lightning/algos/sac_loss.py``) evaluates the actor's layers, the
squashed-Gaussian sample and the loss terms op by op under autograd, and one backward of the
sum of the three losses runs autograd's engine over that graph (the critics' layers are one
node each already, ``fast/mlp_grad.py``). At SAC's sizes on a CPU (256x256 networks, batch
256, one thread) the recording, the engine's fixed cost and the ~60 small backward ops it
schedules cost several percent of an update beside the matrix products. :func:`objective`
computes the same forward as plain tensor ops and writes the gradient out:

- critics: ``d/dQ_i = 2 (Q_i - y) / B`` through :func:`~rl_lightning.fast.mlp_grad.mlp_backward`;
- actor: the actor loss's gradient with respect to the sampled action comes from the critic
  that gave each row's minimum (:func:`~rl_lightning.fast.mlp_grad.min_input_grad`), then
  back through the squash (``tanh``, its clamp, the affine map into the bounds), the
  reparameterized draw ``u = loc + scale * noise``, the log-density and its log-Jacobian
  (``d/du [-2 (log 2 - u - softplus(-2u))] = 2 - 4 softplus'(-2u)``), the scale's
  ``softplus(x + bias) + min`` and its floor, into the actor's layers;
- temperature: ``d/d log_alpha = -mean(log pi + target_entropy)``.

:meth:`_SACObjective.accumulate_grads` then adds the gradients to ``.grad`` without the
engine (``fast/lightning.py``). The random draws are the plain path's, in its order (the next
actions' noise, then the current ones'). ``tests/fast/test_sac.py`` holds the values and every
gradient against the plain path; ``docs/fast_path.md`` has the figures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

import torch
from torch import nn
from torch.autograd.function import once_differentiable
from torch.nn import functional as F

from rl_lightning.fast.lightning import add_to_grads, engine_free_leaves
from rl_lightning.fast.mlp_grad import (
    has_call_hooks,
    has_own_hooks,
    min_input_grad,
    mlp_backward,
    mlp_forward,
    mlp_params,
)
from rl_lightning.fast.switch import is_class, on_for

#: The classes whose default networks this path mirrors.
ACTOR = "rl_lightning.nets.sac.SquashedGaussianActor"
CRITICS = "rl_lightning.nets.sac.QEnsemble"
STACKED_LINEAR = "rl_lightning.nets.sac.StackedLinear"
SCALE_HEAD = "tensordict.nn.distributions.continuous.NormalParamExtractor"
BIASED_SOFTPLUS = "tensordict.nn.utils.biased_softplus"

#: ``log(sqrt(2 pi))``, the Gaussian log-density's constant; softplus's defaults (beta, threshold).
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
_BETA, _THRESHOLD = 1.0, 20.0


class _Settings(NamedTuple):
    """What the objective reads besides the parameters it differentiates (passed as one non-tensor input)."""

    obs: torch.Tensor
    action: torch.Tensor
    reward: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    low: torch.Tensor
    high: torch.Tensor
    target_params: tuple[torch.Tensor, ...]
    gamma: float
    target_entropy: float
    scale_bias: float  # the scale head's softplus(x + bias) + min_val, floored at scale_lb
    scale_min: float
    scale_lb: float
    n_actor: int  # the actor's tensors come first among the parameters, then the critics'


def _actor_params(actor: nn.Module) -> tuple[list[torch.Tensor], float, float, float] | None:
    """The actor's layer tensors and its scale head's constants, when it is the default network; else ``None``.

    Default: no encoder, ``net`` an ``nn.Sequential`` of a plain ReLU MLP
    (:func:`~rl_lightning.fast.mlp_grad.mlp_params`) and tensordict's ``NormalParamExtractor``
    with its ``biased_softplus`` scale mapping; no hooks of their own.
    """
    net = actor._modules.get("net")
    if actor._modules.get("encoder") is not None or has_own_hooks(actor) or type(net) is not nn.Sequential:
        return None
    if has_own_hooks(net) or len(net) != 2:
        return None
    body, head = net[0], net[1]
    if not is_class(head, SCALE_HEAD) or has_own_hooks(head):
        return None
    mapping = head.scale_mapping
    if not is_class(mapping, BIASED_SOFTPLUS) or has_own_hooks(mapping):
        return None
    params = mlp_params(body, nn.ReLU)
    constants = [_number(value) for value in (mapping.bias, mapping.min_val, head.scale_lb)]
    if params is None or None in constants:
        return None
    return params, *constants


def _number(value) -> float | None:
    """A Python number or a one-element tensor as a float; ``None`` for anything else (per-dimension constants)."""
    if isinstance(value, (int, float)):
        return float(value)
    if torch.is_tensor(value) and value.numel() == 1:
        return float(value)
    return None


def _critic_params(critics: nn.Module) -> list[torch.Tensor] | None:
    """The stacked critics' tensors ``(weight 0, bias 0, ...)``, when they are the default ensemble; else ``None``."""
    if critics._modules.get("encoder") is not None or has_own_hooks(critics):
        return None
    params: list[torch.Tensor] = []
    for layer in critics.layers:
        if not is_class(layer, STACKED_LINEAR) or has_own_hooks(layer):
            return None
        params += (layer._parameters["weight"], layer._parameters["bias"])
    return params


def _squashed_sample(loc, scale, noise, low, high):
    """``u = loc + scale * noise``, its tanh, the action in ``[low, high]`` and its log-probability (as ``nets/sac``).

    Returns:
        ``(u, tanh_u, action, log_prob)``, the first two for the backward.
    """
    u = loc + scale * noise
    log_prob = (
        -0.5 * noise.square() - scale.log() - _LOG_SQRT_2PI - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    ).sum(-1) - ((high - low) / 2).log().sum()
    tanh_u = torch.tanh(u)
    lim = 1.0 - torch.finfo(u.dtype).resolution
    action = (high + low) / 2 + (high - low) / 2 * tanh_u.clamp(-lim, lim)
    return u, tanh_u, action, log_prob


def _loc_scale(z: torch.Tensor, s: _Settings) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The scale head: ``loc``, ``scale``, and for the backward the softplus input and the unfloored scale."""
    loc, raw = z.chunk(2, -1)
    shifted = raw + s.scale_bias
    unfloored = F.softplus(shifted) + s.scale_min
    return loc, unfloored.clamp_min(s.scale_lb), shifted, unfloored


class _SACObjective(torch.autograd.Function):
    """``loss_qvalue + loss_actor + loss_alpha`` (``algos/sac_loss.sac_loss``) as one node; the terms beside it.

    Inputs: the settings (no gradient), ``log_alpha``, then the actor's and the critics'
    tensors. Outputs: the summed loss, and the five terms (``SACLossTerms``' order) stacked,
    without gradient.
    """

    @staticmethod
    def forward(ctx, s: _Settings, log_alpha: torch.Tensor, *params: torch.Tensor):
        actor_params, critic_params = params[: s.n_actor], params[s.n_actor :]
        batch, nets = s.obs.shape[0], critic_params[0].shape[0]
        alpha = log_alpha.exp()
        # The plain path draws the next actions' noise, then the current actions' (the same shapes).
        noise_next = s.obs.new_empty((batch, s.low.shape[0])).normal_()
        noise = s.obs.new_empty((batch, s.low.shape[0])).normal_()
        # Critic targets: clipped double Q on the target critics, soft value of a' ~ pi(.|s').
        z_next = mlp_forward(s.next_obs, actor_params)[0]
        loc_next, scale_next = _loc_scale(z_next, s)[:2]
        _, _, next_action, next_log_prob = _squashed_sample(loc_next, scale_next, noise_next, s.low, s.high)
        target_in = torch.cat([s.next_obs, next_action], -1).expand(s.target_params[0].shape[0], -1, -1)
        next_q = mlp_forward(target_in, s.target_params)[0].squeeze(-1)
        next_value = (next_q - alpha * next_log_prob).min(0).values
        target = s.reward + s.gamma * (~s.terminated) * next_value
        # Critic loss: sum over critics of the mean squared error.
        q, q_inputs = mlp_forward(torch.cat([s.obs, s.action], -1).expand(nets, -1, -1), critic_params)
        error = q.squeeze(-1) - target
        loss_qvalue = error.square().sum(0).mean()
        # Actor loss: a~ ~ pi(.|s) reparameterized, min over the critics held fixed.
        z, actor_inputs = mlp_forward(s.obs, actor_params)
        loc, scale, shifted, unfloored = _loc_scale(z, s)
        u, tanh_u, action, log_prob = _squashed_sample(loc, scale, noise, s.low, s.high)
        min_q_out, min_q_inputs = mlp_forward(torch.cat([s.obs, action], -1).expand(nets, -1, -1), critic_params)
        min_q, min_index = min_q_out.squeeze(-1).min(0)
        loss_actor = (alpha * log_prob - min_q).mean()
        loss_alpha = -(log_alpha * (log_prob + s.target_entropy)).mean()
        terms = torch.stack([loss_actor, loss_qvalue, loss_alpha, alpha, -log_prob.mean()])
        ctx.save_for_backward(
            error, noise, u, tanh_u, scale, shifted, unfloored, min_index, alpha, log_prob,
            *q_inputs, *actor_inputs, *min_q_inputs, *params[0::2],
        )  # fmt: skip
        ctx.settings, ctx.critic_layers = s, len(critic_params) // 2
        ctx.mark_non_differentiable(terms)
        return loss_qvalue + loss_actor + loss_alpha, terms

    @staticmethod
    @once_differentiable  # the backward's own ops are not tracked: a double backward raises
    def backward(ctx, grad, _):
        return (None, *_SACObjective._gradients(ctx, grad))

    @staticmethod
    def _gradients(ctx, grad: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        """The gradients of ``log_alpha`` and the parameters; ``grad`` is the loss's (``None``: 1, nothing to scale)."""
        s: _Settings = ctx.settings
        error, noise, u, tanh_u, scale, shifted, unfloored, min_index, alpha, log_prob, *saved = ctx.saved_tensors
        # Saved: the critics' layer inputs, the actor's, the critics' again (the actor loss's call), then
        # the weights (the actor's, then the critics'); the two networks may differ in depth.
        a, c = s.n_actor // 2, ctx.critic_layers
        q_inputs, actor_inputs, min_q_inputs = saved[:c], saved[c : c + a], saved[c + a : 2 * c + a]
        actor_weights, critic_weights = saved[2 * c + a : 2 * c + 2 * a], saved[2 * c + 2 * a :]
        batch = error.shape[1]
        needs = ctx.needs_input_grad[2:]
        scale_by = 1.0 / batch if grad is None else grad / batch
        # Critics: d/dQ_i of sum_i mean (Q_i - y)^2.
        critic_needs, actor_needs = (False, *needs[s.n_actor :]), (False, *needs[: s.n_actor])
        critic_grads = mlp_backward((2.0 * scale_by) * error.unsqueeze(-1), q_inputs, critic_weights, critic_needs)
        # Actor: d/da~ of -mean(min_i Q_i(s, a~)), through the critic of each row's minimum.
        action_grad = min_input_grad(-scale_by * torch.ones_like(log_prob), min_index, min_q_inputs, critic_weights)
        action_grad = action_grad[..., s.obs.shape[-1] :].sum(0)
        # Back through a~ = mid + half * clamp(tanh(u)): the clamp passes where |tanh u| <= lim.
        lim = 1.0 - torch.finfo(u.dtype).resolution
        passed = (tanh_u >= -lim) & (tanh_u <= lim)
        squash_grad = torch.where(passed, action_grad * ((s.high - s.low) / 2), 0.0)
        log_prob_grad = alpha * scale_by  # d/dlog pi of mean(alpha log pi)
        two_u = -2.0 * u
        jacobian_grad = 2.0 - 4.0 * torch.ops.aten.softplus_backward(torch.ones_like(u), two_u, _BETA, _THRESHOLD)
        u_grad = torch.ops.aten.tanh_backward(squash_grad, tanh_u) + log_prob_grad * jacobian_grad
        # u = loc + scale * noise; log pi has -log(scale); scale = max(softplus(x + bias) + min, lb).
        scale_grad = torch.where(unfloored >= s.scale_lb, u_grad * noise - log_prob_grad / scale, 0.0)
        raw_grad = torch.ops.aten.softplus_backward(scale_grad, shifted, _BETA, _THRESHOLD)
        actor_grads = mlp_backward(torch.cat([u_grad, raw_grad], -1), actor_inputs, actor_weights, actor_needs)
        # Temperature: d/dlog_alpha of -mean(log_alpha (log pi + target_entropy)).
        alpha_grad = -(log_prob + s.target_entropy).mean()
        if grad is not None:
            alpha_grad = alpha_grad * grad
        return (alpha_grad if ctx.needs_input_grad[1] else None, *actor_grads[1:], *critic_grads[1:])

    @staticmethod
    @torch.no_grad()
    def accumulate_grads(node) -> bool:
        """``loss.backward()`` for this node's loss without autograd's engine, where that is the same.

        As :meth:`~rl_lightning.fast.ppo._ActorCriticObjective.accumulate_grads`: every input
        with a gradient must be a hook-free leaf (``fast/lightning.engine_free_leaves``),
        else this returns ``False`` and the caller runs ``loss.backward()``.
        """
        leaves = engine_free_leaves(node.next_functions)  # log_alpha, then the parameters
        if leaves is None:
            return False
        add_to_grads(leaves, _SACObjective._gradients(node, None))
        return True


def objective(
    actor: nn.Module,
    critics: nn.Module,
    target_critics: nn.Module,
    log_alpha: torch.Tensor,
    batch: Mapping[str, torch.Tensor],
    gamma: float,
    target_entropy: float,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """SAC's summed loss and its stacked terms on a replay batch, or ``None`` where the plain path must run.

    Args:
        actor: A :class:`~rl_lightning.nets.sac.SquashedGaussianActor`.
        critics: Its :class:`~rl_lightning.nets.sac.QEnsemble` (stacked critics).
        target_critics: Their Polyak-averaged copy.
        log_alpha: The learned log temperature.
        batch: Replay batch with ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``.
        gamma: Discount factor.
        target_entropy: Entropy the temperature steers toward.

    Returns:
        ``(loss_qvalue + loss_actor + loss_alpha, terms)``, ``terms`` the five
        ``SACLossTerms`` values stacked (no gradient), as ``algos/sac_loss.sac_loss``
        computes them; or ``None``: the switch is off, a network is not the default one
        (an encoder, another class or scale mapping, a hook, the modules' own or a global
        one), the observations are not flat vectors, a batch tensor needs a gradient,
        the tensors are not float32 (``terminated`` bool) on one device, ``log_alpha`` is not
        a scalar, or autocast is on.
    """
    if not (
        on_for("torch") and is_class(actor, ACTOR) and all(is_class(c, CRITICS) for c in (critics, target_critics))
    ):
        return None
    actor_part, critic_params = _actor_params(actor), _critic_params(critics)
    target_params = _critic_params(target_critics)
    if actor_part is None or critic_params is None or target_params is None or has_call_hooks(()):
        return None
    actor_params, scale_bias, scale_min, scale_lb = actor_part
    obs, action, next_obs, terminated = batch["obs"], batch["action"], batch["next_obs"], batch["terminated"]
    if obs.dim() != 2 or obs.shape[1] != actor.obs_dim or torch.is_autocast_enabled(obs.device.type):
        return None
    if log_alpha.dim() or terminated.dtype != torch.bool or terminated.device != obs.device:
        return None
    if obs.requires_grad or action.requires_grad or next_obs.requires_grad:  # their gradients are not written out
        return None
    tensors = (obs, action, next_obs, batch["reward"], actor.low, actor.high, log_alpha)
    if any(
        t.dtype != torch.float32 or t.device != obs.device
        for t in (*tensors, *actor_params, *critic_params, *target_params)
    ):
        return None
    settings = _Settings(
        obs, action, batch["reward"], next_obs, terminated, actor.low, actor.high,
        tuple(target_params), float(gamma), float(target_entropy), scale_bias, scale_min, scale_lb, len(actor_params),
    )  # fmt: skip
    return _SACObjective.apply(settings, log_alpha, *actor_params, *critic_params)
