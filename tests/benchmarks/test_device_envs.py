"""Tests for the torch backend's benchmark bookkeeping (the figures come from running it: benchmarks/README.md)."""

from benchmarks import device_envs
from benchmarks.plain_ppo import train_batched


def test_the_quick_run_times_both_contenders_on_the_same_batched_env_and_reports_the_ratio():
    """Test that ours and the plain loop each take the requested env steps, paired."""
    report = device_envs.main(["--quick", "--skip-solve", "--num-envs", "64"])
    runs = report["throughput"]["runs"]
    steps = 4 * 64 * device_envs.SETTINGS.rollout_steps
    assert [r["env_steps"] for r in runs["rl_lightning"]] == [steps]
    assert [r["env_steps"] for r in runs["plain_pytorch"]] == [steps]
    assert report["settings"]["num_envs"] == 64
    assert report["tensordict"]["plain_us"] > 0 and report["tensordict"]["tensordict_us"] > 0


def test_the_plain_batched_loop_learns_cartpole_a_little():
    """Test that the no-framework ceiling is a working PPO: after 8 rollouts its episodes last longer than after 1."""
    s = device_envs.SETTINGS
    first = train_batched(s, s.num_envs * s.rollout_steps, seed=0)
    later = train_batched(s, 8 * s.num_envs * s.rollout_steps, seed=0)
    assert later["env_steps"] == 8 * s.num_envs * s.rollout_steps
    assert later["episode_length"] > 2 * first["episode_length"], (first, later)
