"""SAC (Haarnoja et al., 2018, "Soft Actor-Critic Algorithms and Applications") as a LightningModule.

Data flow of one epoch: ``ReplayDataset`` steps the envs in chunks of ``train_freq`` vector
steps and hands out each chunk; ``training_step`` takes the chunk's gradient steps: for each
batch sampled from the replay buffer the SAC losses (:func:`~rl_lightning.algos.sac_loss.sac_loss`:
twin Q with clipped double-Q targets from target critics, the reparameterized actor loss,
and the entropy temperature loss; checked against torchrl's ``SACLoss``), one backward of
their sum (:func:`~rl_lightning.algos.sac_loss.sac_objective`; the fast path writes that
gradient out, ``fast/sac.py``), one Adam step over the actor, critic and temperature
parameter groups by hand (manual optimization), then the target critics' Polyak averaging.
See ``docs/algos/sac.md``.
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

from rl_lightning import fast
from rl_lightning.algos.base import RLModule
from rl_lightning.algos.sac_loss import SACLossTerms, sac_loss, sac_objective
from rl_lightning.algos.update import adam, clear_grads
from rl_lightning.checks import check_hidden_sizes, check_positive, check_unit_interval
from rl_lightning.data import ReplayDataModule
from rl_lightning.data.chunks import ReplayChunk
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
        total_timesteps: Environment-step budget over all ranks.
        save_interval: Epochs between checkpoints (``None``: the Trainer decides).
        keep_last: Interval checkpoints kept on disk (``None``: all).
        on_nonfinite: ``"stop"`` or ``"skip"`` on a NaN or inf (see :class:`~rl_lightning.algos.RLModule`).
        encoder: How image and ``Dict`` observations become features: settings of the default
            :class:`~rl_lightning.nets.encoders.MultiInputEncoder` (Hydra: ``algo.encoder.cnn_keys=[rgb]``;
            ``None``: chosen from the space), or one's own encoder, a module or a callable that
            builds it from the observation space (not saved in the hyperparameters). The actor
            and the critics each get their own encoder (per network, as SB3's SAC by default);
            the target critics a copy of the critics'. Vector observations do not use it.
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
        keep_last: int | None = 5,
        on_nonfinite: str = "stop",
        encoder: dict[str, Any] | nn.Module | Callable[[gym.Space], nn.Module] | None = None,
    ):
        super().__init__(total_timesteps, save_interval, keep_last, on_nonfinite, max_grad_norm)
        check_positive(actor_lr=actor_lr, critic_lr=critic_lr, alpha_lr=alpha_lr, init_alpha=init_alpha)
        check_unit_interval(gamma=gamma, tau=tau, open_low=True)
        if max_grad_norm is not None:
            check_positive(max_grad_norm=max_grad_norm)
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
        own_module = isinstance(self._encoder, nn.Module)
        critic_encoder = (
            copy.deepcopy(actor_encoder) if own_module else build_encoder(self._encoder, observation_space, False)
        )
        policy = SquashedGaussianActor(observation_space, action_space, tuple(hp.hidden_sizes), actor_encoder)
        critic_dim = policy.obs_dim if critic_encoder is None else int(critic_encoder.features_dim)
        self.critics = QEnsemble(critic_dim, policy.act_dim, tuple(hp.hidden_sizes), 2, critic_encoder)
        self.target_critics = copy.deepcopy(self.critics).requires_grad_(False)
        self.target_entropy = -float(policy.act_dim) if hp.target_entropy is None else float(hp.target_entropy)
        return policy

    def configure_optimizers(self) -> torch.optim.Adam:
        """One Adam over three parameter groups, each with its learning rate: actor, critics, temperature.

        Adam updates every tensor on its own, so the groups step exactly as three separate
        optimizers would; one optimizer makes one ``LightningOptimizer.step`` per gradient
        step instead of three, whose hooks, closure and torch's step wrapper cost more
        than the fused kernels (``docs/algos/sac.md``). Lightning's ``global_step``
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
        return sac_loss(
            self.policy,
            self.critics,
            self.target_critics,
            self.log_alpha,
            batch,
            self.hparams.gamma,
            self.target_entropy,
        )

    def training_step(self, chunk: ReplayChunk, batch_idx: int) -> None:
        """The chunk's gradient steps (one Lightning batch per collection chunk, ``rl_lightning/data/chunks.py``)."""
        optimizer = self.optimizers()
        for batch in chunk:
            self.update(batch, optimizer)

    def update(self, batch: TensorDict, optimizer) -> None:
        """One SAC update on a replay batch: critics, actor, temperature, then the targets."""
        # The three losses touch disjoint parameters (sac_loss detaches the critics inside the
        # actor loss and the log-probs inside the temperature loss): one backward of their sum serves all.
        if type(self).loss is SAC.loss:
            hp = self.hparams
            total, terms = sac_objective(
                self.policy, self.critics, self.target_critics, self.log_alpha, batch, hp.gamma, self.target_entropy
            )
        else:  # a subclass's own losses
            terms = self.loss(batch)
            total = terms.loss_qvalue + terms.loss_actor + terms.loss_alpha
        clear_grads(optimizer)
        self.manual_backward(total)
        del total  # its graph and saved tensors go now, before the optimizer step
        # Each group clipped on its own, as separate optimizers would; a NaN or inf update is
        # refused (or, by option, skipped together with its target update).
        if self.gradients_finite(optimizer, terms, clip_per_group=True):
            self.step_optimizer(optimizer)
            self.update_targets()
            self.train_terms.append(torch.stack([t.detach() for t in terms]))

    @torch.no_grad()
    def update_targets(self) -> None:
        """Polyak-average the target critics toward the online ones: ``target <- (1 - tau) target + tau online``."""
        targets, sources = list(self.target_critics.parameters()), list(self.critics.parameters())
        if not fast.polyak(targets, sources, self.hparams.tau):  # one foreach call on the fast path
            for target, source in zip(targets, sources, strict=True):
                target.lerp_(source, self.hparams.tau)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Rebuild the networks, and read checkpoints written while SAC ran torchrl's ``SACLoss``."""
        super().on_load_checkpoint(checkpoint)
        checkpoint["state_dict"] = upgrade_sacloss_state_dict(checkpoint["state_dict"])
        if len(checkpoint.get("optimizer_states", ())) == 3:
            checkpoint["optimizer_states"] = [merge_optimizer_states(checkpoint["optimizer_states"])]

    def on_train_epoch_end(self) -> None:
        self.log_rollout_metrics(self.train_means(_TRAIN_METRICS))


