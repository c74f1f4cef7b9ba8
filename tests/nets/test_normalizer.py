"""The running observation normalizer and the reward scaler."""

import torch

from rl_lightning.nets import RewardScaler, RunningNormalizer


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


def _discounted(reward, done, gamma, start):
    """Each env's discounted return after every step (gym 0.23's NormalizeReward: G <- gamma G + r, 0 after a done)."""
    out, g = [], start.clone()
    for t in range(reward.shape[0]):
        g = gamma * g + reward[t].double()
        out.append(g.clone())
        g[done[t]] = 0.0
    return torch.stack(out), g


def test_rewards_are_divided_by_the_std_of_the_discounted_return_carried_across_rollouts():
    """Test that two rollouts are scaled by the standard deviation of every discounted return seen so far, each env's
    return running on from one rollout into the next and starting again after its episode ended."""
    torch.manual_seed(0)
    scaler = RewardScaler(gamma=0.9)
    rewards = [torch.rand(5, 3) * 4, torch.rand(6, 3) * 4]
    dones = [torch.rand(5, 3) < 0.3, torch.rand(6, 3) < 0.3]
    returns, g = [], torch.zeros(3, dtype=torch.float64)
    for reward, done in zip(rewards, dones, strict=True):
        scaled = scaler(reward, done)
        discounted, g = _discounted(reward, done, 0.9, g)
        returns.append(discounted)
        std = torch.cat(returns).var(unbiased=False).sqrt()  # the mean is not subtracted from the rewards
        torch.testing.assert_close(scaled.double(), reward.double() / std, rtol=1e-3, atol=1e-4)
    assert scaled.dtype == torch.float32
    torch.testing.assert_close(scaler.returns, g)


def test_scaled_rewards_are_clipped_and_the_statistics_are_saved():
    """Test that a reward far beyond the return's spread is clipped to clip, and the statistics are state_dict buffers
    (the per-env running returns are not: a resumed run starts them afresh)."""
    scaler = RewardScaler(gamma=0.99, clip=3.0)
    reward = torch.zeros(20, 2)
    reward[-1, 0] = 1e3
    assert scaler(reward, torch.zeros(20, 2, dtype=torch.bool))[-1, 0] == 3.0
    assert set(scaler.state_dict()) == {"stats.mean", "stats.var", "stats.count"}
