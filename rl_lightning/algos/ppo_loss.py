"""PPO's mathematics: generalized advantage estimation and the clipped loss, as pure functions.

References: Schulman et al., 2016 (GAE, eq. 16) and 2017 (PPO, eq. 7 and 9); CleanRL's ``ppo.py``. ``compute_gae``
equals torchrl's ``generalized_advantage_estimate`` and ``ppo_loss`` torchrl's ``ClipPPOLoss``
(``loss_critic_type="l2"``, ``critic_coef = vf_coef / 2``, ``normalize_advantage=True``): values and gradients
(``tests/algos/test_ppo_loss.py``). The loss is written out rather than called because ``ClipPPOLoss``'s TensorDict
plumbing costs more than the loss itself on small networks (``python -m benchmarks.ppo_loss``).
"""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict

#: The loss's coefficients, as :func:`ppo_loss` and :class:`~rl_lightning.algos.PPO` name them.
LOSS_COEFS = ("clip_coef", "ent_coef", "vf_coef", "norm_adv", "clip_vloss")


def compute_gae(rollout: TensorDict, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al., 2016, eq. 16), CleanRL's backward loop over time.

    ``next_value[t]`` is the value of the state step ``t`` reached: for a truncated step the
    value of the true final observation (so the return bootstraps from where the time limit cut
    the episode); a terminated step has no next value. The recursion stops at either end.

    Args:
        rollout: ``[T, N]`` with ``reward``, ``value``, ``next_value`` and the ``terminated`` and
            ``truncated`` bools (:class:`~rl_lightning.data.RolloutDataset`'s columns).
        gamma: Discount factor.
        gae_lambda: GAE's lambda.

    Returns:
        ``(advantage, return)``, each ``[T, N]``, with ``return = advantage + value``.
    """
    reward, value, next_value, terminated, truncated = (
        rollout[key] for key in ("reward", "value", "next_value", "terminated", "truncated")
    )
    delta = reward + gamma * next_value * (~terminated) - value  # the TD error of each step
    carry = gamma * gae_lambda * ~(terminated | truncated)  # where an episode goes on into the next step
    advantage, last = [], torch.zeros_like(value[0])
    # unbind and addcmul (delta + carry * last): one op per step, where indexing and the product take four.
    for delta_t, carry_t in zip(delta.unbind(0)[::-1], carry.unbind(0)[::-1], strict=True):
        last = torch.addcmul(delta_t, carry_t, last)
        advantage.append(last)
    advantage = torch.stack(advantage[::-1])
    return advantage, advantage + value


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

    The seven tensors share one shape, ``[B]`` below (PPO hands in its minibatch's ``[L, B]``): the terms are
    elementwise, and the means are over all of them.

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
        norm_adv: Normalize advantages over the minibatch ("The 37 Implementation Details of PPO", detail 7).
        clip_vloss: Clip the value update around ``old_value`` (detail 9).

    Returns:
        The total loss and its terms.
    """
    if norm_adv and advantage.numel() > 1:
        std, mean = torch.std_mean(advantage)
        advantage = (advantage - mean) / (std + 1e-8)
    log_ratio = log_prob - old_log_prob
    ratio = log_ratio.exp()
    # The clipped surrogate (eq. 7), as a loss: the larger of the negated unclipped and clipped terms (CleanRL's form).
    negated = -advantage
    policy_loss = torch.max(negated * ratio, negated * ratio.clamp(1 - clip_coef, 1 + clip_coef)).mean()
    if clip_vloss:  # the larger of the unclipped and the clipped value error (detail 9)
        clipped_value = value.clamp(old_value - clip_coef, old_value + clip_coef)  # old_value + (value - old) clipped
        value_loss = 0.5 * torch.max((value - returns) ** 2, (clipped_value - returns) ** 2).mean()
    else:
        value_loss = 0.5 * ((value - returns) ** 2).mean()
    entropy_mean = entropy.mean()
    # policy_loss + vf_coef * value_loss - ent_coef * entropy_mean, one op (and one backward node) per term.
    loss = policy_loss.add(value_loss, alpha=vf_coef).sub(entropy_mean, alpha=ent_coef)
    with torch.no_grad():
        # The unbiased low-variance KL estimator k3 (Schulman, "Approximating KL Divergence"),
        # and the fraction of ratios outside the clip range.
        excess = ratio - 1
        approx_kl = (excess - log_ratio).mean()
        clip_fraction = (excess.abs() > clip_coef).float().mean()
        diagnostics = torch.stack([policy_loss, value_loss, entropy_mean, approx_kl, clip_fraction])
    return PPOLossTerms(loss, *diagnostics.unbind(), diagnostics)
