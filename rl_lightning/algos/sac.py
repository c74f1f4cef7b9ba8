"""SAC (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications") as a LightningModule.

Data flow of one epoch: ``training_step`` iterates the epoch's ``ReplayEpoch``, which collects each chunk of
``train_freq`` vector steps and then hands out that chunk's sampled batches (``rl_lightning/data/chunks.py``); for each
batch: the SAC losses (:func:`~rl_lightning.algos.sac_loss.sac_loss`: twin Q with clipped double-Q targets from target
critics, the reparameterized actor loss, and the entropy temperature loss; checked against torchrl's ``SACLoss``), one
backward of their sum, one Adam step over the actor, critic and temperature parameter groups (manual optimization), then
the target critics' Polyak averaging. See ``docs/algos/sac.md``.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.sac_loss import SACLossTerms, sac_loss
from rl_lightning.algos.update import adam
from rl_lightning.checks import check_finite, check_hidden_sizes, check_positive, check_unit_interval
from rl_lightning.data import ReplayDataModule
from rl_lightning.data.chunks import ReplayEpoch
from rl_lightning.nets.encoders import build_encoder, check_encoder_argument
from rl_lightning.nets.sac import QEnsemble, SquashedGaussianActor

_TRAIN_METRICS = SACLossTerms._fields  # loss_actor, loss_qvalue, loss_alpha, alpha, entropy


class SAC(RLModule):
    """Soft Actor-Critic for continuous actions, on a :class:`~rl_lightning.data.ReplayDataModule`.

    Args:
        actor_lr: Adam learning rate of the actor.
        critic_lr: Adam learning rate of the critics.
        alpha_lr: Adam learning rate of the entropy temperature (log alpha).
        gamma: Discount factor.
        tau: Polyak coefficient of the target critics (``target <- (1 - tau) target + tau online``).
        hidden_sizes: Hidden widths of actor and critics.
        init_alpha: Initial entropy temperature.
        target_entropy: Entropy the temperature steers toward; ``None``: ``-action_dim``.
        max_grad_norm: Gradient-norm clip applied to each optimizer's parameters; ``None`` disables.
        encoder: As :class:`~rl_lightning.algos.PPO`'s (settings, or one's own module or callable), but the actor
            and the critics each get their own encoder (per network, as SB3's SAC by default); the target critics a
            copy of the critics'. Vector observations do not use it.
        total_timesteps, save_interval, keep_last, on_nonfinite, flush_denormal, compile:
            As :class:`~rl_lightning.algos.RLModule`.
    """

    datamodule_class = ReplayDataModule
    acting_methods = ("explore",)

    def __init__(
        self,
        actor_lr: float = 3e-4,
        critic_lr: float = 1e-3,
        alpha_lr: float = 1e-3,
        gamma: float = 0.99,
        tau: float = 0.005,
        hidden_sizes: Sequence[int] = (256, 256),
        init_alpha: float = 1.0,
        target_entropy: float | None = None,
        max_grad_norm: float | None = None,
        total_timesteps: int = 100_000,
        save_interval: int | None = None,
        keep_last: int | None = 5,
        on_nonfinite: str = "stop",
        encoder: dict[str, Any] | nn.Module | Callable[[gym.Space], nn.Module] | None = None,
        flush_denormal: bool = True,
        compile: bool = False,
    ):
        super().__init__(
            total_timesteps, save_interval, keep_last, on_nonfinite, max_grad_norm, flush_denormal, compile
        )
        check_positive(actor_lr=actor_lr, critic_lr=critic_lr, alpha_lr=alpha_lr, init_alpha=init_alpha)
        check_unit_interval(gamma=gamma, tau=tau, open_low=True)
        check_finite(none="None (minus the action size, Stable-Baselines3's 'auto')", target_entropy=target_entropy)
        check_hidden_sizes(hidden_sizes)
        encoder, own_encoder = check_encoder_argument(encoder)  # checked now, before any env is made
        self.save_hyperparameters(ignore=["encoder"] if own_encoder else None)
        self._encoder = encoder
        # Stepped by hand: one backward for the three losses, per-group clipping, Polyak targets.
        self.automatic_optimization = False
        # Built with the policy (they need the env's dimensions); module attributes, so they
        # are in the state dict (checkpoints) and move with the module between devices.
        self.critics: QEnsemble | None = None
        self.target_critics: QEnsemble | None = None
        self.log_alpha = nn.Parameter(torch.tensor(math.log(init_alpha)))
        self.target_entropy: float | None = None

    def build_policy(self, observation_space: gym.Space, action_space: gym.Space) -> SquashedGaussianActor:
        """The acting policy; also builds the twin critics and their target copies."""
        hp = self.hparams
        actor_encoder = build_encoder(self._encoder, observation_space, normalize_obs=False)
        # The critics' own encoder: built again from the settings or the callable; a module is copied.
        if isinstance(self._encoder, nn.Module):
            critic_encoder = copy.deepcopy(actor_encoder)
        else:
            critic_encoder = build_encoder(self._encoder, observation_space, False, "critic")  # its keys: critic_keys
        policy = SquashedGaussianActor(observation_space, action_space, tuple(hp.hidden_sizes), actor_encoder)
        critic_dim = policy.obs_dim if critic_encoder is None else int(critic_encoder.features_dim)
        self.critics = QEnsemble(critic_dim, policy.act_dim, tuple(hp.hidden_sizes), 2, critic_encoder)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.target_entropy = -float(policy.act_dim) if hp.target_entropy is None else float(hp.target_entropy)
        return policy

    def configure_optimizers(self) -> torch.optim.Adam:
        """One Adam over three parameter groups, each with its learning rate: actor, critics, temperature.

        Adam updates every tensor on its own, so the groups step exactly as three separate optimizers would; one
        optimizer makes one ``LightningOptimizer.step`` per gradient step instead of three, whose hooks, closure and
        torch's step wrapper cost more than the fused kernels (``docs/algos/sac.md``). Lightning's ``global_step``
        therefore counts gradient steps.
        """
        hp = self.hparams
        groups = [
            {"params": list(self.policy.parameters()), "lr": hp.actor_lr},
            {"params": list(self.critics.parameters()), "lr": hp.critic_lr},
            {"params": [self.log_alpha], "lr": hp.alpha_lr},
        ]
        return adam(groups, lr=hp.actor_lr)

    def loss(self, batch: TensorDict) -> SACLossTerms:
        """The SAC losses on a replay batch (see :func:`~rl_lightning.algos.sac_loss.sac_loss`)."""
        return sac_loss(self.policy, self.critics, self.target_critics, self.log_alpha, batch, self.hparams.gamma,
                        self.target_entropy)  # fmt: skip

    def training_step(self, epoch: ReplayEpoch, batch_idx: int) -> None:
        """The epoch's gradient steps, each chunk collected when its batches are first asked for
        (one Lightning batch per epoch, ``rl_lightning/data/chunks.py``)."""
        optimizer = self.optimizers()
        for batch in epoch:
            self.update(batch, optimizer)

    def update(self, batch: TensorDict, optimizer) -> None:
        """One SAC update on a replay batch: critics, actor, temperature, then the targets."""
        terms = self.loss_fn(batch)
        # The three losses touch disjoint parameters (sac_loss detaches the critics inside the
        # actor loss and the log-probs inside the temperature loss): one backward of their sum serves all.
        optimizer.zero_grad(set_to_none=True)
        self.manual_backward(terms.loss_qvalue + terms.loss_actor + terms.loss_alpha)
        # Each group clipped on its own, as separate optimizers would; a NaN or inf update is
        # refused (or, by option, skipped together with its target update).
        if self.guard.check(self, optimizer, terms, clip_per_group=True):
            optimizer.step()
            self.update_targets()
            self.train_terms.append(torch.stack([t.detach() for t in terms]))

    @torch.no_grad()
    def update_targets(self) -> None:
        """Polyak-average the target critics toward the online ones: ``target <- (1 - tau) target + tau online``."""
        for target, source in zip(self.target_critics.parameters(), self.critics.parameters(), strict=True):
            target.lerp_(source, self.hparams.tau)

    def on_train_epoch_end(self) -> None:
        self.log_rollout_metrics(self.train_means(_TRAIN_METRICS))
