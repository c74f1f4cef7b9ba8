"""``ActorSync``: act with a copy of the policy on another device or dtype, synced after each update."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from rl_lightning.nets.actor_copy import ActorCopy


class ActorSync(pl.Callback):
    """Gives the algorithm an acting copy of its policy (:class:`~rl_lightning.nets.actor_copy.ActorCopy`).

    Rollouts, replay collection and evaluation then act with the copy (the data modules ask the algorithm for its
    ``acting_policy``); the optimizer keeps updating the learner. Each optimizer step marks the copy stale; the next act
    after ``sync_interval`` of them pulls the weights in (timed as ``time/sync_seconds``): for SAC and DQN every
    ``sync_interval`` gradient steps. PPO syncs the copy before every rollout (``PPO.on_train_epoch_start``), whatever
    the interval: its ratio needs the log-probabilities of the weights it trains.

    Args:
        device: Where the copy acts; ``None`` keeps the learner's device (a dtype-only copy).
        dtype: The copy's dtype: ``"float32"``, ``"bfloat16"`` or ``"float16"``.
        sync_interval: Optimizer steps between syncs (off-policy; PPO syncs before every rollout whatever its value).
        verify: Check the weight fingerprint after every sync (``WeightSyncError`` on a mismatch).
    """

    def __init__(
        self, device: str | None = "cpu", dtype: str = "float32", sync_interval: int = 1, verify: bool = False
    ):
        self.device = device
        self.dtype = dtype
        self.sync_interval = sync_interval
        self.verify = verify
        # Checks the arguments now rather than when fit starts.
        ActorCopy(torch.nn.Linear(1, 1), "cpu", dtype, sync_interval)

    def _attach(self, pl_module: pl.LightningModule) -> None:
        policy = pl_module.policy
        actor = pl_module.acting_copy
        if policy is None or (actor is not None and actor.learner is policy):
            return
        device = pl_module.device if self.device is None else self.device
        pl_module.acting_copy = ActorCopy(policy, device, self.dtype, self.sync_interval, self.verify)
        if self.verify:
            pl_module.acting_copy.verify()

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if pl_module.policy is not None and pl_module.policy.initial_state(1) is not None:
            raise ValueError(
                "A recurrent policy (algo.recurrent=true) acts with its own state; an acting copy (ActorSync, "
                "callbacks=split_actor) of it is not supported. Drop the ActorSync callback, or set "
                "algo.recurrent=false."
            )
        self._attach(pl_module)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Evaluation measures the learner as it is now, whatever the interval, and also after
        # weights were loaded behind the copy's back (trainer.test(ckpt_path=...)): always sync.
        self._attach(pl_module)
        pl_module.acting_copy.sync()

    on_test_start = on_validation_start

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        pl_module.acting_copy.mark_stale()

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        pl_module.acting_copy = None
