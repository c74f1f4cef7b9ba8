"""PPO (Schulman et al., 2017) as a LightningModule.

Data flow of one epoch: ``RolloutDataset`` collects a rollout and yields it with its
shuffled minibatch plan; ``training_step`` runs the update phase: for each minibatch the
clipped loss (``rl_lightning/algos/ppo_loss.py``), backward, gradient clipping
(``max_grad_norm``) and the optimizer step. Implementation details follow CleanRL's
``ppo.py`` / ``ppo_continuous_action.py``; see ``docs/algos/ppo.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rl_lightning.algos import compat
from rl_lightning.algos.base import RLModule
from rl_lightning.algos.ppo_loss import LOSS_COEFS, minibatch_loss, sequence_minibatch_loss
from rl_lightning.algos.update import adam, clear_grads
from rl_lightning.checks import check_hidden_sizes, check_non_negative, check_positive, check_positive_int
from rl_lightning.data import RolloutDataModule, UpdatePlan
from rl_lightning.faults import interrupt_request
from rl_lightning.nets import ActorCritic
from rl_lightning.nets.encoders import build_encoder, check_encoder_argument
from rl_lightning.nets.recurrent import CELLS, RecurrentActorCritic

_TRAIN_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
ROLLOUT_KEYS = ("obs", "action", "log_prob", "value", "advantage", "return")


class PPO(RLModule):
    """Proximal Policy Optimization with the clipped surrogate objective.

    This module holds every learning setting; the data
    (:class:`~rl_lightning.data.RolloutDataModule`) says how experience is gathered (env,
    ``num_envs``, ``rollout_steps``, object sets) and prepares each rollout by this module's
    :attr:`update_plan`.

    Args:
        lr: Adam learning rate (``eps=1e-5``, CleanRL's detail 3).
        anneal_lr: Decay the learning rate linearly to 0 over ``total_timesteps``.
        gamma: Discount factor.
        gae_lambda: GAE's lambda (CleanRL's detail 5).
        update_epochs: Passes over each rollout.
        num_minibatches: Minibatches per pass; must divide ``rollout_steps * num_envs``
            (checked when training starts, where the rollout's size is known).
        clip_coef: Ratio clipping epsilon.
        clip_vloss: Clip value updates around the rollout's values.
        ent_coef: Entropy bonus coefficient.
        vf_coef: Value loss coefficient.
        max_grad_norm: Global gradient-norm clip before every optimizer step (Lightning's
            ``clip_gradients``); ``None`` disables it. The Trainer's ``gradient_clip_val`` does
            not apply (PPO optimizes manually): set this instead.
        norm_adv: Normalize advantages per minibatch.
        hidden_sizes: Hidden widths of the default actor and critic MLPs (``[]``: linear heads, as on
            CleanRL's Atari CNN).
        normalize_obs: Running observation normalization inside the policy.
        init_log_std: Initial log standard deviation for continuous actions.
        total_timesteps: Environment-step budget over all ranks.
        save_interval: Epochs between checkpoints (``None``: the Trainer decides).
        keep_last: Interval checkpoints kept on disk (``None``: all).
        on_nonfinite: ``"stop"`` or ``"skip"`` on a NaN or inf (see :class:`~rl_lightning.algos.RLModule`).
        actor: Optional actor network (normalized obs -> logits or means); not saved in
            hyperparameters, so pass it again to ``load_from_checkpoint``.
        critic: Optional critic network (normalized obs -> value ``[B, 1]``); likewise.
        encoder: How image and ``Dict`` observations become features for both heads: the
            settings of the default :class:`~rl_lightning.nets.encoders.MultiInputEncoder`
            (``{"cnn_keys": [...], "mlp_keys": [...], "cnn_kernels": [...], ...}``; Hydra:
            ``algo.encoder.cnn_keys=[rgb]``; ``None``: chosen from the space), or one's own
            encoder: a module, or a callable that builds it from the observation space (Hydra:
            ``_target_`` with ``_partial_: true``), with a ``features_dim`` attribute. One's
            own is not saved in hyperparameters: pass it again to ``load_from_checkpoint``.
        recurrent: A policy with memory (:class:`~rl_lightning.nets.recurrent.RecurrentActorCritic`):
            rollouts carry its state (:mod:`rl_lightning.data.recurrent_rollout`) and the update
            replays whole env sequences; ``num_minibatches`` must then divide ``num_envs``.
        cell: The recurrent core, ``"lstm"`` or ``"gru"`` (with ``recurrent``).
        recurrent_size: Width of the recurrent state (with ``recurrent``).
        shared_core: One core for actor and critic, or one each (with ``recurrent``).
        bptt_length: Truncated backpropagation through time (with ``recurrent``): the update
            replays sequences of this many steps, each from the state the rollout acted with at
            its first step; must divide ``rollout_steps``. ``None``: the whole rollout.
    """

    datamodule_class = RolloutDataModule

    def __init__(
        self,
        lr: float = 2.5e-4,
        anneal_lr: bool = True,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        clip_coef: float = 0.2,
        clip_vloss: bool = True,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        max_grad_norm: float | None = 0.5,
        norm_adv: bool = True,
        hidden_sizes: Sequence[int] = (64, 64),
        normalize_obs: bool = True,
        init_log_std: float = 0.0,
        total_timesteps: int = 500_000,
        save_interval: int | None = None,
        keep_last: int | None = 5,
        on_nonfinite: str = "stop",
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        encoder: dict[str, Any] | nn.Module | Callable[[gym.Space], nn.Module] | None = None,
        recurrent: bool = False,
        cell: str = "lstm",
        recurrent_size: int = 128,
        shared_core: bool = True,
        bptt_length: int | None = None,
    ):
        super().__init__(total_timesteps, save_interval, keep_last, on_nonfinite, max_grad_norm)
        if recurrent:
            if actor is not None or critic is not None:
                raise ValueError(
                    "recurrent=True builds its own heads after the recurrent core; a custom actor or critic cannot be "
                    "combined with it. Drop algo.actor / algo.critic, or set recurrent=false."
                )
            if cell not in CELLS:
                raise ValueError(f"cell must be one of {CELLS}, got {cell!r} (Hydra: algo.cell=lstm).")
            check_positive_int(recurrent_size=recurrent_size)
        elif bptt_length is not None:
            raise ValueError(
                f"bptt_length={bptt_length} truncates the backpropagation through a recurrent core; this policy "
                "has none. Set recurrent=true (Hydra: algo.recurrent=true), or drop bptt_length."
            )
        self.automatic_optimization = False  # the update phase runs inside training_step
        check_positive(lr=lr, clip_coef=clip_coef)
        check_non_negative(ent_coef=ent_coef, vf_coef=vf_coef)
        if max_grad_norm is not None:
            check_positive(max_grad_norm=max_grad_norm)
        check_hidden_sizes(hidden_sizes, allow_empty=True)
        #: GAE's and the minibatch plan's settings, which the rollout stream reads (``OnPolicyLearner``).
        self.update_plan = UpdatePlan(gamma, gae_lambda, update_epochs, num_minibatches, bptt_length)
        encoder, own_encoder = check_encoder_argument(encoder)  # checked now, before any env is made
        self.save_hyperparameters(ignore=["actor", "critic", *(["encoder"] if own_encoder else [])])
        self._actor, self._critic, self._encoder = actor, critic, encoder

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Rebuild the policy (``RLModule``); ``load_from_checkpoint`` of an earlier version's file takes the
        learning settings it kept with the data module (``compat.take_moved_settings``)."""
        super().on_load_checkpoint(checkpoint)
        if self._trainer is None:  # load_from_checkpoint, not a resume (where the caller's settings hold)
            compat.take_moved_settings(self, checkpoint)

    def build_policy(self, observation_space: gym.Space, action_space: gym.Space) -> ActorCritic:
        """An :class:`ActorCritic` for these spaces (with the user's networks, if given)."""
        hp = self.hparams
        encoder = self._encoder
        if callable(encoder) and not isinstance(encoder, nn.Module):
            encoder = build_encoder(encoder, observation_space, hp.normalize_obs)
        if hp.get("recurrent"):  # .get: checkpoints of earlier versions have none
            return RecurrentActorCritic(observation_space, action_space, tuple(hp.hidden_sizes), hp.normalize_obs,
                                        hp.init_log_std, encoder, hp.cell, hp.recurrent_size,
                                        hp.shared_core)  # fmt: skip
        return ActorCritic(observation_space, action_space, tuple(hp.hidden_sizes), self._actor, self._critic,
                           normalize_obs=hp.normalize_obs, init_log_std=hp.init_log_std, encoder=encoder)  # fmt: skip

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return adam(self.policy.parameters(), lr=self.hparams.lr, eps=1e-5)

    def on_train_epoch_start(self) -> None:
        # One rollout per epoch: the learning rate steps down once per rollout (CleanRL's detail 4).
        if self.hparams.anneal_lr:
            self.anneal_lr(self.hparams.lr)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> None:
        """PPO's update phase on one rollout: ``update_epochs x num_minibatches`` clipped-loss steps.

        Manual optimization: one Lightning batch is a whole rollout, so Lightning's per-batch
        machinery runs once per rollout rather than once per minibatch (see
        ``rl_lightning/data/rollout.py``). ``manual_backward`` keeps DDP's gradient all-reduce
        on every step; ``global_step`` counts every optimizer step.
        """
        hp, optimizer = self.hparams, self.optimizers()
        sequences = "initial_state" in batch  # a recurrent policy's rollout: minibatches of whole env sequences
        keys = (*ROLLOUT_KEYS, "episode_start") if sequences else ROLLOUT_KEYS
        # Plain tensors: indexing six tensors costs less than indexing the TensorDict.
        rollout = {key: batch["rollout"][key] for key in keys}
        coefs = {name: hp[name] for name in LOSS_COEFS}  # clip_coef, ent_coef, vf_coef, norm_adv, clip_vloss
        for index in batch["minibatches"]:
            if sequences:
                terms = sequence_minibatch_loss(self.policy, rollout, batch["initial_state"], index, **coefs)
            else:
                terms = minibatch_loss(self.policy, {key: value[index] for key, value in rollout.items()}, **coefs)
            clear_grads(optimizer)
            self.manual_backward(terms.loss)
            # Clips to max_grad_norm and refuses (or, by option, skips) a NaN or inf update.
            if self.gradients_finite(optimizer, terms):
                self.step_optimizer(optimizer)
                # Logged once per epoch from these (self.log on every step would cost more than the step).
                self.train_terms.append(terms.diagnostics)  # in _TRAIN_METRICS order
            interrupt_request.check()  # a signal stops the update phase between minibatches

    def on_train_epoch_end(self) -> None:
        train = self.train_means(_TRAIN_METRICS)
        if "train/policy_loss" in train:
            train["train/lr"] = self.optimizers().param_groups[0]["lr"]
        self.log_rollout_metrics(train)
