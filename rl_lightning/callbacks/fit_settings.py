"""Process and thread settings a fit runs under: set when it starts, put back when it ends or fails.

:class:`FitSetting` is the shape (:class:`~rl_lightning.callbacks.FlushDenormals` is one); :class:`FreezeGC` keeps
the objects that live through a fit out of the cyclic garbage collector's passes.
"""

from __future__ import annotations

import gc

import lightning.pytorch as pl


class FitSetting(pl.Callback):
    """A setting :meth:`apply` makes at fit start and :meth:`undo` takes back at fit end or failure, only where
    :meth:`apply` made it (it returns ``False`` where the setting was in place already, or cannot be made)."""

    def __init__(self):
        #: Whether this callback made the setting (and so takes it back).
        self.applied = False

    def apply(self) -> bool:
        raise NotImplementedError

    def undo(self) -> None:
        raise NotImplementedError

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.restore()  # a fit that failed before its end hooks leaves nothing set
        self.applied = self.apply()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.restore()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self.restore()

    def restore(self) -> None:
        """Put back what was there before the fit, if this callback changed it."""
        if self.applied:
            self.undo()
            self.applied = False


class FreezeGC(FitSetting):
    """The objects alive at fit start moved out of the cyclic garbage collector's passes (``gc.freeze``) for the fit.

    A process holding torch and Lightning keeps hundreds of thousands of objects for good, and each full pass of the
    collector walks them all: about 3% of a PPO fit on 4 CartPoles (``benchmarks/README.md``). Objects that die during
    the fit are still freed (by reference counting, or by the collector where they were made after the freeze); the
    frozen ones go back to it at fit end. A process that froze objects itself is left as it is. Added to every fit.
    """

    def apply(self) -> bool:
        if gc.get_freeze_count():
            return False
        gc.freeze()
        return True

    def undo(self) -> None:
        gc.unfreeze()
