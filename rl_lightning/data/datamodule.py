"""``RolloutDataModule``: training and evaluation data for on-policy algorithms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from rl_lightning.data.base import EnvDataModule, check_positive_int, check_unit_interval, identity_collate
from rl_lightning.data.rollout import RolloutDataset


class RolloutDataModule(EnvDataModule):
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
        max_env_restarts: Times in a row one env may be recreated after raising (or the async
            workers rebuilt after one died) without an episode finishing in between; one
            more stops the run with ``EnvFault``. 0 never recreates.
        obs_bound: Bound on the absolute value of observations; ``None`` checks only that
            they are finite (the algorithm's ``on_nonfinite`` decides what a NaN does).
        obs_bound_mode: ``"clip"`` observations to the bound (counted), or ``"reject"`` them
            like non-finite ones.
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
        max_env_restarts: int = 3,
        obs_bound: float | None = None,
        obs_bound_mode: str = "clip",
    ):
        for name in ("rollout_steps", "update_epochs", "num_minibatches"):
            check_positive_int(name, locals()[name])
        check_unit_interval("gamma", gamma)
        check_unit_interval("gae_lambda", gae_lambda)
        if isinstance(num_envs, int) and (rollout_steps * num_envs) % num_minibatches:
            raise ValueError(
                f"num_minibatches={num_minibatches} does not divide the rollout of rollout_steps x "
                f"num_envs = {rollout_steps} x {num_envs} = {rollout_steps * num_envs} transitions; "
                "choose a divisor so every minibatch has the same size."
            )
        super().__init__(
            env,
            num_envs,
            obj_sets,
            train_obj_set,
            eval_obj_sets,
            max_episode_steps,
            vectorization,
            seed,
            eval_interval,
            eval_episodes,
            eval_num_envs,
            eval_deterministic,
            eval_max_episode_steps,
            max_env_restarts=max_env_restarts,
            obs_bound=obs_bound,
            obs_bound_mode=obs_bound_mode,
        )
        self.generator = torch.Generator().manual_seed(seed)
        self._train_dataset: RolloutDataset | None = None
        self._pending_obs: torch.Tensor | None = None

    @property
    def steps_per_epoch(self) -> int:
        """Environment steps one epoch takes, summed over ranks."""
        return self.hparams.rollout_steps * self.hparams.num_envs * self.world_size

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
        else:  # a later fit with this data module: act with what the algorithm acts with now
            self._train_dataset.set_policy(self._policy())
        return DataLoader(self._train_dataset, batch_size=None, collate_fn=identity_collate)

    # ---------------------------------------------------------------- checkpointing
    def rank_state_dict(self) -> dict[str, Any]:
        """This rank's shuffling RNG and the observations waiting to update the normalizer."""
        pending = self._train_dataset.pending_obs if self._train_dataset is not None else self._pending_obs
        return {"shuffle_rng": self.generator.get_state(), "pending_obs": pending}

    def load_rank_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore shuffling and pending observations (after a world-size change: none pending)."""
        if state is not None:
            self.generator.set_state(state["shuffle_rng"])
        self._pending_obs = None if state is None else state["pending_obs"]
        if self._train_dataset is not None:
            self._train_dataset.pending_obs = self._pending_obs
