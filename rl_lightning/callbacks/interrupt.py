"""``Interruption``: a signal or an env fault ends a fit with a resumable checkpoint, never a lost run."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities.exceptions import SIGTERMException

from rl_lightning.callbacks.checkpoint import run_checkpoint_dir
from rl_lightning.faults import EnvFault, TrainingInterrupted, interrupt_request

#: SIGINT (Ctrl+C), SIGTERM (kill, schedulers, container stops) and SIGUSR1 (what SLURM jobs
#: usually ask for ahead of pre-emption: ``#SBATCH --signal=B:USR1@90``).
DEFAULT_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1")

#: The checkpoint written on the way out: ``last.ckpt``, where every resume looks first.
INTERRUPT_CHECKPOINT = "last.ckpt"


class Interruption(pl.Callback):
    """Stop a fit at the next safe point after a signal, and write a checkpoint it resumes from.

    On SIGINT, SIGTERM or SIGUSR1 the handler only records the request. The run stops at
    the next point where its state is consistent: between env steps of a rollout or of
    replay collection, between PPO minibatches, between evaluation steps, or at the end
    of a training batch. It then writes ``<run>/checkpoints/last.ckpt`` (atomically) and
    raises :class:`~rl_lightning.faults.TrainingInterrupted`, whose message names the
    checkpoint; the front doors add the command that resumes. A second Ctrl+C aborts at
    once (``KeyboardInterrupt``), without a checkpoint.

    What a resumed run continues from: the weights and optimizer state as they are (an
    update phase cut short keeps the minibatch steps it took), the env-step counter of the
    completed rollouts (a rollout cut short is dropped, its steps are not counted), the RNG
    and replay state. So the step budget is spent exactly once.

    An :class:`~rl_lightning.faults.EnvFault` (an env beyond its restart limit) is written
    out the same way; a numerical fault is not (its state is not worth resuming, and the
    last good checkpoint must stay the newest).

    Under DDP every rank must stop at the same point (checkpoints are collective): the
    ranks agree at the end of every training batch, with one small all-reduce, and the
    fine-grained stopping points stay off. A signal delivered to one rank stops all of them.

    SIGUSR1 is left alone when Lightning's SLURM auto-requeue already handles it.

    Args:
        signals: Names of the signals that stop the run.
        dirpath: Where the checkpoint goes; ``None``: the run's ``checkpoints/`` directory.
    """

    def __init__(self, signals: Sequence[str] = DEFAULT_SIGNALS, dirpath: str | None = None):
        unknown = [name for name in signals if not hasattr(signal, name)]
        if unknown:
            raise ValueError(f"Unknown signal name(s) {unknown}; use names such as 'SIGTERM' or 'SIGUSR1'.")
        self.signals = tuple(signals)
        self.dirpath = dirpath
        self._previous: dict[int, Any] = {}

    # ---------------------------------------------------------------- handlers
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning registers its own SIGTERM handler right before the loops start; ours
        # replaces it for the fit (restored afterwards).
        interrupt_request.clear()
        interrupt_request.fine_grained = trainer.world_size == 1
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be installed from the main thread
        for name in self.signals:
            signum = getattr(signal, name)
            current = signal.getsignal(signum)
            if signum == getattr(signal, "SIGUSR1", None) and current not in (None, signal.SIG_DFL, signal.SIG_IGN):
                continue  # SLURM auto-requeue (or the user) already owns it
            self._previous[signum] = current
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: Any) -> None:
        name = signal.Signals(signum).name
        if interrupt_request.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl+C: stop now
        interrupt_request.request(name)
        print(
            f"\nReceived {name}: stopping at the next safe point and writing a checkpoint to resume from "
            "(Ctrl+C again to abort without one).",
            file=sys.stderr,
            flush=True,
        )

    def _restore(self) -> None:
        for signum, handler in self._previous.items():
            if threading.current_thread() is threading.main_thread():
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    # ---------------------------------------------------------------- stopping points
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        if trainer.world_size > 1:
            requested = float(interrupt_request.signal_name is not None)
            flag = torch.tensor([requested], dtype=torch.float32, device=pl_module.device)
            if trainer.strategy.reduce(flag, reduce_op="sum").item() > 0:
                interrupt_request.request(interrupt_request.signal_name or "a signal on another rank")
                raise TrainingInterrupted(
                    f"Training was interrupted by {interrupt_request.signal_name}.", interrupt_request.signal_name
                )
            return
        interrupt_request.check()

    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        interrupt_request.check()

    # ---------------------------------------------------------------- the way out
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore()
        if isinstance(exception, SIGTERMException):  # Lightning's own stop (its handler ran before ours was installed)
            return
        if not isinstance(exception, (TrainingInterrupted, EnvFault)):
            return
        path = os.path.join(self.dirpath or run_checkpoint_dir(trainer), INTERRUPT_CHECKPOINT)
        trainer.save_checkpoint(path)
        steps = f"{pl_module.env_steps:,} of {pl_module.total_timesteps:,} env steps"
        note = (
            f" Saved {path} at {steps}. Resume from it with ckpt_path (trainer.fit(model, datamodule, "
            f"ckpt_path={path!r}); the front doors print their command)."
        )
        exception.args = (str(exception) + note, *exception.args[1:])
        # Read by the front doors to print the command that resumes (same run directory).
        exception.checkpoint = path  # type: ignore[attr-defined]
        exception.run_dir = trainer.default_root_dir  # type: ignore[attr-defined]

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._restore()
        interrupt_request.clear()
        interrupt_request.fine_grained = True
