"""``Interruption``: a signal or an env fault ends a fit with a resumable checkpoint, never a lost run."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn

from rl_lightning.callbacks.checkpoint import IntervalCheckpoint, run_checkpoint_dir
from rl_lightning.faults import EnvFault, TrainingInterrupted, interrupt_request

#: SIGINT (Ctrl+C), SIGTERM (kill, schedulers, container stops) and SIGUSR1 (what SLURM jobs
#: usually ask for ahead of pre-emption: ``#SBATCH --signal=B:USR1@90``).
DEFAULT_SIGNALS = ("SIGINT", "SIGTERM", "SIGUSR1")

#: The checkpoint written on the way out: ``last.ckpt``, where every resume looks first.
INTERRUPT_CHECKPOINT = "last.ckpt"


class Interruption(pl.Callback):
    """Stop a fit at the next safe point after a signal, and write a checkpoint it resumes from.

    On SIGINT, SIGTERM or SIGUSR1 the handler only records the request. The run stops at the next point where its state
    is consistent: between env steps of a rollout or of replay collection, between PPO minibatches, between the gradient
    steps of an off-policy chunk, between evaluation steps, or at the end of a training batch
    (``RLModule.on_train_batch_end``, after the algorithm's own batch-end work). It then writes
    ``<run>/checkpoints/last.ckpt`` (atomically) and raises :class:`~rl_lightning.faults.TrainingInterrupted`, whose
    message names the checkpoint; the front doors add the command that resumes. A second Ctrl+C aborts at once
    (``KeyboardInterrupt``), without a checkpoint.

    What a resumed run continues from: the weights and optimizer state as they are (an update phase cut short keeps the
    minibatch steps it took), the env-step counter of the completed rollouts (a rollout cut short is dropped, its steps
    are not counted), the RNG and replay state; off-policy, the env steps of an epoch cut short are kept and the resumed
    run takes only the rest of that epoch, and a chunk stopped between its gradient steps first takes the ones it still
    owed. So the step budget is spent exactly once.

    An :class:`~rl_lightning.faults.EnvFault` (an env beyond its restart limit) is written out the same way; a numerical
    fault is not (its state is not worth resuming, and the last good checkpoint must stay the newest).

    Under DDP every rank must stop at the same point (checkpoints are collective): the
    ranks agree at the end of every training batch, with one small all-reduce, and the
    fine-grained stopping points stay off. A signal delivered to one rank stops all of them.

    SIGUSR1 is left alone when Lightning's SLURM auto-requeue already handles it (it does by
    default inside a SLURM job: it writes its own ``hpc_ckpt`` and requeues); SIGTERM, which
    SLURM sends at pre-emption and at the time limit, is always ours.

    A fit that ends rewrites a ``last.ckpt`` it finds (an interruption's, which it may have resumed from) with its end,
    where no interval checkpoints do. Only a fit writes the checkpoint (an exception in a later ``trainer.test`` leaves
    ``last.ckpt`` alone). Under DDP an env fault is raised on one rank only, so it cannot write the collective
    checkpoint: the interval checkpoints remain.

    Args:
        signals: Names of the signals that stop the run.
        dirpath: Where the checkpoint goes; ``None``: the run's ``checkpoints/`` directory.
        save: Write the checkpoint (``False``: only stop, as the Hydra app's warm-up does).
    """

    def __init__(self, signals: Sequence[str] = DEFAULT_SIGNALS, dirpath: str | None = None, save: bool = True):
        if unknown := [name for name in signals if not hasattr(signal, name)]:
            raise ValueError(f"Unknown signal name(s) {unknown}; use names such as 'SIGTERM' or 'SIGUSR1'.")
        self.signals = tuple(signals)
        self.dirpath = dirpath
        self.save = save
        self._previous: dict[int, Any] = {}
        self._pid = os.getpid()

    # ---------------------------------------------------------------- handlers
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        # A request left over from an earlier fit in this process (caught by the user) is void.
        interrupt_request.clear()
        interrupt_request.fine_grained = True

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning registers its own SIGTERM handler right before the loops start; ours
        # replaces it for the loops and is removed at on_train_end, before Lightning's
        # teardown restores what was there before the fit.
        interrupt_request.clear()
        interrupt_request.fine_grained = trainer.world_size == 1
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be installed from the main thread
        self._pid = os.getpid()
        for name in self.signals:
            signum = getattr(signal, name)
            current = signal.getsignal(signum)
            if signum == getattr(signal, "SIGUSR1", None) and current not in (None, signal.SIG_DFL, signal.SIG_IGN):
                continue  # SLURM auto-requeue (or the user) already owns it
            self._previous[signum] = current
            signal.signal(signum, self._handle)
        # A SIGTERM that Lightning's handler caught before ours was installed (the sanity check): stopped as ours would.
        if getattr(trainer, "received_sigterm", False):
            interrupt_request.request("SIGTERM")

    def _handle(self, signum: int, frame: Any) -> None:
        if os.getpid() != self._pid:
            # A forked async env worker inherited this handler: it is not the trainer. Ctrl+C
            # (sent to the whole process group) is the trainer's to handle; anything else
            # ends the worker as it would without us (EnvGroup stops workers with SIGTERM).
            if signum != signal.SIGINT:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
            return
        name = signal.Signals(signum).name
        if interrupt_request.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a second Ctrl+C: stop now
        interrupt_request.request(name)
        # os.write, not print: a handler that prints while the main thread is inside a write
        # to stderr (the progress bar) would raise "reentrant call".
        os.write(2, f"\nReceived {name}: stopping at the next safe point and writing a checkpoint to resume from "
                    "(Ctrl+C again to abort without one).\n".encode())  # fmt: skip

    def _restore(self) -> None:
        """Put back the handlers ours replaced, where ours is still the one installed."""
        if threading.current_thread() is threading.main_thread():
            for signum, handler in self._previous.items():
                if signal.getsignal(signum) == self._handle:
                    signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        self._previous = {}

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._restore()
        interrupt_request.fine_grained = True

    # ---------------------------------------------------------------- stopping points
    def on_validation_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args: Any) -> None:
        interrupt_request.check()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # A last.ckpt an interruption wrote, which this fit went on from, holds the end now: nothing else rewrites it
        # without interval checkpoints, and a later resume from it would redo the steps since (and their logs) silently.
        path = os.path.join(self.dirpath or run_checkpoint_dir(trainer), INTERRUPT_CHECKPOINT)
        rewritten = trainer.fast_dev_run or any(isinstance(c, IntervalCheckpoint) for c in trainer.callbacks)
        if self.save and not rewritten and trainer.strategy.broadcast(os.path.exists(path)):
            trainer.save_checkpoint(path, weights_only=False)

    # ---------------------------------------------------------------- the way out
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._restore()
        interrupt_request.clear()  # the request is answered: a later fit or test in this process starts clean
        interrupt_request.fine_grained = True
        if not resumable_stop(trainer, exception) or not self.save:
            return
        if hasattr(pl_module, "log_cut_epoch"):
            pl_module.log_cut_epoch()  # the cut epoch's row, so the resumed run's curves miss no env step
        path = os.path.join(self.dirpath or run_checkpoint_dir(trainer), INTERRUPT_CHECKPOINT)
        try:
            trainer.save_checkpoint(path, weights_only=False)  # the whole state: a resume needs it
        except Exception as err:  # keep the original exception; say what else went wrong
            exception.args = (f"{exception} Writing {path} failed too: {err!r}.", *exception.args[1:])
            return
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


def resumable_stop(trainer: pl.Trainer, exception: BaseException) -> bool:
    """Whether ``exception`` ends a fit with a checkpoint to resume from, written by every rank together: a signal
    (:class:`~rl_lightning.faults.TrainingInterrupted`) or an env fault during fit, but not an env fault under DDP,
    raised on one rank only (see :class:`Interruption`)."""
    stop = isinstance(exception, (TrainingInterrupted, EnvFault)) and trainer.state.fn == TrainerFn.FITTING
    return stop and not (isinstance(exception, EnvFault) and trainer.world_size > 1)


def stop_if_requested(trainer: pl.Trainer, device: torch.device) -> None:
    """Raise :class:`~rl_lightning.faults.TrainingInterrupted` at a batch end if a stop was requested.

    Called by ``RLModule.on_train_batch_end``, after the algorithm's own batch-end work (DQN's
    target update), so a stop never skips it. Under DDP every rank calls it and one
    all-reduce decides for all: a signal to one rank stops every rank after the same batch.
    """
    if trainer.world_size > 1:
        requested = float(interrupt_request.signal_name is not None)
        flag = torch.tensor([requested], dtype=torch.float32, device=device)
        if trainer.strategy.reduce(flag, reduce_op="sum").item() > 0:
            name = interrupt_request.signal_name or "a signal on another rank"
            interrupt_request.request(name)
            raise TrainingInterrupted(f"Training was interrupted by {name}.", name)
        return
    interrupt_request.check()
