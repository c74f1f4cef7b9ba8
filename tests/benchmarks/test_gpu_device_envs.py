"""Tests for the prepared GPU script of the torch backend (run on the CPU at small sizes, so it cannot rot)."""

import json

import pytest
import torch

from benchmarks import gpu_device_envs


def test_the_gpu_script_runs_on_the_cpu_and_reports_throughput_and_phase_shares(tmp_path):
    """Test that the script fits PPO on batched envs and reports env steps, a positive rate and shares summing to 1."""
    out = tmp_path / "gpu.json"
    result = gpu_device_envs.main(["--device", "cpu", "--num-envs", "64", "--rollouts", "2", "--out", str(out)])
    assert result["env_steps"] == 2 * 64 * gpu_device_envs.SETTINGS.rollout_steps
    assert result["env_steps_per_second"] > 0 and result["synchronized_env_steps_per_second"] > 0
    assert result["gpu_memory_peak_bytes"] is None
    shares = result["shares"]
    assert sum(shares.values()) == pytest.approx(1.0, abs=1e-6)
    for phase in ("env", "inference", "optimization"):
        assert 0 < shares[phase] < 1, shares
    assert json.loads(out.read_text()) == result


def test_the_gpu_script_without_a_gpu_says_so_and_how_to_dry_run(monkeypatch):
    """Test that --device cuda on a machine without CUDA exits with a message naming --device cpu."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="--device cpu"):
        gpu_device_envs.main(["--num-envs", "8", "--rollouts", "1"])
