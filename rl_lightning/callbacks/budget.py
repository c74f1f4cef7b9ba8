"""Stop training when the environment-step budget is spent."""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn


class EnvStepBudget(pl.Callback):
    """Stops ``fit`` once ``total_timesteps`` environment steps (over all ranks) are taken.

    Works with any ``Trainer``: it reads ``pl_module.env_steps`` after each epoch and sets
    ``trainer.should_stop``. A resumed run counts on from its checkpointed steps, and a run
    resumed after its budget was spent stops before collecting anything.

    Args:
        total_timesteps: The budget in environment steps.
    """

    def __init__(self, total_timesteps: int):
        self.total_timesteps = total_timesteps

    def _spent(self, pl_module: pl.LightningModule) -> bool:
        return pl_module.env_steps >= self.total_timesteps

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._spent(pl_module):
            trainer.should_stop = True
            return
        steps_per_epoch = pl_module.env_steps_per_epoch  # 0 without a data module
        taken = -(-self.total_timesteps // steps_per_epoch) * steps_per_epoch if steps_per_epoch else 0
        # Off-policy: random actions and no gradient step up to learning_starts.
        settings = trainer.datamodule.hparams if taken else {}
        starts, batch = settings.get("learning_starts", 0), settings.get("batch_size", 0)
        stored = taken // trainer.world_size  # the most transitions one rank stores
        if starts >= taken > 0 or batch > stored > 0:  # a gradient step needs a batch of a rank's own transitions
            what = f"learning_starts={starts} is not below" if starts >= taken else f"batch_size={batch} is more than"
            raise ValueError(f"{what} the {taken} env steps the run takes (total_timesteps={self.total_timesteps} in "
                             f"whole epochs of {steps_per_epoch}; {stored} per rank): it would take no gradient step. "
                             "Lower it or raise total_timesteps.")  # fmt: skip
        if taken != self.total_timesteps and steps_per_epoch:  # an epoch is not cut short
            rank_zero_info(
                f"total_timesteps={self.total_timesteps} is not a multiple of the {steps_per_epoch} env steps an "
                f"epoch takes: the run ends after {taken // steps_per_epoch} epochs, {taken} env steps."
            )
        max_epochs = trainer.max_epochs
        if max_epochs is not None and max_epochs >= 0 and steps_per_epoch:
            reachable = max_epochs * steps_per_epoch
            if reachable < self.total_timesteps:
                rank_zero_warn(
                    f"Trainer(max_epochs={max_epochs}) stops after {reachable} env steps, before "
                    f"total_timesteps={self.total_timesteps}. Pass max_epochs=-1 to let the budget decide."
                )

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._spent(pl_module):
            trainer.should_stop = True
