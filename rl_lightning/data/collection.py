"""What both data streams share: the progress counters, the per-epoch collection metrics, env actions.

A *collection* is the env steps a data stream takes in one epoch: a rollout on-policy, the
epoch's ``steps_per_epoch`` steps off-policy.
"""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import torch

from rl_lightning.envs import EpisodeStats


def to_env_action(action: torch.Tensor, action_space: gym.Space) -> np.ndarray:
    """Convert policy actions to what ``env.step`` takes.

    Box actions are clipped to the bounds; ``Discrete`` and ``MultiDiscrete`` indices (from 0)
    are shifted by the space's ``start``; ``MultiBinary`` actions take its dtype (int8).
    """
    action = action.cpu().numpy()
    if isinstance(action_space, gym.spaces.Box):
        return np.clip(action, action_space.low, action_space.high)
    if isinstance(action_space, gym.spaces.Discrete):  # (checked first and cheaply: this runs every env step)
        return action + action_space.start if action_space.start else action
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return action + action_space.start if action_space.start.any() else action
    if isinstance(action_space, gym.spaces.MultiBinary):
        return action.astype(action_space.dtype)
    return action


@dataclasses.dataclass
class DataCounters:
    """Progress counters of the training data stream (rollouts or replay collection), saved in checkpoints.

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
    """What one epoch's collection (a rollout, or an off-policy epoch's env steps) reports for logging.

    ``rollout_seconds`` (logged as ``time/rollout_seconds``) is the whole collection; the other
    ``*_seconds`` fields split it into its phases (what is left is buffer bookkeeping):
    stepping the envs, policy inference (actions, values and the bootstrap values of
    truncated episodes), advantage computation, and bringing the acting policy up to date
    (the observation-normalizer update with its cross-rank all-reduce).
    """

    episodes: EpisodeStats
    explained_variance: float
    env_steps: int
    rollout_seconds: float
    env_seconds: float = 0.0
    inference_seconds: float = 0.0
    advantage_seconds: float = 0.0
    sync_seconds: float = 0.0
