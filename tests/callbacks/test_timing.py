"""``PhaseTimer``: per-epoch phase times under ``time/`` and the end-of-fit table."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest

from rl_lightning import DQN, RolloutDataModule
from rl_lightning.callbacks import PhaseTimer
from rl_lightning.callbacks.timing import PHASES
from tests.helpers import quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data


class _Recorder(pl.loggers.Logger):
    """A logger that keeps what it is given."""

    def __init__(self):
        super().__init__()
        self.rows = []

    name, version = "recorder", 0

    def log_hyperparams(self, params, *args, **kwargs):
        pass

    def log_metrics(self, metrics, step=None):
        self.rows.append((step, dict(metrics)))


def _fit(callbacks, max_epochs=3, logger=False):
    data = RolloutDataModule(env_id="CartPole-v1", num_envs=2, rollout_steps=16, eval_interval=2, eval_episodes=2)
    model = tiny_ppo(total_timesteps=10_000)
    trainer = pl.Trainer(
        max_epochs=max_epochs,
        logger=logger,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
        callbacks=callbacks,
    )
    trainer.fit(model, data)
    return trainer


def test_phase_timer_logs_each_phase_and_sums_within_the_epochs():
    """Test that every phase reaches the loggers per epoch at env steps, and totals fit in the fit's wall time."""
    timer, recorder = PhaseTimer(print_summary=False), _Recorder()
    _fit([timer], logger=recorder)
    rows = [(step, m) for step, m in recorder.rows if "time/env_seconds" in m]
    assert [step for step, _ in rows] == [32, 64, 96]  # 2 envs x 16 steps per epoch
    for phase in PHASES:
        assert all(f"time/{phase}_seconds" in m for _, m in rows)
    metrics = timer.last_metrics
    for phase in ("env", "inference", "optimization"):
        assert timer.totals[phase] > 0, phase
    assert timer.epochs == 3
    # Evaluation ran at epoch 2 only (eval_interval=2): some time, less than the fit.
    assert 0 < timer.totals["evaluation"] < timer.fit_seconds
    assert sum(timer.totals.values()) <= timer.fit_seconds
    assert float(metrics["time/epoch_seconds"]) >= float(metrics["time/env_seconds"])


def test_phase_timer_summary_table_names_every_phase_and_its_share():
    """Test that the printed table has a row per phase plus the remainder, with shares that add up to 100%."""
    timer = PhaseTimer(print_summary=False)
    _fit([timer], max_epochs=2, logger=False)
    table = timer.summary()
    for label in PHASES.values():
        assert label in table
    shares = [float(line.split()[-3].rstrip("%")) for line in table.splitlines()[2:]]
    assert len(shares) == len(PHASES) + 1
    assert abs(sum(shares) - 100.0) < 1.0


def test_replay_collection_inside_the_epochs_batch_is_not_counted_as_optimization():
    """Test that an off-policy epoch, whose chunks are collected inside its one Lightning batch, books its env steps
    and inference as such and not again as optimization: the phases add up within the fit's wall time."""
    from rl_lightning import DQN
    from tests.helpers import quiet_trainer, tiny_replay_data

    timer = PhaseTimer(print_summary=False)
    data = tiny_replay_data("CartPole-v1", eval_interval=100)
    quiet_trainer(max_epochs=2, callbacks=[timer]).fit(DQN(hidden_sizes=[16], total_timesteps=10_000), data)
    assert timer.totals["env"] > 0 and timer.totals["optimization"] > 0
    collection = timer.totals["env"] + timer.totals["inference"]
    assert collection + timer.totals["optimization"] <= timer.fit_seconds


@pytest.mark.parametrize("stream", ["rollout", "replay"])
def test_a_synchronized_phase_timer_switches_the_stream_to_synchronized_timing(stream, monkeypatch):
    """Test that PhaseTimer(synchronize=True) turns on the training stream's synchronized clock when training starts,
    the rollout's and the replay loop's alike."""
    import importlib

    from rl_lightning.data.collection import timer as real_timer

    asked = []
    module = importlib.import_module(f"rl_lightning.data.{stream}")
    monkeypatch.setattr(module, "timer", lambda device, synchronize: asked.append(synchronize) or real_timer(device, 0))
    if stream == "rollout":
        model, data = tiny_ppo(total_timesteps=64), tiny_rollout_data(backend="torch", num_envs=8, rollout_steps=8)
    else:
        model, data = DQN(hidden_sizes=[16], total_timesteps=10**6), tiny_replay_data("CartPole-v1")
    timer = PhaseTimer(print_summary=False, synchronize=True)
    quiet_trainer(callbacks=[timer], max_epochs=1).fit(model, data)
    assert data.train_dataset.synchronize_timing is True and asked and all(asked)  # every clock of the fit
    assert timer.totals["env"] > 0 and timer.totals["optimization"] > 0
