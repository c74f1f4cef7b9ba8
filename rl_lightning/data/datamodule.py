"""``RolloutDataModule``: training and evaluation data for on-policy algorithms."""

from __future__ import annotations

import dataclasses
import random
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch.utils.data import DataLoader

from rl_lightning.data.evaluation import EvaluationDataset
from rl_lightning.data.rollout import RolloutCounters, RolloutDataset
from rl_lightning.envs import EnvGroup, check_env_id, resolve_object_sets
from rl_lightning.envs.env_group import VECTORIZATION

# The rollout must run in the trainer's process, next to the policy it acts with, and its
# length is exact: Lightning's advice to add dataloader workers does not apply here.
warnings.filterwarnings("ignore", ".*does not have many workers.*")
warnings.filterwarnings("ignore", ".*IterableDataset.*has .__len__. defined.*")


def _identity(batch):
    """Collate function that passes batches through (``default_convert`` breaks TensorDicts)."""
    return batch


def _check_positive_int(name: str, value: Any) -> None:
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name} must be a positive integer, got {value!r}.")


def _check_unit_interval(name: str, value: Any) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}.")


def _numpy_state_to_plain(state: tuple) -> tuple:
    """numpy's legacy RNG state with its key array as a list (loads with ``weights_only``)."""
    kind, keys, pos, has_gauss, gauss = state
    return kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)


def eval_prefix(obj_set: str, train_obj_set: str) -> str:
    """Metric prefix of an object set: ``eval`` for the training set, ``eval_ood`` for ``test``."""
    if obj_set == train_obj_set:
        return "eval"
    return "eval_ood" if obj_set == "test" else f"eval_{obj_set}"


