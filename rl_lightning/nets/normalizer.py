"""Running normalization statistics kept in the modules (so checkpoints carry them): observations inside the
policy (:class:`RunningNormalizer`), rewards inside the algorithm (:class:`RewardScaler`)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class RunningNormalizer(nn.Module):
    """Normalizes inputs by running mean and variance, then clips.

    The statistics are buffers, so they live in every checkpoint and evaluation uses them without any env-side
    synchronization. ``update`` merges a batch with the parallel variance formula (Chan et al., 1979), as gymnasium's
    ``RunningMeanStd`` does, and sums the batch moments over DDP ranks first so every rank keeps identical statistics.

    Args:
        shape: Shape of one observation.
        clip: Normalized values are clipped to ``[-clip, clip]`` (CleanRL uses 10).
        eps: Added to the variance before the square root.
    """

    def __init__(self, shape: tuple[int, ...], clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        self.register_buffer("count", torch.tensor(1e-4, dtype=torch.float64))
        self.clip = clip
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalize ``x`` of shape ``[B, *shape]``."""
        return ((x - self.mean) / torch.sqrt(self.var + self.eps)).clamp_(-self.clip, self.clip)

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge a batch ``x`` of shape ``[B, *shape]`` into the running statistics."""
        x = x.reshape(-1, *self.mean.shape).to(self.mean.device, torch.float64)
        moments = torch.cat([x.sum(0).flatten(), (x * x).sum(0).flatten(), x.new_tensor([x.shape[0]])])
        if dist.is_available() and dist.is_initialized():
            dist.all_reduce(moments)
        n = self.mean.numel()
        count = moments[-1]
        batch_mean = (moments[:n] / count).view_as(self.mean)
        batch_var = (moments[n : 2 * n] / count).view_as(self.mean) - batch_mean**2
        delta = batch_mean - self.mean
        total = self.count + count
        new_mean = self.mean + delta * count / total
        m2 = self.var * self.count + batch_var.clamp_min(0) * count + delta**2 * self.count * count / total
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class RewardScaler(nn.Module):
    """Rewards divided by the running standard deviation of the discounted return, then clipped.

    What gym 0.23's ``NormalizeReward`` does at every env step (CleanRL's ``ppo_continuous_action.py`` wraps each env in
    it; Engstrom et al., 2020, call it reward scaling), done here by the algorithm on a whole rollout ``[T, N]``, so the
    envs and the episode returns the library reports keep the raw rewards. Each env's discounted return ``G <- gamma * G
    + r`` runs on across rollouts and starts again after an episode ends; the statistics (a :class:`RunningNormalizer`,
    so they are saved in checkpoints and equal on every DDP rank) take in the rollout's returns, then its rewards are
    divided by their standard deviation. The mean is not subtracted (as in ``NormalizeReward``): a constant shift of
    every reward changes what the policy optimizes.

    Args:
        gamma: The discount of the return whose scale is tracked (the algorithm's).
        clip: Scaled rewards are clipped to ``[-clip, clip]`` (CleanRL: 10).
        eps: Added to the variance before the square root.
    """

    def __init__(self, gamma: float, clip: float = 10.0, eps: float = 1e-8):
        super().__init__()
        self.gamma, self.clip, self.eps = gamma, clip, eps
        self.stats = RunningNormalizer(())
        #: Each env's running discounted return (not saved: a resumed run starts the sums afresh).
        self.returns: torch.Tensor | None = None

    @torch.no_grad()
    def forward(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """The rollout's rewards ``[T, N]`` scaled; ``done`` ``[T, N]`` marks the steps that ended an episode."""
        if self.returns is None or self.returns.shape != reward.shape[1:] or self.returns.device != reward.device:
            self.returns = torch.zeros(reward.shape[1:], dtype=torch.float64, device=reward.device)
        discounted = []
        for step_reward, step_done in zip(reward, done, strict=True):
            self.returns = self.gamma * self.returns + step_reward
            discounted.append(self.returns)
            self.returns = torch.where(step_done, 0.0, self.returns)
        self.stats.update(torch.stack(discounted))
        scale = torch.sqrt(self.stats.var + self.eps)
        return (reward / scale).clamp(-self.clip, self.clip).to(reward.dtype)
