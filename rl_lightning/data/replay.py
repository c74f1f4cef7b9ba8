"""The off-policy data stream: step the envs, store transitions in a replay buffer, hand out collection chunks.

One iteration of :class:`ReplayDataset` is one Trainer epoch: ``steps_per_epoch``
environment steps per rank, in chunks of ``train_freq`` vector steps. Until ``learning_starts``
environment steps (over all ranks) actions are drawn uniformly from the action space; each
chunk that ends past it is followed by ``gradient_steps`` gradient steps, each on a batch sampled
from the torchrl replay buffer (Stable-Baselines3's schedule; ``utd_ratio`` is the same in
the smallest chunks it allows, :func:`~rl_lightning.data.chunks.chunk_schedule`). Each chunk is
one Lightning batch, a :class:`~rl_lightning.data.chunks.ReplayChunk` that the algorithm's
``training_step`` iterates for its sampled batches. Every rank takes the same number of
gradient steps, so DDP never waits.

Staleness: none. The stream has a length (its chunks per epoch), so Lightning fetches no
batch ahead: a chunk's env steps are taken after the previous chunk's gradient steps, with the
current weights (``tests/data/test_replay.py`` checks it), as Stable-Baselines3 acts.
"""

from __future__ import annotations

import copy
import time
import warnings
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict, is_tensor_collection
from torch.utils.data import IterableDataset

from rl_lightning import fast
from rl_lightning.data.chunks import ReplayChunk, chunk_schedule
from rl_lightning.data.collection import CollectionMetrics, DataCounters, to_env_action
from rl_lightning.data.compact_replay import CompactReplayBuffer
from rl_lightning.data.protocol import ExplorationPolicy
from rl_lightning.envs import EnvGroup
from rl_lightning.envs.obs import Obs, empty_obs, leaves, map_obs, storage_dtype, write_obs
from rl_lightning.faults import interrupt_request

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.data import LazyMemmapStorage, LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.data.replay_buffers.samplers import PrioritizedSampler, RandomSampler

STORAGES = ("memory", "memmap")


def make_replay_buffer(
    buffer_size: int,
    batch_size: int,
    storage: str = "memory",
    scratch_dir: str | None = None,
    prioritized: bool = False,
    priority_alpha: float = 0.6,
    priority_beta: float = 0.4,
    optimize_memory_usage: bool = False,
    num_envs: int = 1,
    device: str = "cpu",
) -> TensorDictReplayBuffer | CompactReplayBuffer:
    """A torchrl ``TensorDictReplayBuffer`` of ``buffer_size`` transitions (or a :class:`CompactReplayBuffer` on one).

    Args:
        buffer_size: Capacity in transitions (per rank); the oldest are overwritten.
        batch_size: Transitions per sampled batch.
        storage: ``"memory"`` (``LazyTensorStorage``) or ``"memmap"`` (``LazyMemmapStorage``:
            memory-mapped files, for buffers larger than RAM).
        scratch_dir: Where memmap files go (``None``: a temporary directory).
        prioritized: Sample by priority (``PrioritizedSampler``, Schaul et al., 2016).
        priority_alpha: Prioritization exponent.
        priority_beta: Importance-sampling exponent.
        optimize_memory_usage: Store each observation once, reading ``next_obs`` from the env's
            next row (:mod:`rl_lightning.data.compact_replay`; SB3's spelling): half the memory of
            image replay. Uniform sampling only.
        num_envs: Envs writing one row each per vector step (``optimize_memory_usage``'s stride).
        device: Where a ``"memory"`` storage keeps its rows: ``"cpu"``, or ``"auto"`` (the device of
            the first batch written: the tensor path's, so transitions never leave it).

    Raises:
        ValueError: Unknown storage; prioritized replay with ``optimize_memory_usage``.
        RuntimeError: Prioritized replay where torchrl's compiled extension does not load.
    """
    if storage not in STORAGES:
        raise ValueError(f"storage must be one of {STORAGES}, got {storage!r}.")
    if optimize_memory_usage and prioritized:
        raise ValueError(
            "optimize_memory_usage=true samples uniformly and cannot be combined with prioritized=true; choose one."
        )
    store = (
        LazyTensorStorage(buffer_size, device=device)
        if storage == "memory"
        else LazyMemmapStorage(buffer_size, scratch_dir=scratch_dir)
    )
    sampler = RandomSampler()
    if prioritized:
        try:
            sampler = PrioritizedSampler(buffer_size, priority_alpha, priority_beta)
        except RuntimeError as err:
            reason = str(err).rstrip(".")
            raise RuntimeError(
                "Prioritized replay needs torchrl's compiled extension (its segment trees), which does not load "
                f"with this install (torch {torch.__version__}): {reason}. Install the torchrl build made for "
                "your torch, or set prioritized=False for uniform sampling."
            ) from None
    buffer = TensorDictReplayBuffer(storage=store, sampler=sampler, batch_size=batch_size)
    return CompactReplayBuffer(buffer, num_envs) if optimize_memory_usage else buffer


