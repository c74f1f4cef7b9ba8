"""``EnvDataModule``: what every data module shares: envs per object set, evaluation, counters, RNG state.

Subclasses add the training stream: :class:`~rl_lightning.data.datamodule.RolloutDataModule`
(on-policy rollouts) and, later, replay-backed data for off-policy algorithms.
"""

from __future__ import annotations

import dataclasses
import random
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import DataLoader

from rl_lightning.checks import check_positive_int
from rl_lightning.data.collection import CollectionMetrics, DataCounters
from rl_lightning.data.evaluation import EvaluationDataset
from rl_lightning.data.protocol import FaultPolicy
from rl_lightning.deprecation import warn_renamed
from rl_lightning.envs import EnvGroup, check_env_id, make_env, resolve_obj_sets
from rl_lightning.envs.batched import DYNAMICS
from rl_lightning.envs.checks import ON_NONFINITE, check_value_options
from rl_lightning.envs.env_group import VECTORIZATION
from rl_lightning.envs.envpool_env import check_envpool_task, envpool_env
from rl_lightning.envs.restart import check_max_env_restarts
from rl_lightning.envs.tensor_group import TensorEnvGroup, reference_env
from rl_lightning.envs.torchrl_env import user_factory
from rl_lightning.envs.wrappers import check_wrappers

# The data streams must run in the trainer's process, next to the policy they act with,
# and their length is exact: Lightning's advice to add dataloader workers does not apply.
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*IterableDataset.*has .__len__. defined.*")
# The streams are resumable through the data module's own state (env-step position, the chunk cut
# short): Lightning's warning about resuming mid-epoch, which reads only the DataLoader, does not apply.
warnings.filterwarnings("ignore", ".*resuming from a checkpoint that ended before the epoch ended.*")


#: Offset of the final test's reset seeds from validation's (both far from training's).
TEST_SEED_OFFSET = 500_000


def identity_collate(batch):
    """Collate function that passes batches through (``default_convert`` breaks TensorDicts)."""
    return batch


def renamed_env_argument(owner: str, env_id: str, env: str | None, default: str) -> str:
    """The env id a data module was given: ``env_id``, or its old name ``env`` (warned, for one release).

    Raises:
        ValueError: Both were given, naming two different envs.
    """
    if env is None:
        return env_id
    if env_id not in (default, env):
        raise ValueError(
            f"{owner}(env={env!r}, env_id={env_id!r}) names two envs; pass env_id only (env is its old name)."
        )
    # At the data module's caller: renamed_env_argument <- the data module's __init__ <- its caller.
    warn_renamed(f"{owner}(env=...)", f"{owner}(env_id=...) (Hydra: env.env_id, CLI: --data.env_id)", stacklevel=4)
    return env


def _numpy_state_to_plain(state: tuple) -> tuple:
    """numpy's legacy RNG state with its key array as a list (loads with ``weights_only``)."""
    kind, keys, pos, has_gauss, gauss = state
    return kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)


#: What can step a data module's envs (``backend=...``; Hydra ``env.backend``).
BACKENDS = ("gymnasium", "torch", "envpool")
#: The backends whose one batched env hands back tensors: they take the tensor path
#: (:mod:`rl_lightning.data.device_rollout`, :mod:`rl_lightning.data.device_replay`).
TENSOR_BACKENDS = ("torch", "envpool")


