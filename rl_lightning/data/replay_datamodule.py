"""``ReplayDataModule``: training and evaluation data for off-policy algorithms (SAC, DQN)."""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_info

from rl_lightning.checks import check_bool, check_positive_int
from rl_lightning.data.base import EnvDataModule
from rl_lightning.data.chunks import UTD_DENOMINATOR, chunk_schedule
from rl_lightning.data.replay import ReplayDataset, make_replay_buffer, transition_bytes
from rl_lightning.data.replay_buffer import check_scratch_dir
from rl_lightning.envs.gymnasium_env import WORKER_TIMEOUT
from rl_lightning.envs.torchrl_env import EnvFactory


def _check_torch_replay(storage: str, optimize_memory_usage: bool) -> None:
    """Refuse, naming the fix, replay settings a buffer on the env's device does not have."""
    for name, value, ok in (("storage", storage, "memory"), ("optimize_memory_usage", optimize_memory_usage, False)):
        if value != ok:
            raise ValueError(
                "ReplayDataModule on a batched env (env.backend=torch or envpool) keeps its replay buffer in "
                f"memory on the env's device, so {name}={value!r} is not available there. "
                f"Set data.{name}={str(ok).lower()} or keep env.backend=gymnasium."
            )


def machine_memory() -> tuple[int, int]:
    """``(physical, available)`` bytes of memory on this machine (0 where the system does not say)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        physical = 0
    available = 0
    with contextlib.suppress(OSError), open("/proc/meminfo") as meminfo:  # Linux only
        for line in meminfo:
            if line.startswith("MemAvailable:"):  # counts reclaimable caches too
                available = int(line.split()[1]) * 1024
    return physical, available


def _check_chunks(train_freq: Any, gradient_steps: Any, utd_ratio: float, steps_per_epoch: int, num_envs: Any) -> None:
    """Refuse a chunk schedule that is half given, not positive, given beside ``utd_ratio``, or that does not cut
    an epoch into whole chunks, naming the fix."""
    if train_freq is None and gradient_steps is None:
        return
    if train_freq is None or gradient_steps is None:
        raise ValueError(
            f"train_freq={train_freq} and gradient_steps={gradient_steps}: give both (a chunk of train_freq vector "
            "steps, then gradient_steps gradient steps), or neither and utd_ratio."
        )
    check_positive_int(train_freq=train_freq, gradient_steps=gradient_steps)
    if utd_ratio != 1.0:
        raise ValueError(
            f"utd_ratio={utd_ratio} and train_freq/gradient_steps both set the gradient-step schedule: keep one "
            f"(train_freq={train_freq}, gradient_steps={gradient_steps} is utd_ratio "
            f"{gradient_steps}/({train_freq} x num_envs), in chunks)."
        )
    if isinstance(num_envs, int) and num_envs > 0 and (steps_per_epoch // num_envs) % train_freq:
        raise ValueError(
            f"steps_per_epoch={steps_per_epoch} is {steps_per_epoch // num_envs} vector steps of {num_envs} env(s), "
            f"not a whole number of train_freq={train_freq} chunks: every epoch (and every DDP rank) takes whole "
            "chunks. Make steps_per_epoch a multiple of train_freq x num_envs."
        )


class ReplayDataModule(EnvDataModule):
    """Replay-backed training data and evaluation on every object set.

    One training epoch is ``steps_per_epoch`` environment steps per rank, in chunks of ``train_freq`` vector steps; each
    chunk that ends past ``learning_starts`` env steps is followed by ``gradient_steps`` gradient steps on batches
    sampled from the replay buffer (Stable-Baselines3's spelling and schedule; see :mod:`rl_lightning.data.replay`).
    Without them, ``utd_ratio`` gradient steps per env step, in the smallest chunks that allows
    (:func:`~rl_lightning.data.chunks.chunk_schedule`). Each epoch is one Lightning batch, a
    :class:`~rl_lightning.data.chunks.ReplayEpoch` whose iteration in ``training_step`` collects the chunks. Validation
    and test are as in :class:`~rl_lightning.data.RolloutDataModule`.

    Args:
        steps_per_epoch: Env steps per rank per epoch; a multiple of ``num_envs``.
        learning_starts: Env steps (over all ranks) of uniform random actions before learning.
        utd_ratio: Gradient steps per env step; ``steps_per_epoch * utd_ratio`` must be whole. With
            ``num_envs`` envs one vector step is ``utd_ratio * num_envs = a / b`` gradient steps: a
            chunk of ``b`` vector steps, then ``a`` gradient steps (1 env at 1.0: one after every env step).
        train_freq: Vector steps (every env steps once) per collection chunk; each chunk past
            ``learning_starts`` is followed by ``gradient_steps`` gradient steps (RL-Zoo's
            CartPole DQN: 256 and 128). Given with ``gradient_steps``, instead of ``utd_ratio``;
            ``steps_per_epoch / num_envs`` must be a multiple of it. ``None``: ``utd_ratio``.
        gradient_steps: Gradient steps after each chunk of ``train_freq`` vector steps.
        batch_size: Transitions per sampled batch.
        buffer_size: Replay capacity per rank, in transitions.
        storage: ``"memory"`` or ``"memmap"`` (memory-mapped files under ``scratch_dir``).
        scratch_dir: Directory of the memmap files (``None``: a temporary directory).
        save_replay_buffer: Put the buffer's contents in checkpoints, so a resumed run goes
            on without refilling (checkpoints grow by the buffer's size).
        optimize_memory_usage: Store each observation once: a transition's next observation is read from its env's next
            stored step, an episode end's from a copy kept aside (:mod:`rl_lightning.data.compact_replay`; SB3's
            spelling). Half the memory of image replay.
        seed: Base seed of envs and random actions.
        env_id, num_envs, obj_sets, train_obj_set, eval_obj_sets, max_episode_steps, vectorization, eval_interval,
        eval_episodes, eval_num_envs, eval_deterministic, eval_max_episode_steps, max_env_restarts, obs_bound,
        obs_bound_mode, on_nonfinite, wrappers, backend, env_factory, worker_start_method, worker_timeout:
            As :class:`~rl_lightning.data.base.EnvDataModule`; on a batched backend (``"torch"``,
            ``"envpool"``) the buffer lives on the env's device, so transitions never leave it.
    """

    def __init__(
        self,
        env_id: str = "Pendulum-v1",
        num_envs: int = 1,
        steps_per_epoch: int = 1000,
        learning_starts: int = 5000,
        utd_ratio: float = 1.0,
        train_freq: int | None = None,
        gradient_steps: int | None = None,
        batch_size: int = 256,
        buffer_size: int = 1_000_000,
        storage: str = "memory",
        scratch_dir: str | None = None,
        save_replay_buffer: bool = False,
        optimize_memory_usage: bool = False,
        obj_sets: Mapping[str, Sequence[Any]] | None = None,
        train_obj_set: str = "train",
        eval_obj_sets: Sequence[str] = ("train", "test"),
        max_episode_steps: int | None = None,
        vectorization: str = "sync",
        seed: int = 0,
        eval_interval: int = 1,
        eval_episodes: int = 10,
        eval_num_envs: int | None = None,
        eval_deterministic: bool = True,
        eval_max_episode_steps: int | None = None,
        max_env_restarts: int = 3,
        obs_bound: float | None = None,
        obs_bound_mode: str = "clip",
        on_nonfinite: str = "stop",
        wrappers: Sequence[Any] | None = None,
        backend: str = "gymnasium",
        env_factory: EnvFactory | str | None = None,
        worker_start_method: str | None = None,
        worker_timeout: float = WORKER_TIMEOUT,
    ):
        if backend != "gymnasium":
            _check_torch_replay(storage, optimize_memory_usage)
        check_positive_int(steps_per_epoch=steps_per_epoch, batch_size=batch_size, buffer_size=buffer_size)
        if not isinstance(learning_starts, int) or isinstance(learning_starts, bool) or learning_starts < 0:
            raise ValueError(f"learning_starts must be a non-negative integer, got {learning_starts!r}.")
        if not isinstance(utd_ratio, (int, float)) or isinstance(utd_ratio, bool) or not 1e-6 <= utd_ratio < math.inf:
            raise ValueError(f"utd_ratio must be a finite number of at least 1e-6, got {utd_ratio!r}.")
        if isinstance(num_envs, int) and num_envs > 0 and steps_per_epoch % num_envs:
            raise ValueError(
                f"steps_per_epoch={steps_per_epoch} is not a multiple of num_envs={num_envs}: every env steps "
                "together, so choose a multiple."
            )
        if (Fraction(utd_ratio).limit_denominator(UTD_DENOMINATOR) * steps_per_epoch).denominator != 1:
            raise ValueError(
                f"steps_per_epoch x utd_ratio = {steps_per_epoch} x {utd_ratio} is not a whole number of gradient "
                "steps; every epoch (and every DDP rank) must take the same count. Adjust either."
            )
        _check_chunks(train_freq, gradient_steps, utd_ratio, steps_per_epoch, num_envs)
        super().__init__(
            env_id, num_envs, obj_sets, train_obj_set, eval_obj_sets, max_episode_steps, vectorization, seed,
            eval_interval, eval_episodes, eval_num_envs, eval_deterministic, eval_max_episode_steps, max_env_restarts,
            obs_bound, obs_bound_mode, on_nonfinite, wrappers, backend, env_factory, worker_start_method,
            worker_timeout,
        )  # fmt: skip
        check_bool(save_replay_buffer=save_replay_buffer, optimize_memory_usage=optimize_memory_usage)
        # A batched env's rows stay on its device.
        device = "auto" if backend == "torch" else "cpu"
        self.buffer = make_replay_buffer(
            buffer_size, batch_size, storage, scratch_dir, optimize_memory_usage, num_envs, device
        )
        #: ``(train_freq, gradient_steps)``: vector steps per chunk and the gradient steps after each.
        self.schedule = chunk_schedule(utd_ratio, num_envs, train_freq, gradient_steps)
        self._restored: dict[str, Any] = {}

    @property
    def env_steps_per_epoch(self) -> int:
        """Environment steps one epoch takes, summed over ranks (``steps_per_epoch`` is per rank)."""
        return self.hparams.steps_per_epoch * self.world_size

    def _train_stream(self, reset_seed: int) -> ReplayDataset:
        """The replay stream: one Lightning batch per epoch, its chunks collected as the algorithm iterates it."""
        hp = self.hparams
        self.check_buffer_memory()
        stream = ReplayDataset(self.train_envs, self._policy(), self.buffer, hp.steps_per_epoch, hp.learning_starts,
                               self.counters, reset_seed, world_size=self.world_size,
                               action_seed=hp.seed + 7919 * (self.rank + 1) + self.counters.env_steps,
                               train_freq=self.schedule[0], gradient_steps=self.schedule[1])  # fmt: skip
        stream.gradient_credit = self._restored.get("gradient_credit", 0)
        stream.epoch_steps = self._restored.get("epoch_steps", 0)
        return stream

    @property
    def transition_bytes(self) -> int:
        """Bytes one stored transition takes with the training envs' spaces (see ``data.replay.transition_bytes``)."""
        envs = self.train_envs
        return transition_bytes(envs.observation_space, envs.action_space, self.hparams.optimize_memory_usage)

    def check_buffer_memory(self) -> None:
        """Report what the full buffer will take; refuse, before any env step, an in-memory one larger than RAM.

        The storage is allocated at the first write for the whole capacity, so a buffer that cannot fit
        would otherwise fail, or be killed, mid-run.

        Raises:
            MemoryError: ``buffer_size`` transitions in memory exceed this machine's memory.
            ValueError: A memmap buffer's ``scratch_dir`` cannot hold its files.
        """
        hp = self.hparams
        per_transition = self.transition_bytes
        total = per_transition * hp.buffer_size
        size = f"{total / 1e9:.2f} GB" if total >= 1e9 else f"{total / 1e6:.1f} MB"
        rank_zero_info(f"Replay buffer ({hp.storage}): {hp.buffer_size:,} transitions x {per_transition:,} bytes = "
                       f"{size} per rank.")  # fmt: skip
        if hp.storage != "memory":  # memmap files: a scratch_dir that cannot hold them is refused now
            return check_scratch_dir(hp.scratch_dir)
        physical, available = machine_memory()
        fix = (
            f"lower data.buffer_size (it fits about {int(available // per_transition):,}), or set data.storage=memmap "
            "to keep the buffer in memory-mapped files (data.scratch_dir on a large disk)"
        )
        if not hp.optimize_memory_usage:
            fix += ", or set data.optimize_memory_usage=true to store each observation once"
        if physical and total > physical:
            raise MemoryError(
                f"The replay buffer needs {total / 1e9:.1f} GB ({hp.buffer_size:,} transitions x {per_transition:,} "
                f"bytes), more than this machine's {physical / 1e9:.1f} GB of memory. Fix: {fix}."
            )
        if available and total > available:
            warnings.warn(
                f"The replay buffer will take {total / 1e9:.1f} GB once full, more than the {available / 1e9:.1f} GB "
                f"of memory available now. If the run is killed for memory: {fix}.",
                stacklevel=2,
            )

    def close(self) -> None:
        """Close every environment and empty the buffer (a memmap storage's files are deleted)."""
        super().close()
        self.buffer.close()

    # ---------------------------------------------------------------- checkpointing
    def rank_state_dict(self) -> dict[str, Any]:
        """The owed gradient steps, the epoch's vector steps and (with ``save_replay_buffer``) this rank's buffer."""
        dataset, restored = self.train_dataset, self._restored
        return {
            "gradient_credit": dataset.gradient_credit if dataset is not None else restored.get("gradient_credit", 0),
            # An epoch an interruption cut short: the resumed run takes only its remaining steps.
            "epoch_steps": dataset.epoch_steps if dataset is not None else restored.get("epoch_steps", 0),
            "replay_buffer": self.buffer.state_dict() if self.hparams.save_replay_buffer else None,
            "num_envs": self.hparams.num_envs,  # what the epoch position (and a compact buffer's rows) count steps of
            "steps_per_epoch": self.hparams.steps_per_epoch,
        }

    def _fitting(self) -> bool:
        # Evaluating a checkpoint (trainer.test/validate) needs no buffer: no warning then.
        trainer = self.trainer
        return trainer is None or trainer.state.fn == TrainerFn.FITTING

    def check_world_size_change(self, saved_world: int, ranks: list[dict[str, Any]]) -> None:
        """Refuse what is each rank's own (its buffer shard, a cut epoch's remaining steps) on another world size."""
        if self._fitting() and ranks[0]["epoch_steps"]:  # the ranks step in lockstep: all cut at the same step
            raise ValueError(
                f"This checkpoint's epoch was cut short by an interruption, on {saved_world} rank(s), and this run has "
                f"{self.world_size}: its rest cannot be shared out again. Resume with trainer.devices x "
                f"trainer.num_nodes = {saved_world}, or from a checkpoint of an epoch's end (epoch=E-env_steps=S.ckpt)."
            )
        shards = any(rank.get("replay_buffer") is not None for rank in ranks)  # restored only with save_replay_buffer
        if shards and self.hparams.save_replay_buffer and self._fitting():
            raise ValueError(f"This checkpoint holds replay buffer shards of {saved_world} rank(s), but this run has "
                             f"{self.world_size}: shards cannot be split or merged. Resume with the same number of "
                             f"processes (trainer.devices x trainer.num_nodes = {saved_world}), or with "
                             "save_replay_buffer=false to refill the buffers from scratch.")  # fmt: skip

    def check_resume_state(self, state: dict[str, Any]) -> None:
        """Every rank's :meth:`check_rank_state`, on the data module's entry of a checkpoint, before a fit starts."""
        for rank in state["ranks"]:
            self.check_rank_state(rank)

    def check_rank_state(self, state: dict[str, Any]) -> None:
        """Refuse a rank's saved replay state this run cannot take, naming the fix: a cut epoch or a compact buffer on
        another ``num_envs``, a cut epoch on another ``steps_per_epoch``, a buffer stored the other way or of another
        size. On load, and before a fit starts (``check_resume``): a refused resume leaves the run directory alone."""
        hp = self.hparams
        buffer = state["replay_buffer"] if hp.save_replay_buffer else None  # restored only with save_replay_buffer
        compact = buffer is not None and "compact" in buffer
        fitting = self._fitting()  # evaluating a checkpoint takes no epoch position and samples no buffer
        cut = "its epoch was cut short" if state["epoch_steps"] and fitting else None
        pairs = "its compact buffer pairs each row with the one num_envs on" if compact and fitting else cut
        for name, why, group in (("num_envs", pairs, "env"), ("steps_per_epoch", cut, "data")):
            if why and (saved := state.get(name, hp[name])) != hp[name]:  # absent: a file written before the key
                raise ValueError(
                    f"This checkpoint's replay stream ran with {name}={saved} per rank, and this run has "
                    f"{hp[name]}: {why}. Resume with {name}={saved} (Hydra: {group}.{name}), or from a "
                    "checkpoint of an epoch's end (epoch=E-env_steps=S.ckpt) with save_replay_buffer=false."
                )
        if buffer is not None:
            if compact != hp.optimize_memory_usage:
                raise ValueError(
                    f"The checkpoint's replay buffer was saved with optimize_memory_usage={str(compact).lower()}, and "
                    f"this run has {str(not compact).lower()}: the two store transitions differently. Resume with the "
                    "setting the run had, or with save_replay_buffer=false to refill the buffer."
                )
            self.buffer.check_state(buffer)

    def load_rank_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore the owed gradient steps, the epoch's position and this rank's buffer when the checkpoint holds it
        (and ``save_replay_buffer`` is on: off, the buffer refills), after :meth:`check_rank_state`."""
        if state is not None:
            self.check_rank_state(state)
        buffer = state["replay_buffer"] if state is not None and self.hparams.save_replay_buffer else None
        self._restored = {key: 0 if state is None else int(state[key]) for key in ("gradient_credit", "epoch_steps")}
        if self.train_dataset is not None:
            self.train_dataset.gradient_credit = self._restored["gradient_credit"]
            self.train_dataset.epoch_steps = self._restored["epoch_steps"]
        if buffer is not None:
            self.buffer.load_state_dict(buffer)
        elif state is not None and self.counters.env_steps and self._fitting():
            warnings.warn(
                "The replay buffer is not restored (the checkpoint holds none, or save_replay_buffer=false): learning "
                "resumes once a batch's worth of new transitions is stored, from a buffer that starts empty.",
                stacklevel=2,
            )