def _map_tensors(tree: dict[str, Any], fn: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, Any]:
    """``fn`` applied to every tensor of a nested dict (other values kept).

    A TensorDict's state (an ``OrderedDict`` of flattened keys such as ``obs.image``) keeps
    its ``_metadata``, the batch size of each nested level, without which loading it would
    leave the keys flat.
    """
    out = OrderedDict() if isinstance(tree, OrderedDict) else {}
    if hasattr(tree, "_metadata"):
        out._metadata = copy.deepcopy(tree._metadata)
    for key, value in tree.items():
        if isinstance(value, dict):
            value = _map_tensors(value, fn)
        out[key] = fn(value) if torch.is_tensor(value) else value
    return out


def buffer_state(buffer: TensorDictReplayBuffer | CompactReplayBuffer) -> dict[str, Any]:
    """``buffer.state_dict()`` with its storage cut to the stored transitions.

    torchrl's state holds the storage's whole capacity: a checkpoint of a run that stored
    20k transitions in a 1M buffer carried 1M rows. Cut, it grows with what is stored
    (the README gives the bytes per transition); :func:`load_buffer_state`
    puts the rows back into a storage of full capacity. A :class:`CompactReplayBuffer` saves its rows so,
    and what it keeps besides under ``"compact"``.
    """
    if isinstance(buffer, CompactReplayBuffer):
        return {**buffer_state(buffer.rows), _COMPACT: buffer.extra_state()}
    state = buffer.state_dict()
    storage = state.get("_storage")
    if isinstance(storage, dict) and isinstance(storage.get("_storage"), dict) and isinstance(storage.get("_len"), int):
        rows = storage["_len"]
        state["_storage"] = {**storage, "_storage": _map_tensors(storage["_storage"], lambda t: t[:rows].clone())}
        state["_storage"][_ROWS_SAVED] = rows
    return state


def load_buffer_state(buffer: TensorDictReplayBuffer | CompactReplayBuffer, state: dict[str, Any]) -> None:
    """Restore :func:`buffer_state`'s output (or a whole ``state_dict()``, as earlier versions saved it).

    Raises:
        ValueError: The state is of the other kind of buffer (``optimize_memory_usage`` changed).
    """
    compact = isinstance(buffer, CompactReplayBuffer)
    if compact != (_COMPACT in state):
        saved, now = ("true", "false") if _COMPACT in state else ("false", "true")
        raise ValueError(
            f"The checkpoint's replay buffer was saved with optimize_memory_usage={saved}, and this run has {now}: "
            "the two store transitions differently. Resume with the setting the run had, or with "
            "save_replay_buffer=false to refill the buffer."
        )
    if compact:
        load_buffer_state(buffer.rows, {k: v for k, v in state.items() if k != _COMPACT})
        buffer.load_extra_state(state[_COMPACT])
        return
    storage = state.get("_storage")
    if isinstance(storage, dict) and _ROWS_SAVED in storage:
        capacity = buffer.storage.max_size

        def pad(rows: torch.Tensor) -> torch.Tensor:
            full = rows.new_zeros((capacity, *rows.shape[1:]))
            full[: rows.shape[0]] = rows
            return full

        restored = {k: v for k, v in storage.items() if k != _ROWS_SAVED}
        state = {**state, "_storage": {**restored, "_storage": _map_tensors(storage["_storage"], pad)}}
    buffer.load_state_dict(state)
    # Loaded into a storage that was never written, torchrl's TensorStorage.load_state_dict builds its
    # TensorDict without a batch dimension, and reading fewer rows than the capacity then fails.
    rows = buffer.storage._storage
    if is_tensor_collection(rows) and rows.batch_dims == 0:
        rows.batch_size = torch.Size([buffer.storage.max_size])


#: Marks a storage state cut to its stored rows (``buffer_state``).
_ROWS_SAVED = "rl_lightning_rows_saved"
#: The extra state of a CompactReplayBuffer in ``buffer_state``.
_COMPACT = "compact"