def check_backend(
    backend: str, env_id: str, wrappers: Sequence[Any], obs_bound: float | None, env_factory: str | None = None
) -> None:
    """Refuse, naming the fix, a backend that is not one of :data:`BACKENDS` or cannot run these settings.

    The torch backend steps a batched torch env of ``env_id`` (:data:`~rl_lightning.envs.batched.DYNAMICS`),
    the envpool backend EnvPool's batch of it (:mod:`rl_lightning.envs.envpool_env`): gymnasium
    wrappers and ``obs_bound`` act on single gymnasium envs, so they have no place there.
    """
    if backend not in BACKENDS:
        raise ValueError(
            f"backend must be one of {BACKENDS}, got {backend!r} (Hydra: env.backend=gymnasium, torch or envpool)."
        )
    if env_factory is not None and backend != "torch":
        raise ValueError(
            f"env.env_factory={env_factory!r} builds a batched tensor env, which env.backend={backend} does not step. "
            "Set env.backend=torch, or env.env_factory=null."
        )
    if backend == "gymnasium":
        return
    if backend == "envpool":
        check_envpool_task(env_id)
    elif env_factory is not None:
        user_factory(env_factory)  # importable and callable, or the message naming the path
    elif env_id not in DYNAMICS:
        raise ValueError(
            f"env.backend=torch steps a batched torch env, and rl_lightning has none of {env_id!r}; it has "
            f"{sorted(DYNAMICS)}. Pick one of those or keep env.backend=gymnasium."
        )
    if wrappers:
        raise ValueError(
            f"env.wrappers={list(wrappers)!r} wrap single gymnasium envs; the {backend} backend steps one batched env. "
            "Drop the wrappers (env.wrappers=[]) or keep env.backend=gymnasium."
        )
    if obs_bound is not None:
        raise ValueError(
            f"obs_bound={obs_bound} clips single gymnasium envs' observations; the {backend} backend has no such "
            "check. Set env.obs_bound=null or keep env.backend=gymnasium."
        )


def eval_prefix(obj_set: str, train_obj_set: str) -> str:
    """Metric prefix of an object set: ``eval`` for the training set, ``eval_ood`` for ``test``."""
    if obj_set == train_obj_set:
        return "eval"
    return "eval_ood" if obj_set == "test" else f"eval_{obj_set}"


