"""Tests for the running observation normalizer."""

import torch

from rl_lightning.nets import RunningNormalizer


def test_running_statistics_match_whole_data():
    """Test that merging batches gives the mean and variance of all data seen."""
    torch.manual_seed(0)
    norm = RunningNormalizer((3,))
    batches = [torch.randn(50, 3) * 4 + 2, torch.randn(7, 3), torch.randn(100, 3) * 0.5 - 1]
    for b in batches:
        norm.update(b)
    data = torch.cat(batches).double()
    torch.testing.assert_close(norm.mean.double(), data.mean(0), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(norm.var.double(), data.var(0, unbiased=False), rtol=1e-3, atol=1e-3)
    assert abs(float(norm.count) - 157) < 1e-3


def test_normalize_and_clip():
    """Test that forward standardizes with the statistics and clips to [-clip, clip]."""
    norm = RunningNormalizer((1,), clip=5.0)
    norm.update(torch.tensor([[0.0], [2.0]]))  # mean ~1, var ~1
    out = norm(torch.tensor([[1.0], [2.0], [100.0]]))
    torch.testing.assert_close(out[:2, 0], torch.tensor([0.0, 1.0]), atol=1e-3, rtol=0)
    assert out[2, 0] == 5.0


def test_statistics_are_buffers_in_state_dict():
    """Test that the statistics are saved with the module's state_dict."""
    assert set(RunningNormalizer((2,)).state_dict()) == {"mean", "var", "count"}