def sample_batch(buffer: TensorDictReplayBuffer | CompactReplayBuffer) -> TensorDict:
    """``buffer.sample()``: one batch of ``buffer.batch_size`` transitions (the fast path reads that draw itself)."""
    if isinstance(buffer, CompactReplayBuffer):
        return buffer.sample()
    batch = fast.sample_batch(buffer)
    return batch if batch is not None else buffer.sample()


def store_transitions(buffer: TensorDictReplayBuffer, transitions: TensorDict) -> None:
    """``buffer.extend(transitions)`` (the fast path writes through the buffer's writer, to the same state)."""
    if not fast.store_transitions(buffer, transitions):
        buffer.extend(transitions)


def stored_obs(obs: Obs) -> Obs:
    """A copy of numpy observations as tensors in their stored dtypes: floats float32, integers (uint8 images) kept.

    A copy, so the env's next step cannot write into what was stored (``to_tensor`` shares memory).
    """
    if isinstance(obs, np.ndarray) and obs.dtype == np.float32:  # the vector case, first
        return torch.tensor(obs)
    return map_obs(lambda x: torch.tensor(np.asarray(x, dtype=storage_dtype(np.asarray(x)))), obs)


def transition_bytes(observation_space: gym.Space, action_space: gym.Space, optimize_memory_usage: bool = False) -> int:
    """Bytes one stored transition takes: ``obs`` and ``next_obs`` in their stored dtypes, action, reward, flag.

    With ``optimize_memory_usage`` the observation is stored once (plus one final observation
    per episode end, not counted here, and one byte of bookkeeping).

    uint8 images stay uint8 (an Atari frame stack of 4x84x84 is 28,224 bytes per observation),
    float observations are float32; actions are stored as the env gives them (int64 indices,
    float32 vectors), the reward as float32, ``terminated`` as one bool, and torchrl's row index.
    """
    obs = sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in leaves(empty_obs(observation_space, (1,))))
    action = np.asarray(gym.vector.utils.batch_space(action_space, 1).sample())
    action_bytes = action.size * (8 if np.issubdtype(action.dtype, np.integer) else 4)
    # + the int64 "index" column torchrl's TensorDictReplayBuffer keeps for each row.
    rest = action_bytes + 4 + 1 + 8
    return obs + rest + 1 if optimize_memory_usage else 2 * obs + rest


def to_torchrl_batch(batch: TensorDict) -> TensorDict:
    """A replay batch (``obs``, ``next_obs``, ...) in the keys torchrl's losses read (SAC, DQN).

    ``done`` is ``terminated``: a truncated transition keeps bootstrapping from its stored
    true final observation (TD(0) only stops at ``terminated`` anyway).
    """
    terminated = batch["terminated"].unsqueeze(-1)
    return TensorDict(
        {
            "observation": batch["obs"],
            "action": batch["action"],
            "next": {
                "observation": batch["next_obs"],
                "reward": batch["reward"].unsqueeze(-1),
                "terminated": terminated,
                "done": terminated,
            },
        },
        batch_size=batch.batch_size,
    )


