"""What every data stream shares: the progress counters, the per-epoch collection metrics and their clock.

A *collection* is the env steps a data stream takes in one epoch: a rollout on-policy, the
epoch's ``steps_per_epoch`` steps off-policy.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from rl_lightning.envs import EpisodeStats


@dataclasses.dataclass
class DataCounters:
    """Progress counters of the training data stream, saved in checkpoints.

    Attributes:
        env_steps: Environment steps taken so far, summed over all ranks.
        iterations: Epochs of collection so far (rollouts on-policy).
        evaluated: ``iterations`` when the policy was last evaluated during fit (0: not yet).
    """

    env_steps: int = 0
    iterations: int = 0
    evaluated: int = 0


@dataclasses.dataclass
class CollectionMetrics:
    """What one epoch's collection reports for logging.

    ``rollout_seconds`` (logged as ``time/rollout_seconds``) is the whole collection; the other
    ``*_seconds`` fields split it into stepping the envs and policy inference (actions, values
    and the bootstrap values of truncated episodes); what is left is bookkeeping.
    """

    episodes: EpisodeStats
    env_steps: int
    rollout_seconds: float
    env_seconds: float = 0.0
    inference_seconds: float = 0.0


def timer(device: torch.device, synchronize: bool):
    """``time.perf_counter``; with ``synchronize`` on a CUDA device, read after the device's queued kernels finish."""
    if not (synchronize and device.type == "cuda"):
        return time.perf_counter

    def clock() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return clock
