"""PPO (Schulman et al., 2017) as a LightningModule.

One epoch: ``RolloutDataset`` yields a rollout of ``[T, N]`` tensors (``rl_lightning/data/rollout.py``);
``training_step`` is the whole update phase, in CleanRL's and rsl_rl's shape: GAE over the rollout, then
``update_epochs`` passes over shuffled minibatches, each the clipped loss (``rl_lightning/algos/ppo_loss.py``),
backward, gradient clipping (``max_grad_norm``) and the optimizer step; then the observation statistics take in the
rollout. Implementation details follow CleanRL's ``ppo.py`` / ``ppo_continuous_action.py``; see ``docs/algos/ppo.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym
import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning import checks
from rl_lightning.algos.base import RLModule
from rl_lightning.algos.checks import check_rollout_cut
from rl_lightning.algos.metrics import explained_variance
from rl_lightning.algos.ppo_loss import LOSS_COEFS, PPOLossTerms, compute_gae, ppo_loss
from rl_lightning.algos.update import adam
from rl_lightning.data import RolloutDataModule
from rl_lightning.faults import interrupt_request
from rl_lightning.nets import ActorCritic, RewardScaler
from rl_lightning.nets.encoders import check_encoder_argument
from rl_lightning.nets.recurrent import RecurrentActorCritic, check_recurrent_settings

_TRAIN_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")


class PPO(RLModule):
    """Proximal Policy Optimization with the clipped surrogate objective.

    This module holds every learning setting; the data (:class:`~rl_lightning.data.RolloutDataModule`)
    says how experience is gathered (env, ``num_envs``, ``rollout_steps``, object sets).

    Args:
        lr: Adam learning rate (``eps=1e-5``, CleanRL's detail 3).
        anneal_lr: Decay the learning rate linearly to 0 over ``total_timesteps``.
        gamma: Discount factor.
        gae_lambda: GAE's lambda (CleanRL's detail 5).
        update_epochs: Passes over each rollout.
        num_minibatches: Minibatches per pass; must divide ``rollout_steps * num_envs`` (a recurrent
            policy's: the number of sequences, ``num_envs`` or ``num_envs * rollout_steps / bptt_length``).
        clip_coef: Ratio clipping epsilon.
        clip_vloss: Clip value updates around the rollout's values.
        ent_coef: Entropy bonus coefficient.
        vf_coef: Value loss coefficient.
        max_grad_norm: Global gradient-norm clip before every optimizer step; ``None`` disables it.
            The Trainer's ``gradient_clip_val`` does not apply (PPO optimizes manually).
        norm_adv: Normalize advantages per minibatch.
        hidden_sizes: Hidden widths of the default actor and critic MLPs (``[]``: linear heads, as on
            CleanRL's Atari CNN).
        normalize_obs: Running observation normalization inside the policy.
        normalize_reward: Divide the rewards the update learns from by the running standard deviation of the discounted
            return, clipped to 10 (:class:`~rl_lightning.nets.RewardScaler`; CleanRL's ``ppo_continuous_action.py``
            wraps its envs in gym's ``NormalizeReward``). The returns the run reports stay raw.
        init_log_std: Initial log standard deviation for continuous actions.
        actor: Optional actor network (normalized obs -> logits or means); not saved in
            hyperparameters, so pass it again to ``load_from_checkpoint``.
        critic: Optional critic network (normalized obs -> value ``[B, 1]``); likewise.
        encoder: How image and ``Dict`` observations become features for both heads: the settings of the default
            :class:`~rl_lightning.nets.encoders.MultiInputEncoder` (Hydra: ``algo.encoder.cnn_keys=[rgb]``; ``None``:
            chosen from the space), or one's own encoder: a module, or a callable that builds it from the observation
            space, with a ``features_dim`` attribute (not saved in hyperparameters).
        recurrent: A policy with memory (:class:`~rl_lightning.nets.recurrent.RecurrentActorCritic`):
            rollouts carry its state and the update replays whole env sequences.
        cell: The recurrent core, ``"lstm"`` or ``"gru"`` (with ``recurrent``).
        recurrent_size: Width of the recurrent state (with ``recurrent``).
        shared_core: One core for actor and critic, or one each (with ``recurrent``).
        bptt_length: Truncated backpropagation through time (with ``recurrent``): the update replays
            sequences of this many steps, each from the state the rollout acted with at its first
            step; must divide ``rollout_steps``. ``None``: the whole rollout.
        total_timesteps, save_interval, keep_last, on_nonfinite, flush_denormal, compile:
            As :class:`~rl_lightning.algos.RLModule`.
    """

    datamodule_class = RolloutDataModule
    acting_methods = ("act", "value")
    network_settings = ("hidden_sizes", "encoder", "normalize_obs", "normalize_reward", "recurrent", "cell",
                        "recurrent_size", "shared_core")  # fmt: skip

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
        normalize_reward: bool = False,
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
        flush_denormal: bool = True,
        compile: bool = False,
    ):
        super().__init__(
            total_timesteps, save_interval, keep_last, on_nonfinite, max_grad_norm, flush_denormal, compile
        )
        check_recurrent_settings(recurrent, cell, recurrent_size, bptt_length, actor is not None or critic is not None)
        checks.check_positive_int(update_epochs=update_epochs, num_minibatches=num_minibatches)
        checks.check_unit_interval(gamma=gamma, gae_lambda=gae_lambda)
        checks.check_positive(lr=lr, clip_coef=clip_coef)
        checks.check_non_negative(ent_coef=ent_coef, vf_coef=vf_coef)
        checks.check_hidden_sizes(hidden_sizes, allow_empty=True)
        checks.check_bool(anneal_lr=anneal_lr, clip_vloss=clip_vloss, norm_adv=norm_adv, normalize_obs=normalize_obs,
                          normalize_reward=normalize_reward, recurrent=recurrent, shared_core=shared_core)  # fmt: skip
        self.automatic_optimization = False  # the update phase runs inside training_step
        encoder, own_encoder = check_encoder_argument(encoder)  # checked now, before any env is made
        self.save_hyperparameters(ignore=["actor", "critic", *(["encoder"] if own_encoder else [])])
        self._actor, self._critic, self._encoder = actor, critic, encoder
        self.reward_scaler = RewardScaler(gamma) if normalize_reward else None

    def build_policy(self, observation_space: gym.Space, action_space: gym.Space) -> ActorCritic:
        """An :class:`ActorCritic` (or :class:`RecurrentActorCritic`) for these spaces, with the user's networks."""
        hp = self.hparams
        encoder = self._encoder
        if hp.recurrent:
            return RecurrentActorCritic(observation_space, action_space, tuple(hp.hidden_sizes), hp.normalize_obs,
                                        hp.init_log_std, encoder, hp.cell, hp.recurrent_size,
                                        hp.shared_core)  # fmt: skip
        return ActorCritic(observation_space, action_space, tuple(hp.hidden_sizes), self._actor, self._critic,
                           normalize_obs=hp.normalize_obs, init_log_std=hp.init_log_std, encoder=encoder)  # fmt: skip

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return adam(self.policy.parameters(), lr=self.hparams.lr, eps=1e-5)

    def sequence_length(self, rollout_steps: int) -> int:
        """Steps per sequence the update replays: 1 (each step on its own) without memory; a recurrent policy's
        ``bptt_length``, or the whole rollout."""
        return (self.hparams.bptt_length or rollout_steps) if self.hparams.recurrent else 1

    def setup(self, stage: str) -> None:
        super().setup(stage)
        data = self.trainer.datamodule
        if stage == "fit" and isinstance(data, RolloutDataModule):
            steps = data.hparams.rollout_steps
            check_rollout_cut(steps, data.hparams.num_envs, self.sequence_length(steps), self.hparams.num_minibatches)

    def on_train_epoch_start(self) -> None:
        # One rollout per epoch: the learning rate steps down once per rollout (CleanRL's detail 4).
        if self.hparams.anneal_lr:
            self.anneal_lr(self.hparams.lr)
        if self.acting_copy is not None:  # the rollout acts with the weights it trains, whatever sync_interval
            self.acting_copy.sync()

    def loss(self, mb: dict[str, Any]) -> PPOLossTerms:
        """The clipped loss on a minibatch of ``B`` sequences of ``L`` steps (``[L, B]`` tensors, a recurrent policy's
        ``state`` at each step), as :func:`~rl_lightning.algos.ppo_loss.ppo_loss` computes it."""
        state = mb["state"][0] if "state" in mb else None  # a sequence replays from the state of its first step
        log_prob, entropy, value = self.policy.evaluate_actions(mb["obs"], mb["action"], mb["episode_start"], state)
        if not log_prob.shape == entropy.shape == value.shape == mb["log_prob"].shape:  # the loss would broadcast them
            raise ValueError(f"{type(self.policy).__name__}.evaluate_actions returned {tuple(log_prob.shape)}, "
                             f"{tuple(entropy.shape)} and {tuple(value.shape)}; PPO needs the minibatch's [L, B], "
                             f"{tuple(mb['log_prob'].shape)}, for each.")  # fmt: skip
        old = (mb[key] for key in ("log_prob", "value", "advantage", "return"))  # [L, B], unflattened: no view nodes
        coefs = {name: self.hparams[name] for name in LOSS_COEFS}
        return ppo_loss(log_prob, entropy, value, *old, **coefs)

    def training_step(self, rollout: TensorDict, batch_idx: int) -> None:
        """The update phase on one rollout ``[T, N]``: GAE, then ``update_epochs x num_minibatches`` loss steps.

        The rollout is cut into ``S`` sequences of ``L`` steps (``L = 1`` without memory, so a
        minibatch is any transitions, CleanRL's ``ppo.py``; a recurrent policy replays whole env
        sequences from their first state, CleanRL's ``ppo_atari_lstm.py``). ``manual_backward`` keeps
        DDP's gradient all-reduce on every step; ``global_step`` counts every optimizer step.
        """
        hp, optimizer = self.hparams, self.optimizers()
        T, N = rollout.batch_size
        if self.reward_scaler is not None:  # what the update learns from; the episode returns were counted raw
            rollout["reward"] = self.reward_scaler(rollout["reward"], rollout["terminated"] | rollout["truncated"])
        advantage, returns = compute_gae(rollout, hp.gamma, hp.gae_lambda)
        rollout.update({"advantage": advantage, "return": returns})
        self.explained_variance = explained_variance(rollout["value"].flatten(), returns.flatten())
        L = self.sequence_length(T)
        sequences = rollout.apply(lambda x: x.reshape(T // L, L, *x.shape[1:]).transpose(0, 1).flatten(1, 2),
                                  batch_size=[L, T // L * N])  # fmt: skip
        # Plain tensors (a TensorDict for Dict observations): indexing them costs less than indexing the TensorDict.
        keys = ("obs", "action", "log_prob", "value", "advantage", "return", "episode_start", "state")
        columns = {key: sequences[key] for key in keys if key in sequences.keys()}
        for _ in range(hp.update_epochs):
            for index in torch.randperm(sequences.shape[1]).to(self.device).view(hp.num_minibatches, -1):
                terms = self.loss_fn({key: value[:, index] for key, value in columns.items()})
                optimizer.zero_grad(set_to_none=True)
                self.manual_backward(terms.loss)
                if self.guard.check(self, optimizer, terms):  # clips to max_grad_norm; refuses (or skips) a NaN
                    optimizer.step()
                    self.train_terms.append(terms.diagnostics)  # logged once per epoch
                interrupt_request.check()  # a signal stops the update phase between minibatches
        # The statistics take in the rollout after its update: acting and learning on it saw the same normalization.
        self.policy.update_normalizer(rollout["obs"].flatten(0, 1))

    def on_train_epoch_end(self) -> None:
        train = self.train_means(_TRAIN_METRICS)
        if "train/policy_loss" in train:
            train["train/lr"] = self.optimizers().param_groups[0]["lr"]
        self.log_rollout_metrics(train)
