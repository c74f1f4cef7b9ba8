"""The SAC losses as a pure function: twin-Q soft TD(0) targets, the actor loss and the temperature loss.

Why not torchrl's ``SACLoss`` on the hot path: it computes the same values and gradients
(``tests/algos/test_sac_loss.py`` checks all three losses and every gradient against it on the same batch and noise),
but its TensorDict plumbing (cloning the batch, swapping parameters into the modules with ``to_module``, ``vmap`` over
the critics, distribution and transform objects) costs almost as much as the networks at SAC's sizes (``python -m
benchmarks.sac_loss`` measures one update step both ways; figures in ``docs/algos/sac.md``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from tensordict import TensorDict

from rl_lightning.nets.sac import QEnsemble, SquashedGaussianActor


class SACLossTerms(NamedTuple):
    """The three losses (scalars, with gradients) and what is logged about them (detached scalars)."""

    loss_actor: torch.Tensor
    loss_qvalue: torch.Tensor
    loss_alpha: torch.Tensor
    alpha: torch.Tensor  # the temperature exp(log_alpha) the losses used
    entropy: torch.Tensor  # -mean log pi(a|s) of the actor loss's actions


def sac_loss(
    actor: SquashedGaussianActor,
    critics: QEnsemble,
    target_critics: QEnsemble,
    log_alpha: torch.Tensor,
    batch: TensorDict,
    gamma: float,
    target_entropy: float,
) -> SACLossTerms:
    """SAC's losses on a replay batch (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications").

    - Critics (eq. 5-6, clipped double Q): ``sum_i mean (Q_i(s, a) - y)^2`` with
      ``y = r + gamma (1 - terminated) (min_i Q_target_i(s', a') - alpha log pi(a'|s'))``,
      ``a' ~ pi(.|s')``, no gradient through ``y``.
    - Actor (eq. 7-9): ``mean(alpha log pi(a~|s) - min_i Q_i(s, a~))``, ``a~ ~ pi(.|s)``
      reparameterized; the critics' weights are detached, so their gradient is the critic
      loss's alone.
    - Temperature (eq. 18): ``-mean(log_alpha (log pi(a~|s) + target_entropy))``, log-probs detached.

    ``alpha`` is ``exp(log_alpha)`` without gradient in the first two. The three losses touch disjoint parameters, so
    one backward of their sum gives each optimizer its own gradient. Random draws come in torchrl's order (``a'`` first,
    then ``a~``), so a seeded call reproduces ``SACLoss``'s.

    Args:
        actor: The policy (its ``rsample`` draws actions and log-probabilities).
        critics: The online critics, ``Q_i(s, a)`` stacked ``[num_nets, B]``.
        target_critics: Their Polyak-averaged targets (no gradients).
        log_alpha: The learned log temperature (scalar parameter).
        batch: Replay batch with ``obs``, ``action``, ``reward`` ``[B]``, ``next_obs``,
            ``terminated`` (bool ``[B]``); only ``terminated`` stops bootstrapping (a
            truncated transition's ``next_obs`` is the true final observation).
        gamma: Discount factor.
        target_entropy: Entropy the temperature steers toward (``-act_dim`` by default).
    """
    obs, next_obs = batch["obs"], batch["next_obs"]
    alpha = log_alpha.detach().exp()
    with torch.no_grad():
        next_action, next_log_prob = actor.rsample(next_obs)
        next_value = (target_critics(next_obs, next_action) - alpha * next_log_prob).min(0).values
        target = batch["reward"] + gamma * (~batch["terminated"]) * next_value
    loss_qvalue = (critics(obs, batch["action"]) - target).square().sum(0).mean()
    action, log_prob = actor.rsample(obs)
    min_q = critics.min_q(obs, action)  # critics held fixed
    loss_actor = (alpha * log_prob - min_q).mean()
    log_prob = log_prob.detach()
    loss_alpha = -(log_alpha * (log_prob + target_entropy)).mean()
    return SACLossTerms(loss_actor, loss_qvalue, loss_alpha, alpha, -log_prob.mean())
