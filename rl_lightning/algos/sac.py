"""SAC (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications") as a LightningModule.

Data flow of one epoch: ``ReplayDataset`` steps the envs and yields batches sampled from
the replay buffer; ``training_step`` computes torchrl's ``SACLoss`` (twin Q with clipped
double-Q targets from target critics, the reparameterized actor loss, and the entropy
temperature loss), steps the actor, critic and temperature optimizers by hand (manual
optimization), then moves the target critics by Polyak averaging. See ``docs/algos/sac.md``.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import gymnasium as gym
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from rl_lightning.algos.base import RLModule, adam, check_hidden_sizes, check_positive
from rl_lightning.data import ReplayDataModule
from rl_lightning.data.base import check_unit_interval
from rl_lightning.data.replay import to_torchrl_batch
from rl_lightning.nets.sac import QNetwork, SquashedGaussianActor

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate, ValueEstimators

_TRAIN_METRICS = ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy")


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
        total_timesteps: Environment-step budget over all ranks.
        save_interval: Epochs between checkpoints (``None``: the Trainer decides).
    """

    datamodule_class = ReplayDataModule

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
    ):
        super().__init__(total_timesteps=total_timesteps, save_interval=save_interval)
        check_positive(actor_lr=actor_lr, critic_lr=critic_lr, alpha_lr=alpha_lr, init_alpha=init_alpha)
        check_unit_interval("gamma", gamma, open_low=True)
        check_unit_interval("tau", tau, open_low=True)
        if max_grad_norm is not None:
            check_positive(max_grad_norm=max_grad_norm)
        check_hidden_sizes(hidden_sizes)
        self.save_hyperparameters()
        # Three optimizers stepped by hand (Lightning's automatic loop steps one loss).
        self.automatic_optimization = False
        self.loss_module: SACLoss | None = None
        self.target_updater: SoftUpdate | None = None
        self._train_terms: list[torch.Tensor] = []

    def build_policy(self, observation_space: gym.Space, action_space: gym.Space) -> SquashedGaussianActor:
        """The acting policy; also builds torchrl's ``SACLoss`` over it and two fresh critics.

        The loss shares the actor's parameters (updates reach the acting policy) and owns
        the critics and their targets, stacked for a vectorized forward.
        """
        hp = self.hparams
        policy = SquashedGaussianActor(observation_space, action_space, tuple(hp.hidden_sizes))
        actor = ProbabilisticActor(
            TensorDictModule(policy.net, in_keys=["observation"], out_keys=["loc", "scale"]),
            in_keys=["loc", "scale"],
            distribution_class=TanhNormal,
            distribution_kwargs={"low": policy.low, "high": policy.high},
            return_log_prob=True,
        )
        critics = [
            ValueOperator(
                QNetwork(policy.obs_dim, policy.act_dim, tuple(hp.hidden_sizes)), in_keys=["observation", "action"]
            )
            for _ in range(2)
        ]
        target_entropy = -float(policy.act_dim) if hp.target_entropy is None else float(hp.target_entropy)
        self.loss_module = SACLoss(
            actor,
            critics,
            num_qvalue_nets=len(critics),
            loss_function="l2",
            alpha_init=hp.init_alpha,
            target_entropy=target_entropy,
        )
        self.loss_module.make_value_estimator(ValueEstimators.TD0, gamma=hp.gamma)
        # SACLoss registers its target-entropy buffer on first read; read it now so a
        # checkpoint's state_dict finds it when a fresh module loads.
        _ = self.loss_module.target_entropy
        self.target_updater = SoftUpdate(self.loss_module, tau=hp.tau)
        return policy

    def configure_optimizers(self):
        hp, loss = self.hparams, self.loss_module
        return (
            adam(loss.actor_network_params.values(True, True), lr=hp.actor_lr),
            adam(loss.qvalue_network_params.values(True, True), lr=hp.critic_lr),
            adam([loss.log_alpha], lr=hp.alpha_lr),
        )

    def training_step(self, batch: TensorDict, batch_idx: int) -> None:
        """One SAC update on a replay batch: critics, actor, temperature, then the targets."""
        terms = self.loss_module(to_torchrl_batch(batch))
        optimizers = self.optimizers()
        for optimizer in optimizers:
            optimizer.zero_grad()
        # The three losses touch disjoint parameters (SACLoss detaches the critics inside the
        # actor loss and the log-probs inside the temperature loss): one backward serves all.
        self.manual_backward(terms["loss_qvalue"] + terms["loss_actor"] + terms["loss_alpha"])
        for optimizer in optimizers:
            if self.hparams.max_grad_norm is not None:
                self.clip_gradients(optimizer, self.hparams.max_grad_norm, "norm")
            optimizer.step()
        self.update_targets()
        self._train_terms.append(torch.stack([terms[name].detach() for name in _TRAIN_METRICS]))

    def update_targets(self) -> None:
        """Polyak-average the target critics toward the online ones."""
        self.target_updater.step()

    def on_train_epoch_end(self) -> None:
        metrics = {}
        if self._train_terms:
            means = torch.stack(self._train_terms).mean(0)
            self._train_terms = []
            metrics = {f"train/{name}": means[i] for i, name in enumerate(_TRAIN_METRICS)}
            self.log_dict(metrics, on_step=False, on_epoch=True, sync_dist=True, batch_size=1)
        self.log_rollout_metrics()
