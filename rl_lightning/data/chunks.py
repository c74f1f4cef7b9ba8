"""The off-policy update schedule in collection chunks, and the Lightning batch that carries an epoch of them.

Stable-Baselines3 and CleanRL structure off-policy training as chunks: ``train_freq`` vector steps of every env, then
``gradient_steps`` gradient steps on batches sampled from the replay buffer (RL-Zoo's CartPole DQN: 256 and 128). An
epoch of the replay stream (:class:`~rl_lightning.data.replay.ReplayDataset`) is one Lightning batch, a
:class:`ReplayEpoch`: iterating it in the algorithm's ``training_step`` collects each chunk and then draws that chunk's
sampled batches, one gradient step at a time. Lightning's per-batch machinery (fetch, hooks, progress, logging
connectors) therefore runs once per epoch, however small the chunks, as PPO's runs once per rollout; and each chunk acts
with the weights of every gradient step before it, as Stable-Baselines3 acts.

``utd_ratio`` (gradient steps per env step) is the same schedule in the smallest chunks it
allows (:func:`chunk_schedule`).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import torch
from tensordict import TensorDict

#: The largest denominator ``utd_ratio`` is read with (``1/1024`` exactly; ``0.1`` as ``1/10``).
UTD_DENOMINATOR = 10**6


def chunk_schedule(
    utd_ratio: float, num_envs: int, train_freq: int | None = None, gradient_steps: int | None = None
) -> tuple[int, int]:
    """``(train_freq, gradient_steps)``: vector steps per chunk, and the gradient steps after each.

    Given ``train_freq`` and ``gradient_steps`` (Stable-Baselines3's spelling), those. Else the smallest chunks of
    ``utd_ratio``: one vector step is ``utd_ratio * num_envs = a / b`` gradient steps (in lowest terms), so a chunk is
    ``b`` vector steps followed by ``a`` gradient steps. One env at ``utd_ratio=1`` is one gradient step after every env
    step; ``utd_ratio=0.25`` one after every fourth; 32 envs at ``1/32`` one after every batched step.
    """
    if train_freq is not None and gradient_steps is not None:
        return int(train_freq), int(gradient_steps)
    per_vector_step = Fraction(utd_ratio).limit_denominator(UTD_DENOMINATOR) * num_envs
    return per_vector_step.denominator, per_vector_step.numerator


class ReplayEpoch:
    """One Lightning batch of the replay stream: an epoch of chunks, collected as the algorithm iterates it.

    Iterating it yields the epoch's replay batches (``TensorDict [batch_size]`` with ``obs``,
    ``action``, ``reward``, ``next_obs``, ``terminated``), one per gradient step, each sampled when
    the algorithm asks for it and moved to the device Lightning moved the batch to. Between env
    steps and between gradient steps a requested stop is honoured (``callbacks/interrupt.py``).

    Args:
        stream: The :class:`~rl_lightning.data.replay.ReplayDataset` whose epoch this is.
        device: Where sampled batches go (``None``: where the buffer keeps them).
    """

    def __init__(self, stream: Any, device: torch.device | None = None):
        self.stream, self.device = stream, device

    def to(self, device: torch.device | str, **kwargs: Any) -> ReplayEpoch:
        """This epoch, its batches sent to ``device`` (what Lightning's batch transfer calls)."""
        self.device = torch.device(device)
        return self

    def __iter__(self) -> Iterator[TensorDict]:
        return self.stream.batches(self.device)

    def __repr__(self) -> str:
        return f"ReplayEpoch(steps_per_epoch={self.stream.steps_per_epoch}, device={self.device})"
