"""Denormal floats flushed to zero on the CPU while a fit runs (``torch.set_flush_denormal``).

Why: Adam's second moment is the running mean of squared gradients, and in a long run parts of it sink below float32's
smallest normal number (1.2e-38). x86 CPUs compute on such denormal numbers through a slow path, so the optimizer step
of a small network grows several-fold as training goes on: DQN's fused Adam step on CartPole took 0.52 ms inside a fit
against 0.09 ms with denormals flushed, SAC's 0.66 against 0.30 ms (``python -m benchmarks.denormals``). torch offers
the switch and leaves it off by default; the algorithms turn it on for their fits (``flush_denormal=True``, their
default).

What changes: a result below 1.2e-38 reads as 0, and so does such an input (the x86
flags flush-to-zero and denormals-are-zero, which ``torch.set_flush_denormal`` sets
together). Updates differ from unflushed ones only where a value was that small: an Adam
moment of 1e-40 moves a weight by about ``lr * 1e-32`` (``tests/callbacks/test_denormals.py``).

Scope: the setting belongs to the calling thread, so it covers the fit's thread (the training loop, acting, evaluation,
and torch's intra-op work on it), not torch's other intra-op threads nor env worker processes. :class:`FlushDenormals`
turns it on when a fit starts, on a CPU that supports it, and puts back what the thread had when the fit ends or fails;
a thread that flushes already is left as it is.
"""

from __future__ import annotations

import lightning.pytorch as pl
import torch


def flushing() -> bool:
    """Whether this thread flushes denormal float32 results to zero now (half the smallest normal float32 reads 0)."""
    return float(torch.tensor(torch.finfo(torch.float32).tiny) / 2) == 0.0


class FlushDenormals(pl.Callback):
    """Flush denormals to zero on the fit's thread from fit start; restore the thread's setting at fit end or failure.

    Added to every fit of an algorithm with ``flush_denormal=True`` (``RLModule.configure_callbacks``);
    inert on CPUs without the flags.
    """

    def __init__(self):
        #: Whether this callback turned flushing on (and so turns it off again).
        self.turned_on = False

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.restore()  # a fit that failed before its end hooks leaves nothing set
        if not flushing() and torch.set_flush_denormal(True):
            self.turned_on = True

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.restore()

    def restore(self) -> None:
        """Put back the thread's setting from before the fit, if this callback changed it."""
        if self.turned_on:
            torch.set_flush_denormal(False)
            self.turned_on = False
