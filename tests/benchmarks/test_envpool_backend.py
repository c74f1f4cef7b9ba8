"""Tests for the EnvPool backend benchmark's bookkeeping (the figures come from running it: benchmarks/README.md)."""

from benchmarks import envpool_backend


def test_the_quick_run_times_both_backends_at_both_sizes_for_the_same_steps():
    """Test that each size runs EnvPool and gymnasium for the same env steps, at 4 and 64 envs."""
    report = envpool_backend.main(["--quick"])
    for name, envs, steps in (("cleanrl", 4, 4096), ("64_envs", 64, 16384)):
        assert report[name]["settings"]["num_envs"] == envs
        for backend in ("envpool", "gymnasium"):
            assert [r["env_steps"] for r in report[name]["runs"][backend]] == [steps]
