"""Tests for the time-to-solve benchmark's clock (the figures themselves come from running it)."""

import time

import benchmarks.solve_cartpole as solve
import rl_lightning.data.evaluation as evaluation
from benchmarks.throughput import bare_trainer
from rl_lightning import PPO, RolloutDataModule

PAUSE = 0.3


def test_watch_excludes_the_evaluation_that_runs_before_on_validation_start(monkeypatch):
    """Test that the seconds spent evaluating (fetched before on_validation_start) are not counted as training."""
    real = evaluation.evaluate

    def slow_evaluate(*args, **kwargs):
        time.sleep(PAUSE)
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation, "evaluate", slow_evaluate)
    monkeypatch.setattr(solve, "SOLVED", float("-inf"))  # the first evaluation solves
    data = RolloutDataModule(
        env_id="CartPole-v1",
        num_envs=2,
        rollout_steps=16,
        obj_sets={"train": [{}], "test": [{}]},
        eval_obj_sets=["train"],
        eval_interval=2,
        eval_episodes=1,
        seed=0,
    )
    watch = solve._SolveWatch()
    start = time.perf_counter()
    bare_trainer(max_epochs=4, callbacks=[watch]).fit(
        PPO(total_timesteps=10_000, update_epochs=1, num_minibatches=1), data
    )
    wall = time.perf_counter() - start
    data.close()
    assert watch.solved_at == 64  # the evaluation after epoch 2 (2 x 32 env steps)
    assert PAUSE <= watch.eval_seconds < wall
    assert watch.solved_seconds < wall - PAUSE