class RolloutDataModule(pl.LightningDataModule):
    """Rollout-backed training data and evaluation on every object set.

    One training epoch is one rollout of ``rollout_steps x num_envs`` transitions per rank,
    followed by ``update_epochs x num_minibatches`` minibatches of it. Validation and test
    run one dataloader per evaluation object set; their metrics are prefixed ``eval/``
    (training set) and ``eval_ood/`` (``test`` set).

    Args:
        env: Gymnasium env id.
        num_envs: Training envs per rank.
        rollout_steps: Steps per env per rollout.
        update_epochs: Passes over each rollout.
        num_minibatches: Minibatches per pass; must divide ``rollout_steps * num_envs``.
        gamma: Discount factor.
        gae_lambda: GAE's lambda.
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
    """

    def __init__(
        self,
        env: str = "CartPole-v1",
        num_envs: int = 4,
        rollout_steps: int = 128,
        update_epochs: int = 4,
        num_minibatches: int = 4,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
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
    ):
        super().__init__()
        check_env_id(env)
        for name in ("num_envs", "rollout_steps", "update_epochs", "num_minibatches", "eval_interval", "eval_episodes"):
            _check_positive_int(name, locals()[name])
        for name in ("max_episode_steps", "eval_max_episode_steps", "eval_num_envs"):
            if locals()[name] is not None:
                _check_positive_int(name, locals()[name])
        _check_unit_interval("gamma", gamma)
        _check_unit_interval("gae_lambda", gae_lambda)
        if (rollout_steps * num_envs) % num_minibatches:
            raise ValueError(
                f"num_minibatches={num_minibatches} does not divide the rollout of rollout_steps x "
                f"num_envs = {rollout_steps} x {num_envs} = {rollout_steps * num_envs} transitions; "
                "choose a divisor so every minibatch has the same size."
            )
        if vectorization not in VECTORIZATION:
            raise ValueError(f"vectorization must be one of {VECTORIZATION}, got {vectorization!r}.")
        if isinstance(eval_obj_sets, str):
            eval_obj_sets = [eval_obj_sets]
        self.obj_sets = resolve_object_sets(env, obj_sets)
        for name in [train_obj_set, *eval_obj_sets]:
            if name not in self.obj_sets:
                raise ValueError(
                    f"Unknown object set '{name}' for {env}; available: {sorted(self.obj_sets)}. "
                    "Pick one of those or add it to obj_sets."
                )
        self.save_hyperparameters(ignore=["obj_sets"])
        # Stored as plain dicts so checkpoints load with weights_only=True.
        self.hparams["obj_sets"] = {k: [dataclasses.asdict(v) for v in vs] for k, vs in self.obj_sets.items()}
        self.counters = RolloutCounters()
        self.generator = torch.Generator().manual_seed(seed)
        self.rank, self.world_size = 0, 1
        self.train_envs: EnvGroup | None = None
        self.eval_envs: dict[str, EnvGroup] = {}
        self._train_dataset: RolloutDataset | None = None
        self._pending_obs: torch.Tensor | None = None

    # ---------------------------------------------------------------- environments
    def _env_group(self, obj_set: str, num_envs: int, seed: int, max_episode_steps: int | None) -> EnvGroup:
        hp = self.hparams
        return EnvGroup(
            hp.env,
            num_envs,
            obj_set=obj_set,
            obj_sets=self.obj_sets,
            max_episode_steps=max_episode_steps,
            vectorization=hp.vectorization,
            seed=seed,
        )

    def setup(self, stage: str) -> None:
        """Build the envs this stage needs (once); training envs only for ``fit``."""
        hp = self.hparams
        if self.trainer is not None:
            self.rank, self.world_size = self.trainer.global_rank, self.trainer.world_size
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
    def steps_per_epoch(self) -> int:
        """Environment steps one epoch takes, summed over ranks."""
        return self.hparams.rollout_steps * self.hparams.num_envs * self.world_size

    @property
    def last_rollout(self):
        """Metrics of the most recent rollout (``None`` before the first)."""
        return None if self._train_dataset is None else self._train_dataset.last_metrics

    # ---------------------------------------------------------------- dataloaders
    def _policy(self):
        return self.trainer.lightning_module.policy

    def train_dataloader(self) -> DataLoader:
        """The rollout stream: one rollout and its minibatches per epoch."""
        hp = self.hparams
        if self._train_dataset is None:
            self._train_dataset = RolloutDataset(
                self.train_envs,
                self._policy(),
                hp.rollout_steps,
                hp.update_epochs,
                hp.num_minibatches,
                hp.gamma,
                hp.gae_lambda,
                self.counters,
                self.generator,
                # A resumed run restarts its episodes with fresh seeds (offset by the steps done).
                reset_seed=hp.seed + self.rank * hp.num_envs + self.counters.env_steps,
                world_size=self.world_size,
            )
            self._train_dataset.pending_obs = self._pending_obs
        return DataLoader(self._train_dataset, batch_size=None, collate_fn=_identity)

    def _eval_loaders(self, gated: bool) -> list[DataLoader]:
        hp = self.hparams

        def should_run() -> bool:
            trainer = self.trainer
            # The interval applies inside fit; trainer.validate() on its own always evaluates.
            if not gated or trainer is None or trainer.state.fn != TrainerFn.FITTING:
                return True
            if trainer.sanity_checking:
                return False
            return (trainer.current_epoch + 1) % hp.eval_interval == 0

        share = hp.eval_episodes // self.world_size + (self.rank < hp.eval_episodes % self.world_size)
        loaders = []
        for obj_set, envs in self.eval_envs.items():
            dataset = EvaluationDataset(
                envs,
                self._policy,
                share,
                eval_prefix(obj_set, hp.train_obj_set),
                deterministic=hp.eval_deterministic,
                seed=envs.seed,
                should_run=should_run,
            )
            loaders.append(DataLoader(dataset, batch_size=None, collate_fn=_identity))
        return loaders

    def val_dataloader(self) -> list[DataLoader]:
        """One loader per evaluation object set; runs every ``eval_interval`` epochs."""
        return self._eval_loaders(gated=True)

    def test_dataloader(self) -> list[DataLoader]:
        """One loader per evaluation object set; always runs (the final evaluation)."""
        return self._eval_loaders(gated=False)

    # ---------------------------------------------------------------- checkpointing
    def state_dict(self) -> dict[str, Any]:
        """Counters, RNG states and the observations waiting to update the normalizer."""
        pending = self._train_dataset.pending_obs if self._train_dataset is not None else self._pending_obs
        return {
            "env_steps": self.counters.env_steps,
            "iterations": self.counters.iterations,
            "world_size": self.world_size,
            "shuffle_rng": self.generator.get_state(),
            "torch_rng": torch.get_rng_state(),
            "numpy_rng": _numpy_state_to_plain(np.random.get_state()),
            "python_rng": random.getstate(),
            "pending_obs": pending,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore counters and RNG states; envs restart their episodes."""
        self.counters.env_steps = int(state["env_steps"])
        self.counters.iterations = int(state["iterations"])
        self.generator.set_state(state["shuffle_rng"])
        torch.set_rng_state(state["torch_rng"])
        kind, keys, pos, has_gauss, gauss = state["numpy_rng"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
        random.setstate(state["python_rng"])
        self._pending_obs = state["pending_obs"]
        if self._train_dataset is not None:
            self._train_dataset.pending_obs = self._pending_obs

    def close(self) -> None:
        """Close every environment."""
        for envs in [self.train_envs, *self.eval_envs.values()]:
            if envs is not None:
                envs.close()
        self.train_envs, self.eval_envs = None, {}