class EnvDataModule(pl.LightningDataModule):
    """Envs for every object set, evaluation loaders, progress counters and RNG state.

    Subclasses implement ``train_dataloader`` and :attr:`steps_per_epoch`, and extend
    ``state_dict``/``load_state_dict`` with their stream's own state.

    Args:
        env_id: Gymnasium env id.
        num_envs: Training envs per rank.
        obj_sets: Object sets (name -> list of variations); ``None`` takes the shipped ones.
        train_obj_set: The set training episodes are drawn from.
        eval_obj_sets: Sets evaluated at validation and test time.
        max_episode_steps: Time limit for training envs; ``None`` keeps the registered one.
        vectorization: ``"sync"`` or ``"async"``.
        seed: Base seed; rank ``r``'s env ``i`` is seeded with ``seed + r * num_envs + i``.
        eval_interval: Evaluate every this many epochs (within the Trainer's own
            ``check_val_every_n_epoch``, which should stay 1).
        eval_episodes: Episodes per object set per evaluation (split over ranks).
        eval_num_envs: Envs per evaluation group; ``None`` takes ``min(eval_episodes, 8)``.
        eval_deterministic: Evaluate the mode of the policy rather than samples.
        eval_max_episode_steps: Time limit for evaluation envs; ``None`` keeps the registered one.
        max_env_restarts: How many times in a row one env may be recreated after raising in
            ``step`` or ``reset`` (or the async workers rebuilt after one died) without an
            episode finishing in between; one more stops the run with
            :class:`~rl_lightning.faults.EnvFault`. 0 never recreates. Recreations are
            logged as ``rollout/env_restarts``.
        obs_bound: Bound on the absolute value of observations; ``None`` checks only that
            they are finite.
        obs_bound_mode: ``"clip"``: clip observations to ``[-obs_bound, obs_bound]``
            (counted in ``rollout/obs_clipped``); ``"reject"``: treat a value outside the
            bound like a non-finite one (the algorithm's ``on_nonfinite`` decides).
        wrappers: Gymnasium wrappers applied to every env of the run (training, evaluation,
            videos, ``play``), after ``gymnasium.make``: import paths or mappings
            ``{"wrapper": path, **arguments}`` (:mod:`rl_lightning.envs.wrappers`); kept in
            checkpoints.
        backend: What steps the envs: ``"gymnasium"`` (one gymnasium env per index, numpy),
            ``"torch"`` (the batched torch env of ``env_id``, :mod:`rl_lightning.envs.batched`:
            every env at once, on the Trainer's device; the tensor path,
            :mod:`rl_lightning.data.device_rollout`) or ``"envpool"`` (EnvPool's C++ batch of
            ``env_id`` on the CPU, :mod:`rl_lightning.envs.envpool_env`, on the tensor path too).
        env_factory: With ``backend="torch"``: the import path of a function ``(env_id, num_envs,
            device, seed, max_episode_steps)`` returning the batched env (a gymnasium ``VectorEnv``
            of tensors, or a torchrl ``EnvBase`` with ``batch_size=[num_envs]``;
            :mod:`rl_lightning.envs.torchrl_env`) instead of rl_lightning's own; Hydra ``env.env_factory``.
    """

    #: A subclass's constructor arguments kept out of its saved settings (deprecated ones, say).
    unsaved_args: tuple[str, ...] = ()

    def __init__(
        self,
        env_id: str,
        num_envs: int,
        obj_sets: Mapping[str, Sequence[Any]] | None,
        train_obj_set: str,
        eval_obj_sets: Sequence[str],
        max_episode_steps: int | None,
        vectorization: str,
        seed: int,
        eval_interval: int,
        eval_episodes: int,
        eval_num_envs: int | None,
        eval_deterministic: bool,
        eval_max_episode_steps: int | None,
        max_env_restarts: int = 3,
        obs_bound: float | None = None,
        obs_bound_mode: str = "clip",
        wrappers: Sequence[Any] | None = None,
        backend: str = "gymnasium",
        env_factory: str | None = None,
    ):
        super().__init__()
        wrappers = check_wrappers(wrappers)
        if env_factory is None:  # a user's batched env need not be in gymnasium's registry
            check_env_id(env_id)
        check_backend(backend, env_id, wrappers, obs_bound, env_factory)
        check_max_env_restarts(max_env_restarts)
        check_value_options(obs_bound, obs_bound_mode)
        for name in ("num_envs", "eval_interval", "eval_episodes"):
            check_positive_int(**{name: locals()[name]})
        for name in ("max_episode_steps", "eval_max_episode_steps", "eval_num_envs"):
            if locals()[name] is not None:
                check_positive_int(**{name: locals()[name]})
        if vectorization not in VECTORIZATION:
            raise ValueError(f"vectorization must be one of {VECTORIZATION}, got {vectorization!r}.")
        if isinstance(eval_obj_sets, str):
            eval_obj_sets = [eval_obj_sets]
        self.obj_sets = resolve_obj_sets(env_id, obj_sets)
        for name in [train_obj_set, *eval_obj_sets]:
            if name not in self.obj_sets:
                raise ValueError(
                    f"Unknown object set '{name}' for {env_id}; available: {sorted(self.obj_sets)}. "
                    "Pick one of those or add it to obj_sets."
                )
        # Collects the subclass's constructor arguments too (Lightning walks the __init__ frames).
        self.save_hyperparameters(ignore=["obj_sets", *self.unsaved_args])
        self.hparams["eval_obj_sets"] = list(eval_obj_sets)
        self.hparams["wrappers"] = wrappers  # plain specs (a Hydra ListConfig becomes a list)
        # Stored as plain dicts so checkpoints load with weights_only=True.
        self.hparams["obj_sets"] = {k: [dataclasses.asdict(v) for v in vs] for k, vs in self.obj_sets.items()}
        self.counters = DataCounters()
        #: The env steps of the checkpoint the counters were last restored from (0: none).
        self.resumed_from = 0
        self.rank, self.world_size = 0, 1
        self._gloo_group = None
        self.train_envs: EnvGroup | None = None
        self.eval_envs: dict[str, EnvGroup] = {}
        #: The training stream (built by the subclass's ``train_dataloader``).
        self._train_dataset = None

    # ---------------------------------------------------------------- environments
    @property
    def backend(self) -> str:
        """``"gymnasium"`` or ``"torch"`` (checkpoints of earlier versions: gymnasium)."""
        return self.hparams.get("backend", "gymnasium")

    def _device(self) -> torch.device:
        """Where the tensor path's envs live: the Trainer's device (the CPU without one)."""
        return self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")

    def _env_group(
        self, obj_set: str, num_envs: int, seed: int, max_episode_steps: int | None
    ) -> EnvGroup | TensorEnvGroup:
        hp = self.hparams
        if self.backend in TENSOR_BACKENDS:
            factory = envpool_env if self.backend == "envpool" else reference_env
            if hp.get("env_factory"):  # .get: checkpoints of earlier versions have none
                factory = user_factory(hp.env_factory)
            return TensorEnvGroup(
                hp.env_id, num_envs, obj_set, self.obj_sets, max_episode_steps, seed, self._device(), factory
            )
        return EnvGroup(
            hp.env_id,
            num_envs,
            obj_set=obj_set,
            obj_sets=self.obj_sets,
            max_episode_steps=max_episode_steps,
            vectorization=hp.vectorization,
            seed=seed,
            # .get: checkpoints of earlier versions hold none of these.
            max_env_restarts=hp.get("max_env_restarts", 3),
            obs_bound=hp.get("obs_bound"),
            obs_bound_mode=hp.get("obs_bound_mode", "clip"),
            on_nonfinite=self._on_nonfinite(),
            wrappers=hp.get("wrappers") or (),
        )

    def _on_nonfinite(self) -> str:
        """The algorithm's ``on_nonfinite`` (``"stop"`` without a trainer or where it has none)."""
        module = self.trainer.lightning_module if self.trainer is not None else None
        value = module.on_nonfinite if isinstance(module, FaultPolicy) else "stop"
        if value not in ON_NONFINITE:
            raise ValueError(f"on_nonfinite must be one of {ON_NONFINITE}, got {value!r} (Hydra: algo.on_nonfinite).")
        return value

    def setup(self, stage: str) -> None:
        """Build the envs this stage needs (once); training envs only for ``fit``.

        Envs built by an earlier stage take the current algorithm's ``on_nonfinite``.
        """
        hp = self.hparams
        if self.trainer is not None:
            self.rank, self.world_size = self.trainer.global_rank, self.trainer.world_size
        on_nonfinite = self._on_nonfinite()
        for envs in [self.train_envs, *self.eval_envs.values()]:
            if envs is not None:
                envs.on_nonfinite = on_nonfinite
        if hp.eval_episodes < self.world_size:
            raise ValueError(
                f"eval_episodes={hp.eval_episodes} is smaller than the {self.world_size} ranks; "
                "give every rank at least one evaluation episode."
            )
        if stage == "fit" and self.train_envs is None:
            self.train_envs = self._env_group(
                hp.train_obj_set, hp.num_envs, hp.seed + self.rank * hp.num_envs, hp.max_episode_steps
            )
        if not self.eval_envs:
            eval_envs = hp.eval_num_envs or min(hp.eval_episodes, 8)
            for obj_set in hp.eval_obj_sets:
                # Evaluation seeds are far from training seeds; the object sets' own seed
                # ranges decide which episodes are drawn.
                seed = hp.seed + 1_000_000 + self.rank * eval_envs
                self.eval_envs[obj_set] = self._env_group(obj_set, eval_envs, seed, hp.eval_max_episode_steps)

    @property
    def env_id(self) -> str:
        """The gymnasium id of the envs this module builds (every object set's variations default to it)."""
        return self.hparams.env_id

    def env_spaces(self) -> tuple[gym.Space, gym.Space]:
        """The observation and action spaces of one training env, without building the data module's envs.

        What a check before ``fit`` needs (a resume's checkpoint against this env): one env of
        the training set is made and closed.
        """
        if self.train_envs is not None or self.eval_envs:
            return self.observation_space, self.action_space
        hp = self.hparams
        env = make_env(
            self.env_id, hp.train_obj_set, self.obj_sets, hp.max_episode_steps, wrappers=hp.get("wrappers") or ()
        )
        try:
            return env.observation_space, env.action_space
        finally:
            env.close()

    @property
    def observation_space(self):
        """Observation space of one env (after ``setup``)."""
        return self._any_envs().observation_space

    @property
    def action_space(self):
        """Action space of one env (after ``setup``)."""
        return self._any_envs().action_space

    def _any_envs(self) -> EnvGroup:
        envs = self.train_envs or next(iter(self.eval_envs.values()), None)
        if envs is None:
            raise RuntimeError("The data module has no envs yet: call setup() first (the Trainer does).")
        return envs

    @property
    def env_steps(self) -> int:
        """Environment steps taken so far, summed over ranks."""
        return self.counters.env_steps

    @property
    def last_collection(self) -> CollectionMetrics | None:
        """Metrics of the most recent epoch's collection (``None`` before the first)."""
        return None if self._train_dataset is None else self._train_dataset.last_collection

    @property
    def last_rollout(self) -> CollectionMetrics | None:
        """Deprecated name of :attr:`last_collection` (kept for one release)."""
        warn_renamed("EnvDataModule.last_rollout", "last_collection")
        return self.last_collection

    # ---------------------------------------------------------------- dataloaders
    def _policy(self):
        # The acting copy when the algorithm has one (ActorSync), else the policy itself.
        return self.trainer.lightning_module.acting_policy

    def _eval_loaders(self, gated: bool) -> list[DataLoader]:
        hp = self.hparams

        def should_run() -> bool:
            trainer = self.trainer
            # The interval applies inside fit; trainer.validate() on its own always evaluates.
            if not gated or trainer is None or trainer.state.fn != TrainerFn.FITTING:
                return True
            if trainer.sanity_checking:
                return False
            # Counted in collections (rollouts, replay epochs) rather than Lightning's epochs: a resume
            # from a checkpoint written inside an epoch can leave the two one apart, and evaluations
            # must fall on the uninterrupted run's env-step grid (issue 25's fifth defect).
            return self.evaluation_due

        share = hp.eval_episodes // self.world_size + (self.rank < hp.eval_episodes % self.world_size)
        loaders = []
        for obj_set, envs in self.eval_envs.items():
            dataset = EvaluationDataset(
                envs,
                self._policy,
                share,
                eval_prefix(obj_set, hp.train_obj_set),
                deterministic=hp.eval_deterministic,
                # The final test draws other episodes than validation (which may have picked
                # best.ckpt): its figures are not the ones a selection was made on.
                seed=envs.seed if gated else envs.seed + TEST_SEED_OFFSET,
                should_run=should_run,
            )
            loaders.append(DataLoader(dataset, batch_size=None, collate_fn=identity_collate))
        return loaders

    @property
    def evaluation_due(self) -> bool:
        """Whether the collections so far end on the evaluation grid (every ``eval_interval``) and the
        policy has not been evaluated there yet."""
        iterations = self.counters.iterations
        return iterations > 0 and iterations % self.hparams.eval_interval == 0 and self.counters.evaluated != iterations

    def mark_evaluated(self) -> None:
        """Record that the policy was evaluated after the collections so far (the algorithm calls it
        when an evaluation has finished, so one cut short by an interruption stays due)."""
        self.counters.evaluated = self.counters.iterations

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per evaluation object set; runs every ``eval_interval`` epochs."""
        return self._eval_loaders(gated=True)

    def test_dataloader(self) -> list[DataLoader]:
        """One loader per evaluation object set; always runs (the final evaluation)."""
        return self._eval_loaders(gated=False)

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Global counters, and every rank's own state (RNG states; subclasses add theirs).

        Under DDP each rank steps its own envs with its own RNG streams (and, off-policy,
        fills its own replay buffer shard), so the checkpoint keeps one entry per rank:
        ``ranks[r]``, gathered on rank zero, which writes the file. Lightning calls this on
        every rank when a checkpoint is saved, so the gather is collective.
        """
        local = {
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": _numpy_state_to_plain(np.random.get_state()),
            "python_rng": random.getstate(),
            **self.rank_state_dict(),
        }
        ranks = [local]
        if self.world_size > 1 and dist.is_available() and dist.is_initialized():
            gathered = [None] * self.world_size if self.rank == 0 else None
            dist.gather_object(local, gathered, dst=0, group=self._host_group())
            ranks = gathered if self.rank == 0 else [local]
        return {
            "env_steps": self.counters.env_steps,
            "iterations": self.counters.iterations,
            "evaluated": self.counters.evaluated,
            "world_size": self.world_size,
            "ranks": ranks,
        }

    def _host_group(self):
        """A gloo process group for gathering state: over NCCL, ``gather_object`` would stage every
        rank's pickled state (replay shards too) in GPU memory. ``None``: the default group is gloo."""
        if dist.get_backend() == "gloo":
            return None
        if self._gloo_group is None:  # created on every rank: state_dict runs on every rank
            self._gloo_group = dist.new_group(backend="gloo")
        return self._gloo_group

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore counters and this rank's state; envs restart their episodes.

        Raises:
            ValueError: The checkpoint was written by another number of ranks and holds
                per-rank data that cannot be split or merged (a replay buffer per rank).
        """
        self.counters.env_steps = int(state["env_steps"])
        self.counters.iterations = int(state["iterations"])
        # Checkpoints of earlier versions do not say: their last evaluation counts as done.
        self.counters.evaluated = int(state.get("evaluated", self.counters.iterations))
        self.resumed_from = self.counters.env_steps
        legacy = "ranks" not in state  # version 0.1.0 kept one flat state: rank 0's
        ranks = [state] if legacy else state["ranks"]
        saved_world = int(state.get("world_size", 1))
        if saved_world != self.world_size or len(ranks) != self.world_size:
            if saved_world != self.world_size:
                self.check_world_size_change(saved_world, ranks)
                why = f"The checkpoint was written by {saved_world} rank(s), this run has {self.world_size}"
            else:
                why = "The checkpoint (an older format) holds rank 0's state only"
            warnings.warn(
                f"{why}: counters and the step budget continue, and every rank restarts its RNG streams from "
                "the seed and the env-step count.",
                stacklevel=2,
            )
            offset = self.hparams.seed + self.counters.env_steps + 104729 * self.rank
            torch.manual_seed(offset)
            np.random.seed(offset % 2**32)
            random.seed(offset)
            self.load_rank_state_dict(None)
            return
        mine = ranks[self.rank]
        torch.set_rng_state(mine["torch_rng"])
        kind, keys, pos, has_gauss, gauss = mine["numpy_rng"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
        random.setstate(mine["python_rng"])
        self.load_rank_state_dict(mine)

    def rank_state_dict(self) -> dict[str, Any]:
        """This rank's own data-stream state (subclasses: shuffling RNG, pending observations, buffer)."""
        return {}

    def load_rank_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore what :meth:`rank_state_dict` saved; ``None`` after a change of world size."""

    def check_world_size_change(self, saved_world: int, ranks: list[dict[str, Any]]) -> None:
        """Raise if the saved per-rank state ``ranks`` cannot resume on another number of ranks."""

    def close(self) -> None:
        """Close every environment."""
        for envs in [self.train_envs, *self.eval_envs.values()]:
            if envs is not None:
                envs.close()
        self.train_envs, self.eval_envs = None, {}


def last_collection(trainer: pl.Trainer | None) -> CollectionMetrics | None:
    """The trainer's data module's :attr:`EnvDataModule.last_collection` (``None`` with another data module)."""
    datamodule = trainer.datamodule if trainer is not None else None
    return datamodule.last_collection if isinstance(datamodule, EnvDataModule) else None


def collected_since(trainer: pl.Trainer | None, logged: CollectionMetrics | None) -> bool:
    """Whether the trainer's data module finished a collection after ``logged`` (the one whose row was logged last).

    An epoch that a resume restores after its row was logged (Lightning reruns the end of an
    epoch cut inside its evaluation) has none, and must not log its row twice. With another
    data module, whose collections are not known, every epoch counts as new.
    """
    datamodule = trainer.datamodule if trainer is not None else None
    return not isinstance(datamodule, EnvDataModule) or datamodule.last_collection is not logged
