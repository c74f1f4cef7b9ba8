"""The timing profiler: where each epoch's wall time goes."""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info

from rl_lightning.callbacks.interrupt import resumable_stop
from rl_lightning.data.base import collected_since, last_collection

# Phase -> row label. Collection phases come from ``CollectionMetrics``; the optimization and
# evaluation phases are timed here around Lightning's own loops; weight sync is the acting copy's
# (inside inference and evaluation, so not added to the total).
PHASES = {
    "env": "env stepping",
    "inference": "policy inference",
    "optimization": "optimization",
    "evaluation": "evaluation",
    "sync": "weight sync (within the above)",
}


class PhaseTimer(pl.Callback):
    """Splits every training epoch into phases, logs them under ``time/`` and prints a table.

    Per epoch it logs (rank zero's times, straight to the Trainer's loggers, at ``time/env_steps``)
    ``time/<phase>_seconds`` for ``env`` (stepping the envs), ``inference`` (policy calls while collecting),
    ``optimization`` (``training_step`` without the collection inside it: advantages, losses, backward, clipping and
    optimizer steps, gradient all-reduce included), ``evaluation`` (the validation loop on every object set) and
    ``sync`` (an acting copy pulling the learner's weights, :class:`~rl_lightning.callbacks.ActorSync`), plus
    ``time/epoch_seconds``. At the end of ``fit`` it prints each phase's total and share of the wall time.

    The rollout phases are read from the data module's ``last_collection``
    (:class:`~rl_lightning.data.collection.CollectionMetrics`); with another data module only
    the optimization and evaluation phases are filled.

    On a CUDA device kernels run asynchronously, so a phase's clock would stop before its work is done.
    ``synchronize=True`` waits for the device at every phase boundary (the rollout's phases and the optimization), so
    the shares say where device time goes, at a small cost in throughput (``benchmarks/gpu_device_envs.py`` uses it).

    Args:
        print_summary: Print the table when ``fit`` ends (rank zero only).
        synchronize: Wait for the CUDA device at each phase boundary (no effect on the CPU).
    """

    def __init__(self, print_summary: bool = True, synchronize: bool = False):
        self.print_summary = print_summary
        self.synchronize = synchronize
        self.totals = dict.fromkeys(PHASES, 0.0)
        self.epochs = 0
        self._epoch = dict.fromkeys(PHASES, 0.0)
        self._batch_start = self._val_start = self._epoch_start = self._fit_start = 0.0
        self.fit_seconds = 0.0
        self.last_metrics: dict[str, float] = {}
        self._logged_collection = None
        self._collection_at_batch_start = None
        self._synced = 0.0

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._fit_start = time.perf_counter()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        stream = getattr(trainer.datamodule, "train_dataset", None)  # built by the dataloader, before this hook
        if self.synchronize and stream is not None:
            stream.synchronize_timing = True
        # A resume from a checkpoint written inside an epoch restores that epoch without calling
        # on_train_epoch_start: its clock starts here, not at 0 (which logged the machine's uptime).
        self.on_train_epoch_start(trainer, pl_module)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._epoch = dict.fromkeys(PHASES, 0.0)
        self._epoch_start = time.perf_counter()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._wait(pl_module)
        self._collection_at_batch_start = last_collection(trainer)
        self._batch_start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._wait(pl_module)
        seconds = time.perf_counter() - self._batch_start
        collection = last_collection(trainer)
        if collection is not None and collection is not self._collection_at_batch_start:
            seconds -= collection.rollout_seconds  # collected inside the batch (replay): not optimization
        self._epoch["optimization"] += max(seconds, 0.0)

    def _wait(self, pl_module: pl.LightningModule) -> None:
        if self.synchronize and pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._val_start = time.perf_counter()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._epoch["evaluation"] += time.perf_counter() - self._val_start

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not collected_since(trainer, self._logged_collection):
            return  # no collection since the last row: a cut collection, or an epoch a resume restored
        # Validation of this epoch has already run: Lightning calls it before this hook.
        rollout = self._logged_collection = last_collection(trainer)
        if rollout is not None:
            for phase in ("env", "inference"):
                self._epoch[phase] = getattr(rollout, f"{phase}_seconds")
        copy = getattr(pl_module, "acting_copy", None)
        synced = 0.0 if copy is None else copy.sync_seconds
        self._epoch["sync"], self._synced = max(synced - self._synced, 0.0), synced
        for phase, seconds in self._epoch.items():
            self.totals[phase] += seconds
        self.epochs += 1
        metrics = {f"time/{phase}_seconds": seconds for phase, seconds in self._epoch.items()}
        metrics["time/epoch_seconds"] = time.perf_counter() - self._epoch_start
        env_steps = int(getattr(pl_module, "env_steps", trainer.current_epoch))
        metrics["time/env_steps"] = float(env_steps)
        self.last_metrics = metrics
        # Straight to the loggers, rank zero's times: LightningModule.log moves its result
        # state per call, a measurable share of a CartPole run (python -m benchmarks.front_door).
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=env_steps)

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        # An interruption after a complete collection: log that epoch's times as the algorithm logs its
        # row (RLModule.log_cut_epoch), so time/ curves miss no env step across a resume.
        if resumable_stop(trainer, exception):
            self.on_train_epoch_end(trainer, pl_module)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.fit_seconds = time.perf_counter() - self._fit_start
        if self.print_summary and self.epochs:
            rank_zero_info(self.summary())

    def summary(self) -> str:
        """The table printed at the end of ``fit``: seconds, share of wall time, per epoch."""
        wall = max(self.fit_seconds, 1e-9)
        rows = [(PHASES[p], s) for p, s in self.totals.items()]
        spent = sum(seconds for phase, seconds in self.totals.items() if phase != "sync")
        rows.append(("other (Lightning, logging, checkpoints)", max(0.0, wall - spent)))
        width = max(len(label) for label, _ in rows)
        lines = [
            f"Timing over {self.epochs} epochs, {wall:.1f} s of fit:",
            f"  {'phase':<{width}}  {'seconds':>9}  {'share':>6}  {'per epoch':>10}",
            *(f"  {label:<{width}}  {seconds:>9.2f}  {seconds / wall:>6.1%}  {seconds / self.epochs * 1e3:>7.1f} ms"
              for label, seconds in rows),
        ]  # fmt: skip
        return "\n".join(lines)
