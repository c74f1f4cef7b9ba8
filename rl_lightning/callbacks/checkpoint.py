"""Interval checkpoints, a ``last.ckpt`` that always holds the final state, and ``best.ckpt``."""

from __future__ import annotations

import os

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint


def run_checkpoint_dir(trainer: pl.Trainer) -> str:
    """``<trainer.log_dir>/checkpoints``: the same for every logger kind (ModelCheckpoint's own
    default nests a W&B run under project/run-id), so a run keeps its checkpoints in one place."""
    return os.path.join(trainer.log_dir or trainer.default_root_dir, "checkpoints")


class IntervalCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` every ``save_interval`` epochs, keeping ``last.ckpt`` current.

    Lightning writes ``last.ckpt`` only when an interval checkpoint is due, so a run whose
    budget ends between intervals would leave a stale ``last.ckpt``. This callback also
    writes it when training ends, so ``fit(ckpt_path="last")`` and the final evaluation
    always see the final weights, optimizer state and counters.

    Files are named ``epoch=E-env_steps=S.ckpt``: the modules log ``step`` as the env-step
    count (the x-axis of every logger), which ``ModelCheckpoint`` reads for ``{step}``.

    Args:
        save_interval: Epochs between numbered checkpoints.
        dirpath: Directory; ``None`` uses ``<trainer.log_dir>/checkpoints``: the first
            logger's directory (a W&B logger's ``save_dir``), or ``default_root_dir``.
        **kwargs: Passed to ``ModelCheckpoint``.
    """

    def __init__(self, save_interval: int = 1, dirpath: str | None = None, **kwargs):
        kwargs.setdefault("save_top_k", -1)
        kwargs.setdefault("filename", "epoch={epoch}-env_steps={step}")
        kwargs.setdefault("auto_insert_metric_name", False)
        super().__init__(dirpath=dirpath, every_n_epochs=save_interval, save_last=True, **kwargs)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = run_checkpoint_dir(trainer)
        super().setup(trainer, pl_module, stage)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking or self.dirpath is None:
            return
        last = os.path.join(self.dirpath, self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION)
        if self._last_global_step_saved != trainer.global_step or not os.path.exists(last):
            trainer.save_checkpoint(last, weights_only=self.save_weights_only)
            self.last_model_path = last
            self._last_global_step_saved = trainer.global_step


class BestCheckpoint(ModelCheckpoint):
    """Keeps ``best.ckpt``: the state with the highest ``eval/return_mean`` seen so far.

    The selection reads the ``train`` object set's evaluation only, never ``eval_ood/``: the
    held-out set stays out of every choice, so its return measured on ``best.ckpt`` is still
    an honest out-of-distribution figure. Written after an evaluation that beats every earlier
    one (epochs without evaluation leave it alone).

    Args:
        dirpath: Directory; ``None`` uses ``<trainer.log_dir>/checkpoints`` like ``IntervalCheckpoint``.
        monitor: The metric to maximize.
    """

    def __init__(self, dirpath: str | None = None, monitor: str = "eval/return_mean"):
        super().__init__(
            dirpath=dirpath,
            monitor=monitor,
            mode="max",
            save_top_k=1,
            filename="best",
            auto_insert_metric_name=False,
            enable_version_counter=False,
        )

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = run_checkpoint_dir(trainer)
        super().setup(trainer, pl_module, stage)

    def _save_topk_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict) -> None:
        # Before the first evaluation there is nothing to compare (ModelCheckpoint would warn).
        if self.monitor in monitor_candidates:
            super()._save_topk_checkpoint(trainer, monitor_candidates)
