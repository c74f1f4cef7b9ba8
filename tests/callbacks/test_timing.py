"""``PhaseTimer``: per-epoch phase times under ``time/`` and the end-of-fit table."""

from __future__ import annotations

import lightning.pytorch as pl

from rl_lightning import PPO, RolloutDataModule
from rl_lightning.callbacks import PhaseTimer
from rl_lightning.callbacks.timing import PHASES


def _fit(callbacks, max_epochs=3, **trainer_kwargs):
    data = RolloutDataModule(env="CartPole-v1", num_envs=2, rollout_steps=16, eval_interval=2, eval_episodes=2)
    model = PPO(total_timesteps=10_000)
    trainer = pl.Trainer(
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        callbacks=callbacks,
        **trainer_kwargs,
    )
    trainer.fit(model, data)
    return trainer


def test_phase_timer_logs_each_phase_and_sums_within_the_epochs():
    """Test that every phase is logged per epoch, rollout phases are positive, and totals fit in the fit's wall time."""
    timer = PhaseTimer(print_summary=False)
    trainer = _fit([timer])
    metrics = trainer.callback_metrics
    for phase in PHASES:
        assert f"time/{phase}_seconds" in metrics
    for phase in ("env", "inference", "advantage", "optimization"):
        assert timer.totals[phase] > 0, phase
    assert timer.epochs == 3
    # Evaluation ran at epoch 2 only (eval_interval=2): some time, less than the fit.
    assert 0 < timer.totals["evaluation"] < timer.fit_seconds
    assert sum(timer.totals.values()) <= timer.fit_seconds
    assert float(metrics["time/epoch_seconds"]) >= float(metrics["time/env_seconds"])


def test_phase_timer_summary_table_names_every_phase_and_its_share():
    """Test that the printed table has a row per phase plus the remainder, with shares that add up to 100%."""
    timer = PhaseTimer(print_summary=False)
    _fit([timer], max_epochs=2)
    table = timer.summary()
    for label in PHASES.values():
        assert label in table
    shares = [float(line.split()[-3].rstrip("%")) for line in table.splitlines()[2:]]
    assert len(shares) == len(PHASES) + 1
    assert abs(sum(shares) - 100.0) < 1.0
