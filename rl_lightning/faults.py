"""What can go wrong in a long run, as exception types every layer raises, and the interruption flag.

Three faults end a run early, each with a message that says where it happened and what to do:

- :class:`TrainingInterrupted`: a signal (SIGINT, SIGTERM, SLURM's pre-emption signal)
  asked the run to stop; a resumable checkpoint was written (``callbacks/interrupt.py``).
- :class:`NumericalFault`: a NaN or inf in observations, rewards, losses or gradients;
  nothing is saved over the last good checkpoint.
- :class:`EnvFault`: an environment kept failing after ``max_env_restarts`` recreations;
  a resumable checkpoint was written.

The flag lives here, below every layer, because the places that can stop quickly are in the data streams (between env
steps) and in the update loops (between minibatches); the callback that installs the signal handlers only sets it.
"""

from __future__ import annotations


class TrainingInterrupted(RuntimeError):
    """The run was asked to stop by a signal; a checkpoint to resume from was written.

    Attributes:
        signal_name: ``"SIGTERM"``, ``"SIGINT"``, ...
        checkpoint: Path of the checkpoint written on the way out (``None`` until it is).
    """

    def __init__(self, message: str, signal_name: str = "", checkpoint: str | None = None):
        super().__init__(message)
        self.signal_name = signal_name
        self.checkpoint = checkpoint


class NumericalFault(RuntimeError):
    """A NaN or inf appeared; the message says where (which env or loss term, at which step)."""


class EnvFault(RuntimeError):
    """An environment failed more often than its restart limit allows."""


class _InterruptRequest:
    """Set by a signal handler, read at the safe stopping points of the training loops.

    ``check()`` costs an attribute read when nothing was requested, so it can sit in the per-env-step loop. Only
    single-process runs stop at these fine-grained points; under DDP every rank must stop at the same batch, so the
    callback agrees on it collectively at batch ends and ``check`` stays quiet (``fine_grained = False``).
    """

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self.fine_grained = True

    def request(self, signal_name: str) -> None:
        self.signal_name = signal_name

    def clear(self) -> None:
        self.signal_name = None

    def check(self) -> None:
        """Raise :class:`TrainingInterrupted` if a stop was requested (and fine-grained stops are on)."""
        if self.signal_name is not None and self.fine_grained:
            raise TrainingInterrupted(f"Training was interrupted by {self.signal_name}.", self.signal_name)


#: The process-wide interruption request (signals are process-wide too).
interrupt_request = _InterruptRequest()
