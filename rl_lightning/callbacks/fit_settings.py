"""Process and thread settings a fit runs under (:class:`FitSetting`): made at its start, taken back at its end."""

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
    collector walks them all: about 3% of a PPO fit on 4 CartPoles (``docs/speed.md``). One full pass runs first, so no
    garbage is frozen with them (a previous fit's model and buffers would otherwise stay for the whole of this one).
    Objects made during the fit are collected as ever; frozen ones that end up in reference cycles wait for the fit's
    end, when the frozen objects go back to the collector. A process that froze objects itself is left as it is.
    """

    def apply(self) -> bool:
        if gc.get_freeze_count():
            return False
        gc.collect()
        gc.freeze()
        return True

    def undo(self) -> None:
        gc.unfreeze()
