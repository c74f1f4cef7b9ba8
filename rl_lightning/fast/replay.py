"""Replay-buffer reads and writes without ``TensorDictReplayBuffer``'s locks and bookkeeping, for uniform buffers.

For a buffer that samples uniformly (``RandomSampler``) with no transforms:

- :func:`sample_batch` reads the sampler's indices straight from the storage: what
  ``buffer.sample()`` returns (the same indices from the same random stream, the same
  entries, ``index`` included) without its locks, prefetch bookkeeping and info handling.
- :func:`store_transitions` writes through the buffer's writer: ``extend`` is the writer's
  ``extend`` (the round-robin cursor, the storage write, the ``index`` entry written back)
  inside the buffer's read/write locks, plus a transform check and a priority update that
  only runs for a TensorDict holding a priority key. The locks guard buffers shared with
  other threads or processes, which the data stream's buffer never is.

``tests/fast/test_replay.py`` compares contents, cursor, samples and a state-dict round trip
with the buffer's own calls; ``docs/fast_path.md`` has the figures.
"""

from __future__ import annotations

import warnings

from tensordict import TensorDict

from rl_lightning.fast.switch import enabled

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.data import TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import RandomSampler


def _uniform(buffer: TensorDictReplayBuffer) -> bool:
    """Whether ``buffer`` samples uniformly (``RandomSampler``) with no transforms."""
    return type(buffer.sampler) is RandomSampler and not len(buffer.transform)


def sample_batch(buffer: TensorDictReplayBuffer) -> TensorDict | None:
    """One batch of ``buffer.batch_size`` transitions read from storage, or ``None`` (call ``buffer.sample()``)."""
    if not (enabled() and _uniform(buffer)):
        return None
    index, _ = buffer.sampler.sample(buffer.storage, buffer.batch_size)
    return buffer.storage[index]


def store_transitions(buffer: TensorDictReplayBuffer, transitions: TensorDict) -> bool:
    """``buffer.extend(transitions)`` through the writer alone; ``False`` (nothing done): call ``extend``."""
    if not (enabled() and _uniform(buffer) and not buffer.dim_extend):
        return False
    buffer.writer.extend(transitions)
    return True
