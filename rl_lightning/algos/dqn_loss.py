"""The DQN loss as a pure function: TD(0) targets from a target network, Huber or squared error.

Why not torchrl's ``DQNLoss`` on the hot path: it computes the same value and gradients
(``tests/algos/test_dqn_loss.py`` checks both, with and without double DQN), but one update step through it costs well
more than through the plain function on CartPole's 256x256 network (``python -m benchmarks.dqn_loss``; figures in
``docs/algos/dqn.md``). Its TensorDict cloning and parameter swapping (``to_module``) dominate at this size.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from tensordict import TensorDict
from torch import nn

#: Regression losses of the TD error: Huber (smooth L1 with delta 1, as in SB3 and Mnih et
#: al., 2015's error clipping) or the squared error (CleanRL's ``dqn.py``).
LOSS_FUNCTIONS = {"huber": F.smooth_l1_loss, "l2": F.mse_loss}


class DQNLossTerms(NamedTuple):
    """The loss and what is logged about it (all scalars)."""

    loss: torch.Tensor
    q_value: torch.Tensor  # mean Q(s, a) of the batch's actions
    td_error: torch.Tensor  # mean |target - Q(s, a)|


def dqn_loss(
    q_net: nn.Module,
    target_net: nn.Module,
    batch: TensorDict,
    gamma: float,
    double_dqn: bool = False,
    loss_function: str = "huber",
) -> DQNLossTerms:
    """DQN's loss on a replay batch (Mnih et al., 2015; double DQN: van Hasselt et al., 2016).

    Target: ``r + gamma * (1 - terminated) * Q_target(s', a')`` with ``a' = argmax_a Q_target(s', a)``, or ``argmax_a
    Q(s', a)`` (the online network picks, the target network values) with ``double_dqn``. Only ``terminated`` stops
    bootstrapping: a truncated transition's ``next_obs`` is the true final observation, so it bootstraps.

    Args:
        q_net: Online network, observations ``[B, obs_dim]`` -> Q-values ``[B, num_actions]``.
        target_net: Target network of the same shape (no gradients flow into it).
        batch: Replay batch with ``obs``, ``action`` (int64 ``[B]``), ``reward``, ``next_obs``, ``terminated``.
        gamma: Discount factor.
        double_dqn: Select the next action with the online network.
        loss_function: ``"huber"`` or ``"l2"``.
    """
    with torch.no_grad():
        next_q = target_net(batch["next_obs"])
        if double_dqn:
            next_action = q_net(batch["next_obs"]).argmax(-1, keepdim=True)
            next_value = next_q.gather(-1, next_action).squeeze(-1)
        else:
            next_value = next_q.max(-1).values
        target = batch["reward"] + gamma * (~batch["terminated"]).float() * next_value
    q = q_net(batch["obs"]).gather(-1, batch["action"].long().unsqueeze(-1)).squeeze(-1)
    loss = LOSS_FUNCTIONS[loss_function](q, target)
    q = q.detach()
    return DQNLossTerms(loss, q.mean(), (target - q).abs().mean())
