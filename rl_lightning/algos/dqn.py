"""DQN (Mnih et al., 2015, "Human-level control through deep reinforcement learning") as a LightningModule.

Data flow of one epoch: ``training_step`` iterates the epoch's ``ReplayEpoch``, which collects each chunk of
``train_freq`` vector steps (epsilon-greedy actions from ``QValueNetwork.explore``) and then hands out that chunk's
sampled batches (``rl_lightning/data/chunks.py``); for each batch (manual optimization): the TD loss
(``rl_lightning/algos/dqn_loss.py``), backward, gradient clipping (``max_grad_norm``) and the Adam step; every
``target_update_interval`` gradient steps the target network moves toward the online one. See ``docs/algos/dqn.md``.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning.algos.base import RLModule
from rl_lightning.algos.dqn_loss import LOSS_FUNCTIONS, DQNLossTerms, dqn_loss
from rl_lightning.algos.update import adam
from rl_lightning.checks import (
    check_bool,
    check_hidden_sizes,
    check_one_of,
    check_positive,
    check_positive_int,
    check_unit_interval,
)
from rl_lightning.data import ReplayDataModule
from rl_lightning.data.chunks import ReplayEpoch
from rl_lightning.nets.dqn import LinearSchedule, QValueNetwork
from rl_lightning.nets.encoders import check_encoder_argument

_TRAIN_METRICS = ("loss", "q_value", "td_error")


class DQN(RLModule):
    """Deep Q-learning for discrete actions, on a :class:`~rl_lightning.data.ReplayDataModule`.

    Args:
        lr: Adam learning rate.
        anneal_lr: Decay the learning rate linearly to 0 over ``total_timesteps`` (per gradient step).
        gamma: Discount factor.
        hidden_sizes: Hidden widths of the Q-network.
        target_update_interval: Gradient steps between target-network updates.
        tau: Target update coefficient (``target <- (1 - tau) target + tau online``);
            ``1.0`` copies the online network (the hard update of Mnih et al., 2015).
        exploration_fraction: Fraction of ``total_timesteps`` over which epsilon decays linearly.
        exploration_initial_eps: Epsilon at env step 0.
        exploration_final_eps: Epsilon after the decay (and of non-deterministic evaluation).
        double_dqn: Select the next action with the online network, value it with the target (van Hasselt et al., 2016).
        loss_function: ``"huber"`` (smooth L1) or ``"l2"``.
        max_grad_norm: Global gradient-norm clip before every optimizer step; ``None`` disables it.
            The Trainer's ``gradient_clip_val`` does not apply (DQN optimizes manually): set this instead.
        encoder: As :class:`~rl_lightning.algos.PPO`'s (settings, or one's own module or callable: pass it again to
            ``load_from_checkpoint``), for the Q-network's input; the target network is a copy, encoder included.
            Vector observations do not use it.
        total_timesteps, save_interval, keep_last, on_nonfinite, flush_denormal, compile:
            As :class:`~rl_lightning.algos.RLModule`.
    """

    datamodule_class = ReplayDataModule
    acting_methods = ("explore",)

    def __init__(
        self,
        lr: float = 1e-4,
        anneal_lr: bool = False,
        gamma: float = 0.99,
        hidden_sizes: Sequence[int] = (256, 256),
        target_update_interval: int = 1000,
        tau: float = 1.0,
        exploration_fraction: float = 0.1,
        exploration_initial_eps: float = 1.0,
        exploration_final_eps: float = 0.05,
        double_dqn: bool = False,
        loss_function: str = "huber",
        max_grad_norm: float | None = 10.0,
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
        check_positive(lr=lr)
        check_bool(double_dqn=double_dqn, anneal_lr=anneal_lr)
        check_unit_interval(gamma=gamma, tau=tau, open_low=True)
        for name in ("exploration_fraction", "exploration_initial_eps", "exploration_final_eps"):
            check_unit_interval(**{name: locals()[name]})
        check_positive_int(target_update_interval=target_update_interval)
        check_one_of(sorted(LOSS_FUNCTIONS), loss_function=loss_function)
        check_hidden_sizes(hidden_sizes, allow_empty=True)  # []: one linear layer (on an encoder's features)
        encoder, own_encoder = check_encoder_argument(encoder)  # checked now, before any env is made
        if not own_encoder and (encoder or {}).get("critic_keys") is not None:
            raise ValueError(
                "DQN acts with its Q-network, which is its only network: there is no separate critic to give "
                "algo.encoder.critic_keys. Drop critic_keys (actor_keys chooses what the Q-network reads)."
            )
        self.save_hyperparameters(ignore=["encoder"] if own_encoder else None)
        self._encoder = encoder
        # An epoch's gradient steps are taken inside training_step: one Lightning batch per replay epoch.
        self.automatic_optimization = False
        self.target_net: QValueNetwork | None = None

    @property
    def epsilon_schedule(self) -> LinearSchedule:
        """Epsilon as a function of env steps over all ranks."""
        hp = self.hparams
        return LinearSchedule(
            hp.exploration_initial_eps, hp.exploration_final_eps, hp.exploration_fraction * self.total_timesteps
        )

    def build_policy(self, observation_space: gym.Space, action_space: gym.Space) -> QValueNetwork:
        """The online Q-network (it acts) and its target copy (it is saved in checkpoints too)."""
        policy = QValueNetwork(
            observation_space, action_space, tuple(self.hparams.hidden_sizes), self.epsilon_schedule, self._encoder
        )
        self.target_net = copy.deepcopy(policy).requires_grad_(False)
        return policy

    def configure_optimizers(self):
        return adam(self.policy.parameters(), lr=self.hparams.lr)

    def loss(self, batch: TensorDict) -> DQNLossTerms:
        """The TD loss on a replay batch (see :func:`~rl_lightning.algos.dqn_loss.dqn_loss`)."""
        hp = self.hparams
        return dqn_loss(self.policy, self.target_net, batch, hp.gamma, hp.double_dqn, hp.loss_function)

    def training_step(self, epoch: ReplayEpoch, batch_idx: int) -> None:
        """The epoch's gradient steps: per sampled batch the TD loss, backward, clipping, Adam; the target cadence.

        Manual optimization: one Lightning batch is a whole epoch of collection chunks, each collected when its batches
        are first asked for (``rl_lightning/data/chunks.py``), so Lightning's per-batch machinery runs once per epoch
        rather than once per gradient step. ``manual_backward`` keeps DDP's gradient all-reduce on every step;
        ``global_step`` counts the optimizer steps, and with them the target network's cadence (restored on resume).
        """
        hp, optimizer = self.hparams, self.optimizers()
        for batch in epoch:
            if hp.anneal_lr:  # the env-step count is the chunk's for all its gradient steps
                self.anneal_lr(hp.lr)
            terms = self.loss_fn(batch)
            optimizer.zero_grad(set_to_none=True)
            self.manual_backward(terms.loss)
            # Clips to max_grad_norm and refuses (or, by option, skips) a NaN or inf update.
            if self.guard.check(self, optimizer, terms):
                optimizer.step()
                self.train_terms.append(torch.stack([terms.loss.detach(), terms.q_value, terms.td_error]))
                if self.global_step % hp.target_update_interval == 0:
                    self.update_targets()

    @torch.no_grad()
    def update_targets(self) -> None:
        """Move the target network toward the online one: ``target <- (1 - tau) target + tau online``."""
        for target, online in zip(self.target_net.parameters(), self.policy.parameters(), strict=True):
            target.lerp_(online, self.hparams.tau)

    def on_train_epoch_end(self) -> None:
        metrics = {
            "train/epsilon": self.epsilon_schedule(self.env_steps),
            "train/lr": self.optimizers().param_groups[0]["lr"],
        }
        self.log_rollout_metrics({**metrics, **self.train_means(_TRAIN_METRICS)})
