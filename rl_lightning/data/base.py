"""``EnvDataModule``: what every data module shares: envs per object set, evaluation, counters, RNG state.

Subclasses add the training stream: :class:`~rl_lightning.data.datamodule.RolloutDataModule` (on-policy
rollouts) and :class:`~rl_lightning.data.replay_datamodule.ReplayDataModule` (replay, off-policy).
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
from torch.utils.data import ChainDataset, DataLoader

from rl_lightning.checks import check_bool, check_positive_int, check_seed
from rl_lightning.data.collection import CollectionMetrics, DataCounters
from rl_lightning.data.evaluation import EvaluationDataset, episodes_per_env
from rl_lightning.envs import EnvGroup, check_env_id, make_env, resolve_obj_sets
from rl_lightning.envs.env_group import check_env_settings
from rl_lightning.envs.torchrl_env import FACTORY_EXAMPLE, EnvFactory, factory_path, user_factory
from rl_lightning.spaces import describe

# The data streams must run in the trainer's process, next to the policy they act with,
# and their length is exact: Lightning's advice to add dataloader workers does not apply.
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*IterableDataset.*has .__len__. defined.*")
# The streams are resumable through the data module's own state (env-step position, the chunk cut
# short): Lightning's warning about resuming mid-epoch, which reads only the DataLoader, does not apply.
warnings.filterwarnings("ignore", ".*resuming from a checkpoint that ended before the epoch ended.*")
# Lightning's own use of a torch API that torch 2.13 deprecates: nothing a user can act on.
warnings.filterwarnings("ignore", r".*isinstance\(treespec, LeafSpec\)` is deprecated")


#: Validation's reset seeds start this far from the run's seed, the final test's TEST_SEED_OFFSET further;
#: training's stay below (a resumed run's wrap there however many env steps it has taken).
EVAL_SEED_OFFSET, TEST_SEED_OFFSET = 1_000_000, 500_000


def identity_collate(batch):
    """Collate function that passes batches through (``default_convert`` breaks TensorDicts)."""
    return batch


def eval_prefix(obj_set: str, train_obj_set: str) -> str:
    """Metric prefix of an object set: ``eval`` for the training set, ``eval_ood`` for ``test``."""
    return "eval" if obj_set == train_obj_set else "eval_ood" if obj_set == "test" else f"eval_{obj_set}"


class EnvDataModule(pl.LightningDataModule):
    """Envs for every object set, the evaluation loader, progress counters and RNG state.

    Subclasses implement ``_train_stream`` (the training stream) and :attr:`env_steps_per_epoch`, and extend
    :meth:`rank_state_dict` / :meth:`load_rank_state_dict` with their stream's own state.

    Args:
        env_id: Gymnasium env id (or the id a user's ``env_factory`` builds).
        num_envs: Training envs per rank.
        obj_sets: Object sets (name -> list of variations); ``None`` takes the shipped ones.
        train_obj_set: The set training episodes are drawn from.
        eval_obj_sets: Sets evaluated at validation and test time.
        max_episode_steps: Time limit for training envs; ``None`` keeps the registered one.
        vectorization: ``"sync"`` or ``"async"`` (the gymnasium backend).
        seed: Base seed; rank ``r``'s env ``i`` is seeded with ``seed + r * num_envs + i``.
        eval_interval: Evaluate every this many epochs (within the Trainer's own
            ``check_val_every_n_epoch``, which should stay 1).
        eval_episodes: Episodes per object set per evaluation (split over ranks).
        eval_num_envs: Envs per evaluation group; ``None`` takes ``min(eval_episodes, 8)``.
        eval_deterministic: Evaluate the mode of the policy rather than samples.
        eval_max_episode_steps: Time limit for evaluation envs; ``None`` keeps the registered one.
        max_env_restarts: How many times in a row one env may be recreated after raising in ``step`` or ``reset`` (or
            the async workers rebuilt after one died) without an episode finishing in between; one more stops the run
            with :class:`~rl_lightning.faults.EnvFault`. 0 never recreates. Logged as ``rollout/env_restarts``.
        obs_bound: Bound on the absolute value of observations; ``None`` checks only that they are finite.
        obs_bound_mode: ``"clip"``: clip observations to ``[-obs_bound, obs_bound]`` (counted in
            ``rollout/obs_clipped``); ``"reject"``: treat a value outside the bound like a non-finite one.
        on_nonfinite: A non-finite (or rejected) observation or reward: ``"stop"`` ends the run with a message naming
            the env and the value; ``"skip"`` cuts that env's episode short (counted in ``rollout/nonfinite_steps``; the
            gymnasium backend). The algorithm's own ``on_nonfinite`` answers a NaN in a loss or gradient.
        wrappers: Gymnasium wrappers applied to every env of the run (training, evaluation,
            videos, ``play``), after ``gymnasium.make``: import paths or mappings
            ``{"wrapper": path, **arguments}`` (:mod:`rl_lightning.envs.wrappers`); kept in checkpoints.
        backend: What steps the envs: ``"gymnasium"`` (one gymnasium env per index), ``"torch"``
            (a batched torch env on the Trainer's device: the library's own of ``env_id``, or
            ``env_factory``'s) or ``"envpool"`` (EnvPool's C++ batch); see :class:`~rl_lightning.envs.EnvGroup`.
        env_factory: With ``backend="torch"``: a user's simulator, a function ``(env_id, num_envs,
            device, seed, max_episode_steps)`` returning a batched env (a gymnasium ``VectorEnv`` of
            tensors or a batched torchrl ``EnvBase``), or its import path; kept in checkpoints by its
            import path (:mod:`rl_lightning.envs.torchrl_env`). Hydra ``env.env_factory``.
        worker_start_method: How async workers start (``vectorization="async"``): ``"fork"``, ``"forkserver"``
            or ``"spawn"``; ``None``: fork on Linux (the cheapest), the platform's default elsewhere. A simulator
            that cannot run in a forked process (ManiSkill3's SAPIEN) needs ``"forkserver"`` or ``"spawn"``.
        worker_timeout: Seconds async workers may take to start or answer a reset or step; past it the run
            stops with :class:`~rl_lightning.faults.EnvFault` (``last.ckpt`` and the resume command), never hangs.
    """

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
        max_env_restarts: int,
        obs_bound: float | None,
        obs_bound_mode: str,
        on_nonfinite: str,
        wrappers: Sequence[Any] | None,
        backend: str,
        env_factory: EnvFactory | str | None,
        worker_start_method: str | None,
        worker_timeout: float,
    ):
        super().__init__()
        self._env_factory = env_factory
        if env_factory is not None:
            env_factory = factory_path(env_factory)  # what checkpoints keep (a lambda is refused here)
            user_factory(self._env_factory)  # a path that does not import is refused now, naming it
            if env_factory.startswith("__main__."):  # importable again by this script only
                warnings.warn(
                    f"env_factory is kept in checkpoints as {env_factory}: a resume from this script finds it, but "
                    f"`rl-lightning test` and `play` of those checkpoints do not. Define it in a module of yours "
                    f"(e.g. {FACTORY_EXAMPLE}) and import it from there.",
                    stacklevel=3,
                )
        wrappers = check_env_settings(env_id, num_envs, max_episode_steps, backend, env_factory, vectorization,
                                      max_env_restarts, obs_bound, obs_bound_mode, on_nonfinite, wrappers,
                                      worker_start_method, worker_timeout)  # fmt: skip
        check_positive_int(eval_interval=eval_interval, eval_episodes=eval_episodes)
        check_seed(seed)
        check_bool(eval_deterministic=eval_deterministic)
        check_positive_int(none="None", eval_max_episode_steps=eval_max_episode_steps, eval_num_envs=eval_num_envs)
        if isinstance(eval_obj_sets, str):
            eval_obj_sets = [eval_obj_sets]
        self.obj_sets = resolve_obj_sets(env_id, obj_sets)
        for key, name in [("train_obj_set", train_obj_set), *(("eval_obj_sets", name) for name in eval_obj_sets)]:
            if not isinstance(name, str) or name not in self.obj_sets:
                raise ValueError(
                    f"{key}: unknown object set {name!r} for {env_id}; available: {sorted(self.obj_sets)}. Pick one of "
                    "those (train_obj_set takes one name, eval_obj_sets a list of them) or add it to obj_sets."
                )
        for name in dict.fromkeys([train_obj_set, *eval_obj_sets]) if backend == "gymnasium" else ():
            try:  # a variation's own env id, refused before any env is built
                for other in {v.env_id for v in self.obj_sets[name]} - {env_id}:
                    check_env_id(other)
            except ValueError as err:
                raise ValueError(f"obj_sets.{name}: a variation's env_id: {err}") from None
        # Collects the subclass's constructor arguments too (Lightning walks the __init__ frames).
        self.save_hyperparameters(ignore=["obj_sets"])
        self.hparams["eval_obj_sets"] = list(eval_obj_sets)
        self.hparams["wrappers"] = wrappers  # plain specs (a Hydra ListConfig becomes a list)
        self.hparams["env_factory"] = env_factory  # its import path
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
        self.train_dataset = None

    # ---------------------------------------------------------------- environments
    def _env_group(self, obj_set: str, num_envs: int, seed: int, max_episode_steps: int | None) -> EnvGroup:
        hp = self.hparams
        device = self.trainer.strategy.root_device if self.trainer is not None else torch.device("cpu")
        return EnvGroup(
            hp.env_id, num_envs, obj_set, self.obj_sets, max_episode_steps, seed, device, hp.backend,
            self._env_factory, hp.vectorization, None, hp.max_env_restarts, hp.obs_bound, hp.obs_bound_mode,
            hp.on_nonfinite, hp.wrappers, hp.worker_start_method, hp.worker_timeout,
        )  # fmt: skip

    def setup(self, stage: str) -> None:
        """Build the envs this stage needs (once); training envs only for ``fit``."""
        hp = self.hparams
        if self.trainer is not None:
            self.rank, self.world_size = self.trainer.global_rank, self.trainer.world_size
        if hp.eval_episodes < self.world_size:
            raise ValueError(f"eval_episodes={hp.eval_episodes} is smaller than the {self.world_size} ranks; "
                             "give every rank at least one evaluation episode.")  # fmt: skip
        if stage == "fit" and self.train_envs is None:
            self.train_envs = self._env_group(
                hp.train_obj_set, hp.num_envs, hp.seed + self.rank * hp.num_envs, hp.max_episode_steps
            )
        if not self.eval_envs:
            eval_envs = hp.eval_num_envs or min(hp.eval_episodes, 8)
            for obj_set in hp.eval_obj_sets:
                # Evaluation seeds are far from training seeds; the object sets' own seed
                # ranges decide which episodes are drawn.
                seed = hp.seed + EVAL_SEED_OFFSET + self.rank * eval_envs
                self.eval_envs[obj_set] = self._env_group(obj_set, eval_envs, seed, hp.eval_max_episode_steps)
        self._check_same_spaces()

    def _check_same_spaces(self) -> None:
        """One policy acts in every object set's envs: refuse, before any step, a set whose spaces differ (it would
        fail at its first evaluation, after the training before it)."""
        groups = {**({self.hparams.train_obj_set: self.train_envs} if self.train_envs else {}), **self.eval_envs}
        if len(groups) < 2:
            return
        (first, envs), *others = groups.items()
        expected = describe(envs.observation_space, envs.action_space)
        for name, envs in others:
            if (found := describe(envs.observation_space, envs.action_space)) != expected:
                self.close()
                raise ValueError(
                    f"Object set '{name}' builds envs of {found}, but object set '{first}' builds envs of {expected}, "
                    "and one policy acts in both. Give every object set variations whose envs have the same spaces "
                    "(a variation's env_id, make_kwargs or the wrappers change them)."
                )

    @property
    def env_id(self) -> str:
        """The id of the envs this module builds (every object set's variations default to it)."""
        return self.hparams.env_id

    def env_spaces(self) -> tuple[gym.Space, gym.Space]:
        """The observation and action spaces of one training env: what a policy is built for.

        Without training envs (a check before ``fit``; ``test``) a gymnasium env is built to read them: an
        evaluation env's may differ in bounds (a ``TimeAwareObservation`` under ``eval_max_episode_steps``).
        """
        hp = self.hparams
        envs = self.train_envs or (next(iter(self.eval_envs.values()), None) if hp.backend != "gymnasium" else None)
        if envs is not None:
            return envs.observation_space, envs.action_space
        if hp.backend != "gymnasium":
            env = self._env_group(hp.train_obj_set, hp.num_envs, hp.seed, hp.max_episode_steps)
        else:
            env = make_env(self.env_id, hp.train_obj_set, self.obj_sets, hp.max_episode_steps, wrappers=hp.wrappers)
        try:
            return env.observation_space, env.action_space
        finally:
            env.close()

    @property
    def env_steps(self) -> int:
        """Environment steps taken so far, summed over ranks."""
        return self.counters.env_steps

    @property
    def last_collection(self) -> CollectionMetrics | None:
        """Metrics of the most recent epoch's collection (``None`` before the first)."""
        return None if self.train_dataset is None else self.train_dataset.last_collection

    # ---------------------------------------------------------------- dataloaders
    def _policy(self):
        # The acting copy when the algorithm has one (ActorSync), else the policy itself.
        return self.trainer.lightning_module.acting_policy

    def train_dataloader(self) -> DataLoader:
        """The training stream, built once by the subclass's ``_train_stream`` (a later fit: with today's policy)."""
        if self.train_dataset is None:  # a resumed run's episodes restart with fresh seeds (offset by the steps done)
            hp, span = self.hparams, self.hparams.num_envs * self.world_size
            steps = self.env_steps % max(EVAL_SEED_OFFSET - span, 1)  # below the evaluation seeds
            self.train_dataset = self._train_stream(hp.seed + self.rank * hp.num_envs + steps)
        else:
            self.train_dataset.policy = self._policy()
        return DataLoader(self.train_dataset, batch_size=None, collate_fn=identity_collate)

    def _eval_loader(self, gated: bool) -> DataLoader:
        """One loader over every evaluation object set, a batch each: Lightning's evaluation loop starts an iterator per
        loader every epoch (a loader per set took 1.9% of a CartPole fit, one loader 1.0%; docs/speed.md). Lightning's
        ``limit_val_batches``/``limit_test_batches`` count over the sets: 1 (``fast_dev_run``) runs the first alone."""
        hp = self.hparams

        def should_run() -> bool:
            trainer = self.trainer
            # The interval applies inside fit; trainer.validate() on its own always evaluates.
            if not gated or trainer is None or trainer.state.fn != TrainerFn.FITTING:
                return True
            # Counted in collections (rollouts, replay epochs) rather than Lightning's epochs: a resume
            # from a checkpoint written inside an epoch can leave the two one apart, and evaluations
            # must fall on the uninterrupted run's env-step grid (issue 25's fifth defect).
            return not trainer.sanity_checking and self.evaluation_due

        share = episodes_per_env(hp.eval_episodes, self.world_size)[self.rank]
        # The final test draws other episodes than validation (which may have picked best.ckpt): its figures are not
        # the ones a selection was made on.
        datasets = [
            EvaluationDataset(envs, self._policy, share, eval_prefix(obj_set, hp.train_obj_set),
                              deterministic=hp.eval_deterministic, seed=envs.seed + (0 if gated else TEST_SEED_OFFSET),
                              should_run=should_run)
            for obj_set, envs in self.eval_envs.items()
        ]  # fmt: skip
        return DataLoader(ChainDataset(datasets), batch_size=None, collate_fn=identity_collate)

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

    def val_dataloader(self) -> DataLoader:
        """A batch per evaluation object set, every ``eval_interval`` collections."""
        return self._eval_loader(gated=True)

    def test_dataloader(self) -> DataLoader:
        """A batch per evaluation object set, always (the final evaluation)."""
        return self._eval_loader(gated=False)

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Global counters, and every rank's own state (RNG states, a GPU's too; subclasses add theirs).

        Under DDP each rank steps its own envs with its own RNG streams (and, off-policy, fills its own replay buffer
        shard), so the checkpoint keeps one entry per rank: ``ranks[r]``, gathered on rank zero, which writes the file.
        Lightning calls this on every rank when a checkpoint is saved, so the gather is collective.
        """
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        local = {
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": (kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)),  # plain: weights_only loads
            "python_rng": random.getstate(),
            **self.rank_state_dict(),
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # GPU-sampled actions draw from its generator
            local["cuda_rng"] = torch.cuda.get_rng_state()  # the rank's device, which Lightning makes current
        ranks = [local]
        if self.world_size > 1 and dist.is_available() and dist.is_initialized():
            gathered = [None] * self.world_size if self.rank == 0 else None
            dist.gather_object(local, gathered, dst=0, group=self._host_group())
            ranks = gathered if self.rank == 0 else [local]
        return {**dataclasses.asdict(self.counters), "world_size": self.world_size, "ranks": ranks}

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
        for field in dataclasses.fields(self.counters):  # in place: the data streams hold these counters
            setattr(self.counters, field.name, int(state[field.name]))
        self.resumed_from = self.counters.env_steps
        ranks, saved_world = state["ranks"], int(state["world_size"])
        if saved_world != self.world_size:
            self.check_world_size_change(saved_world, ranks)
            warnings.warn(
                f"The checkpoint was written by {saved_world} rank(s), this run has {self.world_size}: counters and "
                "the step budget continue, and every rank restarts its RNG streams from the seed and the env-step "
                "count.",
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
        if "cuda_rng" in mine and torch.cuda.is_available():  # a GPU run resumed on a CPU has no generator to restore
            torch.cuda.set_rng_state(mine["cuda_rng"])
        self.load_rank_state_dict(mine)

    def rank_state_dict(self) -> dict[str, Any]:
        """This rank's own data-stream state (subclasses: shuffling RNG, pending observations, buffer)."""
        return {}

    def load_rank_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore what :meth:`rank_state_dict` saved; ``None`` after a change of world size."""

    def check_resume_state(self, state: dict[str, Any]) -> None:
        """Refuse a saved :meth:`state_dict` this run cannot load, before a fit starts (``check_resume``): none here."""

    def check_world_size_change(self, saved_world: int, ranks: list[dict[str, Any]]) -> None:
        """Raise if the saved per-rank state ``ranks`` cannot resume on another number of ranks."""

    def close(self) -> None:
        """Close every environment; one whose close raises is reported in a warning, and the others are closed."""
        for envs in [self.train_envs, *self.eval_envs.values()]:
            try:
                if envs is not None:
                    envs.close()
            except Exception as err:  # the run's results are in: a simulator failing to close must not cost them
                warnings.warn(f"Closing the {envs.label} failed ({type(err).__name__}: {err}).", stacklevel=2)
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
