"""``EnvStepProgressBar``: progress in env steps out of the budget, with speed and returns."""

from __future__ import annotations

import lightning.pytorch as pl

from rl_lightning import RolloutDataModule
from rl_lightning.callbacks import EnvStepProgressBar
from tests.helpers import tiny_ppo


class _Spy(pl.Callback):
    """Reads the bar after each epoch (it updates in its own on_train_epoch_end, which runs first)."""

    def __init__(self, bar):
        self.bar, self.seen = bar, []

    def on_train_epoch_end(self, trainer, pl_module):
        self.seen.append((self.bar.bar.n, self.bar.bar.total, dict(self.bar.shown)))


def test_bar_counts_env_steps_against_the_budget_and_shows_returns(capsys):
    """Test that the bar advances by the epoch's env steps toward total_timesteps and shows sps, return and evals."""
    bar = EnvStepProgressBar()
    spy = _Spy(bar)
    data = RolloutDataModule(env_id="CartPole-v1", num_envs=2, rollout_steps=64, eval_interval=2, eval_episodes=2)
    model = tiny_ppo(total_timesteps=512)
    trainer = pl.Trainer(
        max_epochs=-1, logger=False, enable_checkpointing=False, enable_model_summary=False, callbacks=[bar, spy]
    )
    trainer.fit(model, data)
    assert trainer.progress_bar_callback is bar
    assert [(n, total) for n, total, _ in spy.seen] == [(128, 512), (256, 512), (384, 512), (512, 512)]
    first, last = spy.seen[0][2], spy.seen[-1][2]
    assert float(first["sps"].replace(",", "")) > 0 and float(first["return"]) > 0
    assert "eval" not in first and "eval" in last and "eval_ood" in last  # evaluated from epoch 2 on
    assert "512/512" in capsys.readouterr().out
    assert bar.bar is None  # closed at the end of training


def test_disabled_bar_shows_nothing(capsys):
    """Test that a disabled bar prints nothing."""
    bar = EnvStepProgressBar()
    bar.disable()
    data = RolloutDataModule(env_id="CartPole-v1", num_envs=2, rollout_steps=16, eval_episodes=2)
    trainer = pl.Trainer(
        max_epochs=1, logger=False, enable_checkpointing=False, enable_model_summary=False, callbacks=[bar]
    )
    trainer.fit(tiny_ppo(total_timesteps=32), data)
    assert "env steps" not in capsys.readouterr().out