def merge_optimizer_states(states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One optimizer state dict from several, their parameter groups in order (SAC's actor, critics, temperature).

    Checkpoints written while SAC stepped three Adam optimizers load into its one Adam of
    three groups: parameter ids are renumbered in order, per-parameter state moves with them.
    """
    merged: dict[str, Any] = {"state": {}, "param_groups": []}
    offset = 0
    for state in states:
        for group in state["param_groups"]:
            merged["param_groups"].append({**group, "params": [offset + i for i in group["params"]]})
        merged["state"].update({offset + i: value for i, value in state["state"].items()})
        offset += sum(len(group["params"]) for group in state["param_groups"])
    return merged


#: Where the weights of a checkpoint written with torchrl's ``SACLoss`` (up to this module's
#: pure loss) now live. Its critics were stacked in the same layout and the optimizers held
#: the same tensors in the same order, so weights and optimizer states carry over as they are.
_SACLOSS_PREFIXES = {
    "loss_module.qvalue_network_params.module.net.": "critics.layers.",
    "loss_module.target_qvalue_network_params.module.net.": "target_critics.layers.",
}


def upgrade_sacloss_state_dict(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename a ``SACLoss``-era SAC state dict's entries to this module's; other state dicts pass unchanged.

    ``loss_module.log_alpha`` becomes ``log_alpha``; critic layer ``net.{2i}`` (the ``i``-th
    ``nn.Linear`` of the MLP) becomes ``layers.{i}``; the loss's copies of the actor's
    weights, its constants (``alpha_init``, ``_target_entropy``, gamma) are dropped: the
    policy's own entries and the hyperparameters hold them.
    """
    if "loss_module.log_alpha" not in state_dict:
        return state_dict
    upgraded = {}
    for key, value in state_dict.items():
        if key == "loss_module.log_alpha":
            upgraded["log_alpha"] = value
        elif not key.startswith("loss_module."):
            upgraded[key] = value
        for old, new in _SACLOSS_PREFIXES.items():
            if key.startswith(old):
                index, name = key[len(old) :].split(".")
                upgraded[f"{new}{int(index) // 2}.{name}"] = value
    return upgraded