class ReplayDataset(IterableDataset):
    """Replay-backed dataset: each ``iter()`` takes ``steps_per_epoch`` env steps and yields them in chunks.

    Stored transitions: ``obs``, ``action``, ``reward``, ``next_obs`` and ``terminated``.
    ``next_obs`` is the true next observation: for an episode that ended, its final
    observation (not the next episode's first), so a truncated episode's target
    bootstraps from where the time limit cut it off; only ``terminated`` stops bootstrapping.

    Args:
        envs: The training ``EnvGroup``.
        policy: The acting policy (see :class:`ExplorationPolicy`).
        buffer: The replay buffer (see :func:`make_replay_buffer`).
        steps_per_epoch: Env steps per rank per epoch (a multiple of ``envs.num_envs``).
        learning_starts: Env steps (over all ranks) of uniform random actions before learning.
        utd_ratio: Gradient steps per env step (update-to-data ratio); ``0.25`` means one
            gradient step after every 4 env steps. Ignored with ``train_freq``.
        counters: Shared progress counters (owned by the data module).
        reset_seed: Seed of the envs' first reset.
        world_size: Number of ranks stepping their own envs; scales the step count.
        action_seed: Seed of the uniform random actions.
        train_freq: Vector steps per chunk (Stable-Baselines3's schedule), each chunk past
            ``learning_starts`` followed by ``gradient_steps`` gradient steps. ``None``:
            ``utd_ratio``'s smallest chunks.
        gradient_steps: Gradient steps after each chunk of ``train_freq`` vector steps.
    """

    def __init__(
        self,
        envs: EnvGroup,
        policy: ExplorationPolicy,
        buffer: TensorDictReplayBuffer,
        steps_per_epoch: int,
        learning_starts: int,
        utd_ratio: float,
        counters: DataCounters,
        reset_seed: int,
        world_size: int = 1,
        action_seed: int = 0,
        train_freq: int | None = None,
        gradient_steps: int | None = None,
    ):
        super().__init__()
        self.envs, self.buffer = envs, buffer
        self.set_policy(policy)
        self.steps_per_epoch = steps_per_epoch
        self.learning_starts = learning_starts
        self.train_freq, self.gradient_steps = chunk_schedule(utd_ratio, envs.num_envs, train_freq, gradient_steps)
        self.counters = counters
        self.reset_seed = reset_seed
        self.world_size = world_size
        self.random_actions = gym.vector.utils.batch_space(envs.action_space, envs.num_envs)
        # Stored actions are the policy's indices (from 0): a Discrete space's ``start`` that
        # to_env_action added for the env is taken off again (None: nothing to take off).
        start = getattr(envs.action_space, "start", None)
        self._action_start = start if isinstance(envs.action_space, gym.spaces.Discrete) and start else None
        self.random_actions.seed(action_seed)
        #: Gradient steps still to take on the chunk handed out last (saved: a chunk cut short finishes on resume).
        self.gradient_credit = 0
        #: Vector steps taken in the current epoch (saved: a resumed run finishes an epoch cut short).
        self.epoch_steps = 0
        self._owed_on_resume = 0
        self._collect_seconds = 0.0
        self.last_collection: CollectionMetrics | None = None
        self._env_seconds = self._inference_seconds = self._sync_seconds = 0.0

    def set_policy(self, policy: ExplorationPolicy) -> None:
        """Act with ``policy`` from now on (a data module reused by another fit hands over the current one)."""
        self.policy = policy
        self._maybe_sync = getattr(policy, "maybe_sync", None)  # only an ActorCopy has one

    @property
    def learning(self) -> bool:
        """Whether the chunk just collected is followed by gradient steps: more than ``learning_starts`` env steps
        taken (Stable-Baselines3's ``num_timesteps > learning_starts``, so its schedules are reproduced exactly) and a
        batch's worth stored."""
        return self.counters.env_steps > self.learning_starts and len(self.buffer) >= self.buffer.batch_size

    def resume(self, gradient_credit: int, epoch_steps: int) -> None:
        """Continue from a checkpoint's position: the chunk cut short (its remaining gradient steps are handed
        out first, as one chunk) and the vector steps its epoch had taken."""
        self.gradient_credit = self._owed_on_resume = int(gradient_credit)
        self.epoch_steps = int(epoch_steps)

    def __len__(self) -> int:
        """Chunks per epoch: the Lightning batches of every epoch (known, so Lightning fetches none ahead)."""
        return self.steps_per_epoch // self.envs.num_envs // self.train_freq

    def __iter__(self):
        """Collect the epoch's chunks; hand out each one, its env steps stored, as a :class:`ReplayChunk`.

        Lightning takes exactly ``len(self)`` batches and resumes an epoch cut short at the batch
        it was on: a resumed run first hands out what is left of the chunk being trained (its
        env steps were taken), then collects the rest of the epoch (an interruption between env
        steps left ``epoch_steps`` where it stopped).
        """
        self._env_seconds = self._inference_seconds = self._sync_seconds = self._collect_seconds = 0.0
        first = self.epoch_steps
        owed, self._owed_on_resume = self._owed_on_resume, 0
        if owed:
            if not self.learning:  # resumed without the buffer (save_replay_buffer=False): nothing to sample yet
                self.gradient_credit = 0
            yield self._chunk(0)
        vector_steps = self.steps_per_epoch // self.envs.num_envs
        while self.epoch_steps < vector_steps:
            start, env_steps = time.perf_counter(), self.counters.env_steps
            # To the chunk's end (chunks count from the epoch's start: an epoch is whole chunks, and a
            # resumed epoch keeps their boundaries).
            self._collect(self.train_freq - self.epoch_steps % self.train_freq)
            self._collect_seconds += time.perf_counter() - start
            self.gradient_credit = self.gradient_steps if self.learning else 0
            chunk = self._chunk(self.counters.env_steps - env_steps)
            if self.epoch_steps == vector_steps:
                # The epoch's last chunk: Lightning takes no batch after it, so its bookkeeping comes first.
                self._close_epoch(self.epoch_steps - first)
                yield chunk
                return
            yield chunk

    def _collect(self, vector_steps: int) -> None:
        """Take ``vector_steps`` steps of every env, then store their transitions in one write.

        Nothing samples the buffer while a chunk collects, so one write per chunk stores the same
        rows in the same order as one per env step, at a fraction of the cost (RL-Zoo's CartPole DQN
        writes 256 steps at once; ``benchmarks/README.md``). A stop or env fault that cuts the chunk
        still stores what it took, so a checkpoint written then holds every counted env step.
        """
        pending = []
        try:
            for _ in range(vector_steps):
                transitions = self.take_step()
                if transitions is not None:
                    pending.append(transitions)
                self.epoch_steps += 1
        finally:
            rows = sum(len(t) for t in pending)
            if rows > self.buffer.storage.max_size:  # a chunk larger than the buffer: write in step order
                for transitions in pending:
                    store_transitions(self.buffer, transitions)
            elif pending:
                store_transitions(self.buffer, pending[0] if len(pending) == 1 else torch.cat(pending))

    def _chunk(self, env_steps: int) -> ReplayChunk:
        return ReplayChunk(lambda: sample_batch(self.buffer), self, env_steps)

    def _close_epoch(self, taken: int) -> None:
        """The epoch's counters and collection metrics (over its env steps, not the updates between chunks)."""
        self.epoch_steps = 0
        self.counters.iterations += 1
        self.last_collection = CollectionMetrics(
            episodes=self.envs.pop_stats(),
            explained_variance=float("nan"),
            env_steps=taken * self.envs.num_envs * self.world_size,
            rollout_seconds=self._collect_seconds,
            env_seconds=self._env_seconds,
            inference_seconds=self._inference_seconds,
            sync_seconds=self._sync_seconds,
        )

    def sync_actor(self) -> None:
        """An acting copy (``ActorCopy``) pulls the learner's weights when due, timed as ``sync_seconds``."""
        if self._maybe_sync is not None:
            start = time.perf_counter()
            self._maybe_sync()
            self._sync_seconds += time.perf_counter() - start

    def step(self) -> None:
        """One step of every env: act (random before ``learning_starts``), store the transitions."""
        transitions = self.take_step()
        if transitions is not None:
            store_transitions(self.buffer, transitions)

    @torch.no_grad()
    def take_step(self) -> TensorDict | None:
        """One step of every env: act (random before ``learning_starts``); the transitions to store, or ``None``
        (none valid, or the compact buffer, which must see every step, stored them itself)."""
        interrupt_request.check()  # a signal stops collection between env steps (callbacks/interrupt.py)
        envs = self.envs
        if envs.obs is None:
            envs.reset(seed=self.reset_seed)
            if isinstance(self.buffer, CompactReplayBuffer):
                self.buffer.restart()  # the step stored last (before a resume) has no next row
        obs = stored_obs(envs.obs)
        self.sync_actor()
        t0 = time.perf_counter()
        if self.counters.env_steps < self.learning_starts:
            action = np.asarray(self.random_actions.sample())
        else:
            device = next(self.policy.parameters()).device
            policy_obs = obs.to(device) if torch.is_tensor(obs) else map_obs(lambda x: x.to(device), obs)
            action = to_env_action(self.policy.explore(policy_obs, self.counters.env_steps), envs.action_space)
        t1 = time.perf_counter()
        step = envs.step(action)
        self._inference_seconds += t1 - t0
        self._env_seconds += time.perf_counter() - t1
        fields = {
            "obs": obs,
            "action": torch.as_tensor(action if self._action_start is None else action - self._action_start),
            "reward": torch.as_tensor(step.reward, dtype=torch.float32),
            "terminated": torch.as_tensor(step.terminated),
        }
        finals = {i: stored_obs(final) for i, final in step.final_obs.items()}
        compact = isinstance(self.buffer, CompactReplayBuffer)  # next_obs: the next row's obs, or the final one
        if not compact:
            fields["next_obs"] = next_obs = stored_obs(step.obs)
            for i, final in finals.items():
                write_obs(next_obs, i, final)
        # On the storage's device already: the buffer's write skips a device cast of the
        # whole TensorDict (python -m benchmarks.sac_loss measures it).
        transitions = TensorDict(fields, batch_size=[envs.num_envs], device=self.buffer.storage.device)
        # An episode cut short by an env fault or a skipped non-finite value has no true
        # transition for this step (its reward and next observation are stand-ins): not stored.
        valid = None if step.cut is None else torch.from_numpy(~step.cut)
        self.counters.env_steps += envs.num_envs * self.world_size
        if compact:
            self.buffer.extend(transitions, finals, valid)  # cut rows are kept, marked never to be sampled
            return None
        if valid is not None:
            transitions = transitions[valid]
        return transitions if transitions.shape[0] else None
