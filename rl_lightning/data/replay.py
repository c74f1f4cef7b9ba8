"""The off-policy data stream: step the envs, store transitions in a replay buffer, sample the gradient steps.

One iteration of :class:`ReplayDataset` is one Trainer epoch and one Lightning batch (a
:class:`~rl_lightning.data.chunks.ReplayEpoch`): ``steps_per_epoch`` environment steps per rank, in chunks of
``train_freq`` vector steps, each chunk that ends past ``learning_starts`` env steps (over all ranks) followed by
``gradient_steps`` gradient steps on batches sampled from the replay buffer (Stable-Baselines3's schedule). Until
``learning_starts`` actions are drawn uniformly from the action space. Every rank takes the same number of gradient
steps, so DDP never waits.

Staleness: none. A chunk is collected when the algorithm's ``training_step`` asks for the batch
after the previous chunk's last gradient step, so it acts with the current weights
(``tests/data/test_replay.py`` checks it), as Stable-Baselines3 acts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from torch.utils.data import IterableDataset

from rl_lightning.data.chunks import ReplayEpoch
from rl_lightning.data.collection import CollectionMetrics, DataCounters, timer
from rl_lightning.data.compact_replay import CompactReplayBuffer
from rl_lightning.data.protocol import ExplorationPolicy
from rl_lightning.data.replay_buffer import ReplayBuffer
from rl_lightning.envs import EnvGroup
from rl_lightning.envs.obs import empty_obs, leaves
from rl_lightning.faults import interrupt_request

#: Most gradient steps' batches sampled in one call (:meth:`ReplayDataset._gradient_steps`): the call's cost shared by
#: up to 32 steps, and at most 32 batches (of images, tens of MB) held at once.
BATCHES_PER_DRAW = 32


def make_replay_buffer(
    buffer_size: int,
    batch_size: int,
    storage: str = "memory",
    scratch_dir: str | None = None,
    optimize_memory_usage: bool = False,
    num_envs: int = 1,
    device: str = "auto",
) -> ReplayBuffer | CompactReplayBuffer:
    """A :class:`~rl_lightning.data.replay_buffer.ReplayBuffer` of ``buffer_size`` transitions (or a
    :class:`CompactReplayBuffer` on one).

    Args:
        buffer_size, batch_size, storage, scratch_dir, device: The ``ReplayBuffer``'s ``capacity`` and the rest.
        optimize_memory_usage: Store each observation once, reading ``next_obs`` from the env's next row
            (:mod:`rl_lightning.data.compact_replay`; SB3's spelling): half the memory of image replay.
        num_envs: Envs writing one row each per vector step (``optimize_memory_usage``'s stride).

    Raises:
        ValueError: Unknown storage.
    """
    buffer = ReplayBuffer(buffer_size, batch_size, storage, scratch_dir, device)
    return CompactReplayBuffer(buffer, num_envs) if optimize_memory_usage else buffer


def transition_bytes(observation_space: gym.Space, action_space: gym.Space, optimize_memory_usage: bool = False) -> int:
    """Bytes one stored transition takes: ``obs`` and ``next_obs`` in their stored dtypes, action, reward, flag.

    With ``optimize_memory_usage`` the observation is stored once (plus one final observation
    per episode end, not counted here, and one byte of bookkeeping).

    uint8 images stay uint8 (an Atari frame stack of 4x84x84 is 28,224 bytes per observation),
    float observations are float32; actions are stored as the env gives them (int64 indices,
    float32 vectors), the reward as float32, ``terminated`` as one bool.
    """
    obs = sum(int(np.prod(leaf.shape)) * leaf.dtype.itemsize for leaf in leaves(empty_obs(observation_space, (1,))))
    action = np.asarray(gym.vector.utils.batch_space(action_space, 1).sample())
    action_bytes = action.size * (8 if np.issubdtype(action.dtype, np.integer) else 4)
    rest = action_bytes + 4 + 1
    return obs + rest + 1 if optimize_memory_usage else 2 * obs + rest


def random_action_space(space: gym.Space, num_envs: int, seed: int) -> gym.Space:
    """The seeded batch space of uniform warm-up actions ``[num_envs, ...]`` in the policy's terms.

    A ``Box`` between its bounds, ``Discrete`` indices from 0 (the env group adds ``start``), drawn with
    gymnasium's ``sample`` as Stable-Baselines3 draws its ``learning_starts`` actions.

    Raises:
        TypeError: Another action space (the off-policy algorithms act in these two).
    """
    if isinstance(space, gym.spaces.Discrete):
        space = gym.spaces.Discrete(int(space.n))
    elif not isinstance(space, gym.spaces.Box):
        raise TypeError(f"Replay collection draws uniform actions from a Discrete or Box space, got {space}.")
    batched = gym.vector.utils.batch_space(space, num_envs)
    batched.seed(seed)
    return batched


class ReplayDataset(IterableDataset):
    """Replay-backed dataset: each ``iter()`` yields one epoch (a :class:`~rl_lightning.data.chunks.ReplayEpoch`).

    Stored transitions: ``obs``, ``action``, ``reward``, ``next_obs`` and ``terminated``.
    ``next_obs`` is the observation the step reached (the env group's ``final_obs``): for an
    episode that ended, its true last observation, so a truncated episode's target bootstraps
    from where the time limit cut it off; only ``terminated`` stops bootstrapping.

    Args:
        envs, counters, reset_seed, world_size: As :class:`~rl_lightning.data.rollout.RolloutDataset`.
        policy: The acting policy (:class:`~rl_lightning.data.protocol.ExplorationPolicy`).
        buffer: The replay buffer (:func:`make_replay_buffer`).
        steps_per_epoch: Env steps per rank per epoch (whole chunks of ``train_freq x num_envs``).
        learning_starts: Env steps (over all ranks) of uniform random actions before learning.
        action_seed: Seed of the uniform random actions.
        train_freq: Vector steps per chunk.
        gradient_steps: Gradient steps after each chunk past ``learning_starts``.
    """

    def __init__(
        self,
        envs: EnvGroup,
        policy: ExplorationPolicy,
        buffer: ReplayBuffer | CompactReplayBuffer,
        steps_per_epoch: int,
        learning_starts: int,
        counters: DataCounters,
        reset_seed: int,
        world_size: int = 1,
        action_seed: int = 0,
        train_freq: int = 1,
        gradient_steps: int = 1,
    ):
        super().__init__()
        self.envs, self.policy, self.buffer = envs, policy, buffer
        self.steps_per_epoch, self.learning_starts = steps_per_epoch, learning_starts
        self.train_freq, self.gradient_steps = train_freq, gradient_steps
        self.counters, self.reset_seed, self.world_size = counters, reset_seed, world_size
        self.random_actions = random_action_space(envs.action_space, envs.num_envs, action_seed)
        #: Gradient steps still owed by the chunk collected last (saved: a chunk cut short finishes on resume).
        self.gradient_credit = 0
        #: Vector steps taken in the current epoch (saved: a resumed run finishes an epoch cut short).
        self.epoch_steps = 0
        self.last_collection: CollectionMetrics | None = None
        self._seconds = {"rollout": 0.0, "env": 0.0, "inference": 0.0}
        #: As :attr:`RolloutDataset.synchronize_timing <rl_lightning.data.rollout.RolloutDataset.synchronize_timing>`.
        self.synchronize_timing, self._clock = False, time.perf_counter  # the clock: set once per epoch

    @property
    def learning(self) -> bool:
        """Whether the chunk just collected is followed by gradient steps: more than ``learning_starts`` env steps
        taken (Stable-Baselines3's ``num_timesteps > learning_starts``, so its schedules are reproduced exactly) and a
        batch's worth stored."""
        return self.counters.env_steps > self.learning_starts and len(self.buffer) >= self.buffer.batch_size

    def __len__(self) -> int:
        return 1

    def __iter__(self):
        yield ReplayEpoch(self)

    def batches(self, device: torch.device | None = None) -> Iterator[TensorDict]:
        """The epoch: collect each chunk, then yield its sampled batches (on ``device``), one per gradient step.

        A resumed run first takes the gradient steps its checkpoint still owed (their env steps were taken), then
        collects the rest of the epoch an interruption cut short (``epoch_steps`` says where it stopped).
        """
        self._seconds = dict.fromkeys(self._seconds, 0.0)
        if self.gradient_credit and not self.learning:  # resumed without the buffer: nothing to sample yet
            self.gradient_credit = 0
        yield from self._gradient_steps(device)
        first, vector_steps = self.epoch_steps, self.steps_per_epoch // self.envs.num_envs
        last = False
        self._clock = clock = timer(next(self.policy.parameters()).device, self.synchronize_timing)  # acting's
        while not last:
            start = clock()
            # To the chunk's end (chunks count from the epoch's start, so a resumed epoch keeps their boundaries).
            self._collect(self.train_freq - self.epoch_steps % self.train_freq)
            self._seconds["rollout"] += clock() - start
            self.gradient_credit = self.gradient_steps if self.learning else 0
            last = self.epoch_steps >= vector_steps  # >=: a train_freq that does not divide the epoch still ends it
            if last:  # the collection is complete: counted before its gradient steps
                self._close_epoch(self.epoch_steps - first)
            yield from self._gradient_steps(device)

    def _gradient_steps(self, device: torch.device | None) -> Iterator[TensorDict]:
        """The batches the chunk still owes, one per gradient step, sampled :data:`BATCHES_PER_DRAW` at a time.

        Nothing is stored between a chunk's gradient steps, so one draw of ``k x batch_size`` rows samples what ``k``
        draws of ``batch_size`` would: the same rows where nothing else draws from torch's generator in between (DQN),
        the same distribution otherwise (SAC's actor samples noise between its steps), for one draw's fixed cost.
        """
        while self.gradient_credit >= 1:
            size, draws = self.buffer.batch_size, min(self.gradient_credit, BATCHES_PER_DRAW)
            drawn = self.buffer.sample(draws * size)
            drawn = drawn if device is None else drawn.to(device)
            for batch in drawn.split(size) if draws > 1 else (drawn,):
                self.gradient_credit -= 1
                yield batch
                if self.gradient_credit >= 1:
                    # A signal stops between gradient steps (the credit says what is left, drawn anew on resume).
                    # After the chunk's last one the next env step or the batch end stops it.
                    interrupt_request.check()

    def _collect(self, vector_steps: int) -> None:
        """Take ``vector_steps`` steps of every env, then store their transitions in one write.

        Nothing samples the buffer while a chunk collects, so one write per chunk stores the same rows in the same order
        as one per env step, at a fraction of the cost. A stop or env fault that cuts the chunk still stores what it
        took, so a checkpoint written then holds every counted env step.
        """
        pending, device = [], next(self.policy.parameters()).device  # where the policy acts: read once a chunk
        try:
            for _ in range(vector_steps):
                if (transitions := self.take_step(device)) is not None:
                    pending.append(transitions)
                self.epoch_steps += 1
        finally:
            if pending:  # the chunk's columns stacked once, as the rollout loop does
                rows = pending[0] if len(pending) == 1 else {k: torch.cat([s[k] for s in pending]) for k in pending[0]}
                self.buffer.extend(TensorDict(rows, batch_size=rows["reward"].shape))

    def _close_epoch(self, taken: int) -> None:
        """The epoch's counters and collection metrics (over its env steps, not the gradient steps between chunks)."""
        self.epoch_steps = 0
        self.counters.iterations += 1
        seconds = self._seconds
        self.last_collection = CollectionMetrics(
            self.envs.pop_stats(), taken * self.envs.num_envs * self.world_size, seconds["rollout"], seconds["env"],
            seconds["inference"],
        )  # fmt: skip

    @torch.no_grad()
    def take_step(self, device: torch.device | None = None) -> dict[str, torch.Tensor | TensorDict] | None:
        """One step of every env: act (at random before ``learning_starts``, then the policy on ``device``, its own
        by default); the fields ``[k, ...]`` to store, or ``None`` (none valid, or the compact buffer stored them)."""
        interrupt_request.check()  # a signal stops collection between env steps (callbacks/interrupt.py)
        envs, device = self.envs, device or next(self.policy.parameters()).device
        compact = isinstance(self.buffer, CompactReplayBuffer)
        if envs.obs is None:
            envs.reset(seed=self.reset_seed)
            if compact:
                self.buffer.restart()  # the step stored last (before a resume) has no next row
        obs, clock = envs.obs, self._clock
        t0 = clock()
        with torch.inference_mode():  # as the rollout's steps (data/rollout.py); the buffer copies what it stores
            if self.counters.env_steps < self.learning_starts:
                action = torch.as_tensor(self.random_actions.sample(), device=envs.device)
            else:
                action = self.policy.explore(obs.to(device), self.counters.env_steps)
            t1 = clock()
            step = envs.step(action)
        self._seconds["inference"] += t1 - t0
        self._seconds["env"] += clock() - t1
        fields = {"obs": obs, "action": action.to(envs.device), "reward": step.reward, "terminated": step.terminated}
        if not compact:  # the compact buffer reads next_obs from the env's next row
            fields["next_obs"] = step.final_obs
        self.counters.env_steps += envs.num_envs * self.world_size
        # An episode cut short by an env fault or a skipped non-finite value has no true transition for this step
        # (its reward and next observation are stand-ins): not stored.
        valid = None if step.cut is None else ~step.cut
        if compact:
            finals = {int(i): step.final_obs[i].clone() for i in step.done.nonzero().flatten().tolist()}  # not views
            self.buffer.extend(TensorDict(fields, [envs.num_envs]), finals, valid)  # cut rows: kept, never sampled
            return None
        if valid is not None:
            fields = {key: value[valid] for key, value in fields.items()}
        return fields if fields["reward"].shape[0] else None
