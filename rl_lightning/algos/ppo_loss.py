"""The PPO loss: clipped surrogate, (clipped) value loss and entropy bonus, in plain autograd.

Reference: Schulman et al., 2017, eq. 7 and 9; CleanRL's ``ppo.py``. torchrl's
``ClipPPOLoss`` (``loss_critic_type="l2"``, ``critic_coef = vf_coef / 2``,
``normalize_advantage=True``) gives the same value and gradients
(``tests/algos/test_ppo_loss.py``); it is not called here because its TensorDict plumbing
costs more than the loss on small networks (``python -m benchmarks.ppo_loss``). The fast
path (``rl_lightning/fast/ppo.py``) computes the same loss with its gradient written out.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

from rl_lightning import fast

#: The loss's coefficients, as :func:`ppo_loss` and :class:`~rl_lightning.algos.PPO` name them.
LOSS_COEFS = ("clip_coef", "ent_coef", "vf_coef", "norm_adv", "clip_vloss")


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


def ppo_loss(
    log_prob: torch.Tensor,
    entropy: torch.Tensor,
    value: torch.Tensor,
    old_log_prob: torch.Tensor,
    old_value: torch.Tensor,
    advantage: torch.Tensor,
    returns: torch.Tensor,
    clip_coef: float = 0.2,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    norm_adv: bool = True,
    clip_vloss: bool = True,
) -> PPOLossTerms:
    """Clipped PPO objective, to be minimized (defaults: :class:`~rl_lightning.algos.PPO`'s).

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
    # The clipped surrogate (eq. 7): the pessimistic minimum of the unclipped and clipped terms.
    surrogate = torch.min(advantage * ratio, advantage * ratio.clamp(1 - clip_coef, 1 + clip_coef))
    policy_loss = -surrogate.mean()
    if clip_vloss:  # the larger of the unclipped and the clipped value error (detail 9)
        clipped_value = old_value + (value - old_value).clamp(-clip_coef, clip_coef)
        value_loss = 0.5 * torch.max((value - returns) ** 2, (clipped_value - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((value - returns) ** 2).mean()
    entropy_mean = entropy.mean()
    loss = policy_loss + vf_coef * value_loss - ent_coef * entropy_mean
    with torch.no_grad():
        # The unbiased low-variance KL estimator k3 (Schulman, "Approximating KL Divergence"),
        # and the fraction of ratios outside the clip range.
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip_coef).float().mean()
        diagnostics = torch.stack([policy_loss, value_loss, entropy_mean, approx_kl, clip_fraction])
    return PPOLossTerms(loss, *diagnostics.unbind(), diagnostics)


def minibatch_loss(
    policy,
    batch: Mapping[str, torch.Tensor],
    clip_coef: float = 0.2,
    ent_coef: float = 0.01,
    vf_coef: float = 0.5,
    norm_adv: bool = True,
    clip_vloss: bool = True,
) -> PPOLossTerms:
    """Evaluate a rollout minibatch under ``policy`` and return its PPO loss terms.

    Args:
        policy: Has ``evaluate_actions(obs, action) -> (log_prob, entropy, value)``.
        batch: Rollout minibatch with keys ``obs``, ``action``, ``log_prob``, ``value``,
            ``advantage``, ``return`` (rows of the rollout ``RolloutDataset`` yields).
        clip_coef, ent_coef, vf_coef, norm_adv, clip_vloss: As in :func:`ppo_loss`.
    """
    coefs = dict(clip_coef=clip_coef, ent_coef=ent_coef, vf_coef=vf_coef, norm_adv=norm_adv, clip_vloss=clip_vloss)
    written_out = fast.ppo_minibatch_loss(policy, batch, coefs)  # the same terms; None: not a default network
    if written_out is not None:
        loss, diagnostics = written_out
        return PPOLossTerms(loss, *diagnostics.unbind(), diagnostics)
    log_prob, entropy, value = policy.evaluate_actions(batch["obs"], batch["action"])
    old = (batch[key] for key in ("log_prob", "value", "advantage", "return"))
    return ppo_loss(log_prob, entropy, value, *old, **coefs)


def sequence_minibatch_loss(
    policy,
    rollout: Mapping[str, torch.Tensor],
    initial_state: torch.Tensor,
    envs: torch.Tensor,
    **coefs: Any,
) -> PPOLossTerms:
    """A recurrent policy's PPO loss on the whole sequences of the envs ``envs`` (CleanRL's ``ppo_atari_lstm.py``).

    The policy's core runs again over each env's ``[T]`` steps from the state the rollout
    started with, zeroed where ``episode_start`` says an episode began; the clipped loss is
    then the usual one over the ``T x len(envs)`` steps.

    Args:
        policy: Has ``evaluate_sequences(obs, action, episode_start, state)``.
        rollout: ``[T, N]`` tensors (a ``RecurrentRolloutDataset`` rollout's keys).
        initial_state: ``[C, K, N, H]``.
        envs: The sequence indices of this minibatch (env indices without truncated BPTT).
        **coefs: :func:`ppo_loss`'s ``clip_coef``, ``ent_coef``, ``vf_coef``, ``norm_adv``, ``clip_vloss``.
    """
    seq = {key: value[:, envs] for key, value in rollout.items()}
    log_prob, entropy, value = policy.evaluate_sequences(
        seq["obs"], seq["action"], seq["episode_start"], initial_state[:, :, envs]
    )
    old = (seq[key].flatten(0, 1) for key in ("log_prob", "value", "advantage", "return"))
    return ppo_loss(log_prob.flatten(), entropy.flatten(), value.flatten(), *old, **coefs)
