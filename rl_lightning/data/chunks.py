"""The off-policy update schedule in collection chunks, and the Lightning batch that carries one chunk.

Stable-Baselines3 and CleanRL structure off-policy training as chunks: ``train_freq`` vector
steps of every env, then ``gradient_steps`` gradient steps on batches sampled from the replay
buffer (RL-Zoo's CartPole DQN: 256 and 128). The replay stream
(:class:`~rl_lightning.data.replay.ReplayDataset`) yields one :class:`ReplayChunk` per chunk:
its env steps are already stored when the algorithm's ``training_step`` receives it, and
iterating it draws the chunk's sampled batches one gradient step at a time. Lightning's
per-batch machinery (fetch, hooks, progress, logging connectors) therefore runs once per
chunk, not once per gradient step, as PPO's runs once per rollout.

``utd_ratio`` (gradient steps per env step) is the same schedule in the smallest chunks it
allows (:func:`chunk_schedule`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from fractions import Fraction
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning.faults import interrupt_request


def chunk_schedule(
    utd_ratio: float, num_envs: int, train_freq: int | None = None, gradient_steps: int | None = None
) -> tuple[int, int]:
    """``(train_freq, gradient_steps)``: vector steps per chunk, and the gradient steps after each.

    Given ``train_freq`` and ``gradient_steps`` (Stable-Baselines3's spelling), those. Else the
    smallest chunks of ``utd_ratio``: one vector step is ``utd_ratio * num_envs = a / b`` gradient
    steps (in lowest terms), so a chunk is ``b`` vector steps followed by ``a`` gradient steps.
    One env at ``utd_ratio=1`` is one gradient step after every env step; ``utd_ratio=0.25`` one
    after every fourth; 32 envs at ``1/32`` one after every batched step.

    Args:
        utd_ratio: Gradient steps per env step (read only without ``train_freq``).
        num_envs: Envs stepping together (one vector step is ``num_envs`` env steps).
        train_freq: Vector steps per chunk, or ``None``.
        gradient_steps: Gradient steps per chunk, or ``None``.
    """
    if train_freq is not None and gradient_steps is not None:
        return int(train_freq), int(gradient_steps)
    per_vector_step = Fraction(utd_ratio).limit_denominator(1000) * num_envs
    return per_vector_step.denominator, per_vector_step.numerator


class ReplayChunk:
    """One Lightning batch of the replay stream: a collection chunk whose env steps are stored, and its gradient steps.

    Iterating it yields ``gradient_steps`` replay batches (``TensorDict [batch_size]`` with
    ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``), each sampled when the
    algorithm asks for it, from the buffer as the chunk left it (nothing is collected while a
    chunk trains), and moved to the device Lightning moved the chunk to. Between two of its
    gradient steps a requested stop is honoured (``callbacks/interrupt.py``); what is left of the
    chunk is the stream's ``gradient_credit``, which checkpoints keep, and a resumed run takes
    it first.

    Args:
        sample: Draws one replay batch (``rl_lightning.data.replay.sample_batch`` on the buffer).
        owner: The stream whose ``gradient_credit`` counts the chunk's remaining gradient steps.
        env_steps: Env steps (over all ranks) the chunk collected before it was handed out.
        device: Where sampled batches go (``None``: where the buffer keeps them).
    """

    def __init__(self, sample: Callable[[], TensorDict], owner: Any, env_steps: int, device: Any = None):
        self._sample, self._owner = sample, owner
        self.env_steps = env_steps
        self.device = device

    def __len__(self) -> int:
        """The gradient steps still to take on this chunk."""
        return int(self._owner.gradient_credit)

    def to(self, device: torch.device | str, **kwargs: Any) -> ReplayChunk:
        """This chunk, its batches sent to ``device`` (what Lightning's batch transfer calls)."""
        self.device = torch.device(device)
        return self

    def __iter__(self) -> Iterator[TensorDict]:
        owner = self._owner
        while owner.gradient_credit >= 1:
            owner.gradient_credit -= 1
            batch = self._sample()
            yield batch if self.device is None or batch.device == self.device else batch.to(self.device)
            if owner.gradient_credit >= 1:
                # A signal stops between gradient steps (the credit says what is left; the chunk is handed out
                # again on resume). After the last one the batch end stops it (RLModule.on_train_batch_end).
                interrupt_request.check()

    def __repr__(self) -> str:
        return f"ReplayChunk(env_steps={self.env_steps}, gradient_steps={len(self)})"
