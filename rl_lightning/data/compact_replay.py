"""A replay buffer that stores each observation once (``optimize_memory_usage``), for image replay.

A transition's next observation is, almost always, the observation the same env stored one
vector step later. :class:`CompactReplayBuffer` therefore keeps rows of ``obs``, ``action``,
``reward`` and ``terminated`` in a replay buffer and reads ``next_obs`` of row ``r`` from
row ``r + num_envs`` (the round-robin writer puts every env's next step exactly there).
This halves the memory of image replay: 100k Atari transitions (4x84x84 uint8 frames) take
2.8 GB instead of 5.6 GB.

Where the next row does not hold the next observation, the buffer knows it:

- An episode's last transition (terminated or truncated): the next row is the next episode's
  first observation. Its true final observation is kept aside, one per episode end, so a truncated episode still
  bootstraps from where the time limit cut it (SB3's ``optimize_memory_usage=True`` cannot, and refuses
  ``handle_timeout_termination`` with it; CleanRL's Atari DQN bootstraps from the reset observation there).
- The latest vector step: its next rows are not written yet; it is sampled once they are.
- A transition cut short by an env fault or a skipped non-finite value, and the last step
  before the envs were reset anew (a resumed run): never sampled.

Sampled batches hold the same keys as the plain buffer's (``next_obs`` included), so the losses do not know which buffer
they read; ``tests/data/test_compact_replay.py`` checks the batches against the plain buffer's on the same steps.
"""

from __future__ import annotations

from typing import Any

import torch
from tensordict import TensorDict

from rl_lightning.checks import check_replay_sizes
from rl_lightning.data.replay_buffer import ReplayBuffer
from rl_lightning.envs.obs import Obs, write_obs

#: Rejection-sampling rounds before sampling from the list of sampleable rows instead.
_REJECTION_ROUNDS = 8


class CompactReplayBuffer:
    """Replay of ``obs``, ``action``, ``reward``, ``terminated`` rows; ``next_obs`` read from the env's next row.

    Args:
        rows: The buffer of the rows (:class:`~rl_lightning.data.replay_buffer.ReplayBuffer`, memory or memmap storage).
        num_envs: Envs writing one row each per vector step (the stride between an env's rows).

    Attributes:
        final_obs: The true final observation of each stored episode end, by row.
    """

    def __init__(self, rows: ReplayBuffer, num_envs: int):
        self.rows = rows
        self.num_envs = num_envs
        capacity = rows.capacity
        check_replay_sizes(capacity, rows.batch_size, num_envs)
        #: Rows whose next observation is known: what ``sample`` draws from.
        self.sampleable = torch.zeros(capacity, dtype=torch.bool)
        self.final_obs: dict[int, Obs] = {}
        self._count = 0  # sampleable rows
        self._last: torch.Tensor | None = None  # rows of the latest vector step
        self._last_valid: torch.Tensor | None = None

    @property
    def storage(self) -> TensorDict | None:
        """The rows' storage (:attr:`ReplayBuffer.storage <rl_lightning.data.replay_buffer.ReplayBuffer.storage>`)."""
        return self.rows.storage

    @property
    def batch_size(self) -> int:
        """Transitions per sampled batch."""
        return self.rows.batch_size

    def __len__(self) -> int:
        """Stored transitions that can be sampled (their next observation is stored)."""
        return self._count

    def _set(self, index: torch.Tensor, value: torch.Tensor | bool) -> None:
        before = int(self.sampleable[index].sum())
        self.sampleable[index] = value
        self._count += int(self.sampleable[index].sum()) - before

    def extend(self, transitions: TensorDict, final_obs: dict[int, Obs], valid: torch.Tensor | None = None) -> None:
        """Store one vector step: one row per env, in env order.

        Args:
            transitions: ``obs``, ``action``, ``reward``, ``terminated`` of every env (``[num_envs]``).
            final_obs: The true final observation of each env whose episode ended (by env index).
            valid: Per env, whether its transition is a true one (``False``: cut short, never sampled).
        """
        if transitions.shape[0] != self.num_envs:
            raise ValueError(f"A vector step has one row per env ({self.num_envs}), got {transitions.shape[0]}.")
        index = self.rows.extend(transitions)
        for row in index.tolist():  # rows overwritten: their episode ends go
            self.final_obs.pop(row, None)
        self._set(index, False)  # sampleable once the next step is written
        if self._last is not None:
            self._set(self._last, self._last_valid)
        self._last = index
        self._last_valid = torch.ones(self.num_envs, dtype=torch.bool) if valid is None else valid.clone()
        for env, obs in final_obs.items():
            if self._last_valid[env]:
                self.final_obs[int(index[env])] = obs

    def close(self) -> None:
        """Empty the buffer and delete its rows' memmap files now (``ReplayBuffer.close``)."""
        self.rows.close()

    def restart(self) -> None:
        """The envs were reset outside their episodes (a new run, a resume): the latest step's next rows never come."""
        self._last = self._last_valid = None

    def draw(self, size: int) -> torch.Tensor:
        """``size`` sampleable rows, uniformly with replacement (torch's generator)."""
        if not self._count:
            raise RuntimeError("The replay buffer holds no transition whose next observation is stored yet.")
        stored = len(self.rows)
        index = torch.randint(stored, (size,))
        for _ in range(_REJECTION_ROUNDS):
            bad = ~self.sampleable[index]
            if not bad.any():
                return index
            index[bad] = torch.randint(stored, (int(bad.sum()),))
        candidates = self.sampleable[:stored].nonzero().squeeze(-1)
        return candidates[torch.randint(candidates.numel(), (size,))]

    def transitions(self, index: torch.Tensor) -> TensorDict:
        """The transitions of rows ``index``: ``obs``, ``action``, ``reward``, ``next_obs``, ``terminated``."""
        batch = self.storage[index]
        next_obs = self.storage[(index + self.num_envs) % self.rows.capacity]["obs"]
        ends = [(j, row) for j, row in enumerate(index.tolist()) if row in self.final_obs]
        for j, row in ends:
            write_obs(next_obs, j, self.final_obs[row])
        batch["next_obs"] = next_obs
        return batch

    def sample(self, batch_size: int | None = None) -> TensorDict:
        """``batch_size`` transitions (the buffer's by default), drawn by :meth:`draw`."""
        return self.transitions(self.draw(self.batch_size if batch_size is None else batch_size))

    def state_dict(self) -> dict[str, Any]:
        """The rows' state and, under ``"compact"``, what it lacks: which rows can be sampled, and the episode ends'
        final observations."""
        pending = self.sampleable.clone()
        if self._last is not None:  # a resumed run resets its envs: the latest step is never completed
            pending[self._last] = False
        compact = {  # final observations as tensors or plain dicts: weights_only loading refuses TensorDicts
            "sampleable": pending[: len(self.rows)].clone(),
            "final_obs": {row: x.to_dict() if isinstance(x, TensorDict) else x for row, x in self.final_obs.items()},
        }
        return {**self.rows.state_dict(), "compact": compact}

    def check_state(self, state: dict[str, Any]) -> None:
        """Refuse :meth:`state_dict`'s output of another form or capacity, as :meth:`ReplayBuffer.check_state`."""
        self.rows.check_state(state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.rows.load_state_dict(state)
        state = state["compact"]
        sampleable = state["sampleable"]
        self.sampleable.zero_()
        self.sampleable[: sampleable.numel()] = sampleable
        self._count = int(sampleable.sum())
        self.final_obs = dict(state["final_obs"])
        self.restart()
