"""Tests for the rsl_rl PPO benchmark's bookkeeping and its VecEnv adapter (the figures come from running it:
benchmarks/README.md)."""

import pytest
import torch

pytest.importorskip("rsl_rl")

from benchmarks import rsl_rl_ppo  # noqa: E402
from rl_lightning.envs import TorchVectorEnv  # noqa: E402


def test_the_quick_run_times_both_contenders_for_the_same_env_steps_and_reports_the_ratio(tmp_path):
    """Test that ours and rsl_rl's runner each take exactly the requested rollouts of env steps, and the report has
    the ratio of medians and the per-repeat line."""
    report = rsl_rl_ppo.main(["--quick", "--num-envs", "64", "--threads", "1", "--json", str(tmp_path / "r.json")])
    steps = 2 * 64 * rsl_rl_ppo.SETTINGS.num_steps_per_env
    assert report["env_steps"] == steps
    for name in ("rl_lightning", "rsl_rl"):
        (run,) = report["runs"][name]
        assert run["env_steps"] == steps, name
        assert run["gradient_steps"] == 2 * 5 * 4, name
        assert run["env_steps_per_second"] > 0, name
    assert report["ratio_of_medians"] == pytest.approx(
        report["env_steps_per_second"]["rl_lightning"]["median"] / report["env_steps_per_second"]["rsl_rl"]["median"]
    )
    assert (tmp_path / "r.json").exists()


def test_the_adapter_reports_time_limits_as_time_outs_and_keeps_each_envs_last_return():
    """Test that the adapter's dones and ``time_outs`` mark the 200th step of every episode, and ``last_return`` is
    the sum of that episode's rewards."""
    env = rsl_rl_ppo.RslRlVecEnv(TorchVectorEnv("Pendulum-v1", 4, seed=0), seed=0)
    obs = env.get_observations()
    assert list(obs.keys()) == ["policy"] and obs["policy"].shape == (4, 3)
    total = torch.zeros(4)
    for t in range(200):
        obs, reward, dones, extras = env.step(torch.zeros(4, 1))
        total += reward
        assert dones.dtype == torch.int64
        assert bool(extras["time_outs"].all()) == (t == 199) and bool(dones.all()) == (t == 199)
    torch.testing.assert_close(env.last_return, total)
    assert env.env_steps == 800 and bool((env.episode_length_buf == 0).all())
