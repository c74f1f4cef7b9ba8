"""Tests for the denormal-flush benchmark's contenders (the figures come from running it: benchmarks/README.md)."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from benchmarks import denormals
from rl_lightning import DQN
from rl_lightning.callbacks.denormals import flushing
from tests.helpers import quiet_trainer, tiny_replay_data

pytestmark = pytest.mark.skipif(
    not torch.set_flush_denormal(False), reason="this CPU has no flush-to-zero flags (torch cannot set them)"
)


class _Seen(pl.Callback):
    def __init__(self):
        self.seen: list[bool] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.seen.append(flushing())


def _tiny_dqn_run(tmp_path):
    def run(seed: int, **extra) -> dict:
        seen = _Seen()
        model = DQN(hidden_sizes=(16,), total_timesteps=60, target_update_interval=5, **extra)
        trainer = quiet_trainer(tmp_path / str(seed), callbacks=[seen], max_epochs=1)
        trainer.fit(model, tiny_replay_data("CartPole-v1", seed=seed))
        return {"seen": seen.seen, "gradient_steps": trainer.global_step}

    return run


@pytest.mark.parametrize("flush", [True, False])
def test_our_contenders_differ_only_in_the_flush_and_time_every_optimizer_step(tmp_path, flush):
    """Test that the unflushed contender fits unflushed, the other flushed, both timing their optimizer steps."""
    result = denormals.ours(_tiny_dqn_run(tmp_path), flush=flush)(0)
    assert result["gradient_steps"] > 0 and result["optimizer_step_ms"] > 0
    assert result["seen"] and all(seen is flush for seen in result["seen"])
    assert not flushing()


@pytest.mark.parametrize("flush", [True, False])
def test_the_baselines_run_flushed_or_not_and_leave_the_thread_as_it_was(flush):
    """Test that Stable-Baselines3's flushed contender runs with the flag set, the other without, and neither leaks."""
    assert denormals.sb3(lambda seed: {"flushing": flushing()}, flush=flush)(0) == {"flushing": flush}
    assert not flushing()
