"""The PPO clipped-surrogate loss as a short pure function.

Reference: torchrl's ``ClipPPOLoss`` (``torchrl/objectives/ppo.py``) with
``loss_critic_type="l2"``, ``critic_coef = vf_coef / 2`` and ``normalize_advantage=True``.
``tests/algos/test_ppo_loss.py`` checks that this function's value and gradients equal it
on the same batch. It is written out because the TensorDict machinery around
``ClipPPOLoss`` nearly doubles the cost of an update step on small networks
(``benchmarks/ppo_loss.py`` measures both).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import torch


@dataclasses.dataclass
class PPOLossTerms:
    """The loss and its diagnostics (all scalar tensors; diagnostics are detached)."""

    loss: torch.Tensor
    policy_loss: torch.Tensor
    value_loss: torch.Tensor
    entropy: torch.Tensor
    approx_kl: torch.Tensor
    clip_fraction: torch.Tensor


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
    if norm_adv and advantage.numel() > 1:
        advantage = (advantage - advantage.mean()) / (advantage.std() + 1e-8)
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    surrogate = torch.min(advantage * ratio, advantage * ratio.clamp(1 - clip_coef, 1 + clip_coef))
    policy_loss = -surrogate.mean()
    if clip_vloss:
        clipped = old_value + (value - old_value).clamp(-clip_coef, clip_coef)
        value_loss = 0.5 * torch.max((value - returns) ** 2, (clipped - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((value - returns) ** 2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_coef * value_loss
    if ent_coef:  # with no entropy bonus, backward skips the entropy's graph (it is only logged)
        loss = loss - ent_coef * entropy_mean
    with torch.no_grad():
        # Unbiased low-variance KL estimator k3 (Schulman, "Approximating KL Divergence").
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_coef).float().mean()
    return PPOLossTerms(
        loss=loss,
        policy_loss=policy_loss.detach(),
        value_loss=value_loss.detach(),
        entropy=entropy_mean.detach(),
        approx_kl=approx_kl,
        clip_fraction=clip_fraction,
    )


def minibatch_loss(policy, batch: Mapping[str, torch.Tensor], **coefs) -> PPOLossTerms:
    """Evaluate a rollout minibatch under ``policy`` and return its PPO loss terms.

    Args:
        policy: Has ``evaluate_actions(obs, action) -> (log_prob, entropy, value)``.
        batch: Rollout minibatch with keys ``obs``, ``action``, ``log_prob``, ``value``,
            ``advantage``, ``return`` (rows of the rollout ``RolloutDataset`` yields).
        **coefs: ``clip_coef``, ``ent_coef``, ``vf_coef``, ``norm_adv``, ``clip_vloss``.
    """
    log_prob, entropy, value = policy.evaluate_actions(batch["obs"], batch["action"])
    return ppo_loss(
        log_prob, entropy, value, batch["log_prob"], batch["value"], batch["advantage"], batch["return"], **coefs
    )
