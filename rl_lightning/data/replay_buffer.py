"""The replay buffer: a ring of transitions in one preallocated ``TensorDict``, sampled uniformly.

One vector step is one write and one gradient step one draw, so at Stable-Baselines3's 1/1
schedule (a gradient step after every env step) their fixed cost is paid on every step. torchrl's
``TensorDictReplayBuffer`` over a ``LazyTensorStorage`` took 0.160 ms to write one CartPole row and
0.117 ms to sample 64 (its writer, sampler, locks and index column around the same ``TensorDict``
indexing), this ring 0.022 and 0.042 ms (``python -m benchmarks.replay_buffer``); DQN at 1/1 went from
0.73x to 1.00x Stable-Baselines3's gradient steps per second with it (``benchmarks/README.md``,
2026-12-06). Uniform sampling with replacement, as torchrl's ``RandomSampler`` and Stable-Baselines3 draw.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning.checks import check_one_of, check_replay_sizes
from rl_lightning.envs.obs import leaves

STORAGES = ("memory", "memmap")


def check_scratch_dir(scratch_dir: str | None) -> None:
    """Refuse, before a fit's first step, a memmap buffer's ``scratch_dir`` that cannot hold its files (the first write,
    in the middle of the fit, would fail); evaluating a checkpoint on another machine never needs it."""
    try:
        if scratch_dir is not None:
            os.makedirs(scratch_dir, exist_ok=True)
            tempfile.TemporaryDirectory(dir=scratch_dir).cleanup()
    except OSError as err:
        raise ValueError(f"scratch_dir={scratch_dir!r} cannot hold the memory-mapped replay buffer ({err}). Name a "
                         "writable directory, or keep storage=memory.") from None  # fmt: skip


class ReplayBuffer:
    """The last ``capacity`` transitions written, in a ``TensorDict`` allocated at the first write.

    Args:
        capacity: Transitions kept; the oldest are overwritten.
        batch_size: Transitions per :meth:`sample` (unless a size is given).
        storage: ``"memory"`` or ``"memmap"`` (memory-mapped files under ``scratch_dir``, for buffers larger than RAM).
        scratch_dir: Where memmap files go (``None``: a temporary directory).
        device: Where a ``"memory"`` buffer keeps its rows: ``"auto"``, the device of the first write
            (a batched env's, so its transitions never leave it), or a device.

    Attributes:
        storage: The rows, a ``TensorDict`` of batch ``[capacity]`` (``None`` before the first write).
    """

    def __init__(
        self, capacity: int, batch_size: int, storage: str = "memory", scratch_dir: str | None = None,
        device: torch.device | str = "auto",
    ):  # fmt: skip
        check_one_of(STORAGES, storage=storage)
        check_replay_sizes(capacity, batch_size)
        self.capacity, self.batch_size = capacity, batch_size
        self.memmap, self.scratch_dir = storage == "memmap", scratch_dir
        self.device = None if device == "auto" or self.memmap else torch.device(device)
        self.follows_writes = device == "auto" and not self.memmap  # the rows live where the writes come from
        self.storage: TensorDict | None = None
        self._files: tempfile.TemporaryDirectory | None = None  # a memmap storage's directory
        self.cursor = 0  # the row the next write starts at
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def _allocate(self, rows: TensorDict) -> None:
        """Rows shaped like ``rows``' (its dtypes, its device unless one was given), ``capacity`` of them."""
        like = rows[:1].expand(self.capacity)  # a view: nothing allocated for the template
        if self.memmap:
            check_scratch_dir(self.scratch_dir)  # made where missing
            # Deleted with the buffer (or at exit): a run leaves no buffer-sized files behind.
            self._files = tempfile.TemporaryDirectory(prefix="replay-", dir=self.scratch_dir)
            self.storage = like.memmap_like(prefix=self._files.name)
        else:
            device = self.device or _device(rows)
            self.storage = like.apply(lambda x: torch.empty(x.shape, dtype=x.dtype, device=device), device=device)

    def extend(self, rows: TensorDict) -> torch.Tensor:
        """Write ``rows`` (batch ``[k]``) after the latest ones, in order; the rows they went to.

        More rows than the capacity keep the last ``capacity``, as one write per row would.
        """
        if not (k := rows.shape[0]):
            return torch.zeros(0, dtype=torch.long)
        if self.storage is None:
            self._allocate(rows)
        elif self.follows_writes and _device(rows) != self.storage.device:
            # Restored from a checkpoint, which loads on the CPU: the rows go to where the envs' writes come from.
            self.storage = self.storage.to(_device(rows))
        if k > self.capacity:
            self.cursor = (self.cursor + k - self.capacity) % self.capacity
            rows, k = rows[k - self.capacity :], self.capacity
        end, device = self.cursor + k, self.storage.device
        index, where = torch.arange(self.cursor, end), slice(self.cursor, end)  # a slice writes faster than an index
        if end > self.capacity:  # the rows wrap around
            index %= self.capacity
            where = index.to(device)
        for key, value in rows.items(include_nested=True, leaves_only=True):  # leaf by leaf: one copy each
            self.storage.get(key)[where] = value.to(device)
        self.cursor, self._len = (self.cursor + k) % self.capacity, min(self._len + k, self.capacity)
        return index

    def sample(self, size: int | None = None) -> TensorDict:
        """``size`` stored transitions (``batch_size`` by default), uniformly with replacement (torch's generator)."""
        if not self._len:
            raise RuntimeError("The replay buffer is empty: nothing to sample.")
        size = self.batch_size if size is None else size
        return self.storage[torch.randint(self._len, (size,), device=self.storage.device)]

    def close(self) -> None:
        """Delete a memmap storage's files now (they go with the buffer anyway); the buffer is empty after."""
        self.storage, self.cursor, self._len = None, 0, 0
        if self._files is not None:
            self._files.cleanup()
            self._files = None

    def state_dict(self) -> dict[str, Any]:
        """The stored rows in storage order (not the empty capacity: a checkpoint grows with what is stored), the
        write position and the capacity, as plain tensors and numbers (checkpoints load with ``weights_only``).

        A full buffer's rows are its storage itself (a memmap's read from its files as the checkpoint is written),
        not a copy: a long run's checkpoints need no second buffer's worth of memory. A partial buffer's rows are
        copied: a slice would carry the whole storage it views into the checkpoint.
        """
        full = self.storage is None or self._len == self.capacity
        rows = self.storage if full else self.storage[: self._len].clone()
        # Plain tensors on the same memory: weights_only loading refuses a memmap's tensor subclass.
        rows = None if rows is None else rows.apply(lambda t: t.as_subclass(torch.Tensor)).to_dict()
        return {"rows": rows, "cursor": self.cursor, "capacity": self.capacity}

    def check_state(self, state: dict[str, Any]) -> None:
        """Refuse :meth:`state_dict`'s output of another form or capacity (rows and write position would not match)."""
        if not {"rows", "cursor", "capacity"} <= set(state):
            raise ValueError(
                f"The checkpoint's replay buffer is not in this version's form (keys {sorted(state)}): it was written "
                "by another version of rl_lightning. Resume with save_replay_buffer=false to refill the buffer."
            )
        if state["capacity"] != self.capacity:
            raise ValueError(
                f"The checkpoint's replay buffer has buffer_size={state['capacity']:,} and this run "
                f"{self.capacity:,}. Resume with buffer_size={state['capacity']}, or with save_replay_buffer=false to "
                "refill a buffer of the new size."
            )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output into this buffer, row for row.

        Raises:
            ValueError: As :meth:`check_state`, or a damaged state (rows of unequal lengths or more than the capacity,
                a write position outside it).
        """
        self.check_state(state)
        self.close()
        if state["rows"] is not None:
            try:
                rows = TensorDict(state["rows"]).auto_batch_size_(batch_dims=1)  # a column of None would be dropped
                if not rows.batch_size or len(rows) > self.capacity or not 0 <= int(state["cursor"]) < self.capacity:
                    raise ValueError(f"{rows.batch_size or 'no common'} rows, write position {state['cursor']}")
                if any(column is None for column in leaves(state["rows"])):
                    raise ValueError("a column of no values")
                self.extend(rows)
            except (TypeError, ValueError, RuntimeError, IndexError) as err:  # a damaged file: loses nothing saved
                fix = "Resume from an earlier checkpoint, or with save_replay_buffer=false to refill it."
                raise ValueError(f"The checkpoint's replay buffer is damaged ({err}). {fix}") from None
            self.cursor = int(state["cursor"])


def _device(rows: TensorDict) -> torch.device:
    """Where ``rows`` are: their ``TensorDict``'s device, or their first tensor's."""
    return rows.device or next(iter(rows.values(include_nested=True, leaves_only=True))).device
