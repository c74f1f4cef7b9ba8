"""Tests for the batched-SAC benchmark's bookkeeping (the figures come from running it: docs/algos/sac.md)."""

from benchmarks import device_sac


def test_both_contenders_take_the_same_gradient_steps_from_different_env_step_counts():
    """Test that the quick run gives each contender 100 gradient steps, one after each batched step past learning_starts
    (the batched one 32 env steps per step)."""
    report = device_sac.main(["--quick"])
    runs = report["throughput"]["runs"]
    starts = device_sac.LEARNING_STARTS
    assert runs["batched_torch"][0]["env_steps"] == starts + 100 * device_sac.BATCHED_ENVS
    assert runs["single_env"][0]["env_steps"] == starts + 100
    assert runs["batched_torch"][0]["gradient_steps"] == runs["single_env"][0]["gradient_steps"] == 100
    assert "learning" not in report
