"""Running observation normalization kept inside the policy (so checkpoints carry it)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn


class RunningNormalizer(nn.Module):
    """Normalizes inputs by running mean and variance, then clips.

    The statistics are buffers, so they live in every checkpoint and evaluation uses them
    without any env-side synchronization. ``update`` merges a batch with the parallel
    variance formula (Chan et al., 1979), as gymnasium's ``RunningMeanStd`` does, and sums
    the batch moments over DDP ranks first so every rank keeps identical statistics.

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
