"""A progress bar in environment steps, the unit an RL run is budgeted in."""

from __future__ import annotations

import math
import sys
import time

import lightning.pytorch as pl
from lightning.pytorch.callbacks.progress import ProgressBar
from tqdm.auto import tqdm

from rl_lightning.data.base import last_collection


class EnvStepProgressBar(ProgressBar):
    """Shows env steps out of the budget, env-steps/s and the latest returns.

    Replaces Lightning's batch-counting bar (a PPO epoch is a rollout plus many minibatches; counting batches says
    little about progress). Updated once per epoch with the latest training episodic return and, once evaluated, the
    latest ``eval`` and ``eval_ood`` returns. Rank zero only; ``disable()`` hides it (Lightning refuses a progress-bar
    callback together with ``Trainer(enable_progress_bar=False)``).

    Args:
        leave: Keep the finished bar on screen.
    """

    def __init__(self, leave: bool = True):
        super().__init__()
        self.leave = leave
        self._enabled = True
        self.bar: tqdm | None = None
        self._start: tuple[float, int] = (0.0, 0)
        self._episode_return = math.nan
        self.shown: dict[str, str] = {}

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    @property
    def is_enabled(self) -> bool:
        return self._enabled

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not (self._enabled and trainer.is_global_zero):
            return
        budget = getattr(pl_module, "total_timesteps", None)
        steps = int(getattr(pl_module, "env_steps", 0))
        self._start = (time.perf_counter(), steps)
        self.bar = tqdm(total=budget, initial=steps, desc="env steps", unit="step", leave=self.leave,
                        dynamic_ncols=True, file=sys.stdout, smoothing=0)  # fmt: skip

    def postfix(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, str]:
        """What the bar shows after its counter: ``sps``, ``return`` and the latest evaluations."""
        steps = int(getattr(pl_module, "env_steps", 0))
        elapsed = max(time.perf_counter() - self._start[0], 1e-9)
        rollout = last_collection(trainer)
        if rollout is not None and len(rollout.episodes):
            self._episode_return = float(sum(rollout.episodes.returns) / len(rollout.episodes))
        shown = {"sps": f"{(steps - self._start[1]) / elapsed:,.0f}", "return": f"{self._episode_return:.1f}"}
        for prefix in ("eval", "eval_ood"):
            if (value := trainer.callback_metrics.get(f"{prefix}/return_mean")) is not None:
                shown[prefix] = f"{float(value):.1f}"
        return shown

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.bar is None:
            return
        self.bar.n = int(getattr(pl_module, "env_steps", 0))
        self.shown = self.postfix(trainer, pl_module)
        self.bar.set_postfix(self.shown, refresh=False)
        self.bar.refresh()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
