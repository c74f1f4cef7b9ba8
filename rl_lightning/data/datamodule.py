"""``RolloutDataModule``: training and evaluation data for on-policy algorithms."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from tensordict import TensorDict
from torch.utils.data import DataLoader

from rl_lightning.checks import check_positive_int
from rl_lightning.data.base import EnvDataModule, identity_collate, renamed_env_argument
from rl_lightning.data.device_rollout import DeviceRolloutDataset
from rl_lightning.data.protocol import OnPolicyLearner
from rl_lightning.data.recurrent_rollout import RecurrentRolloutDataset
from rl_lightning.data.rollout import RolloutDataset, UpdatePlan, take_plan_settings
from rl_lightning.envs.obs import leaves
from rl_lightning.envs.tensor_group import TensorEnvGroup

#: Learning settings this data module took before they moved to the algorithm (``PPO(gamma=...)``).
#: (``UpdatePlan``'s ``bptt_length`` came later, on the algorithm only.)
MOVED_TO_ALGORITHM = ("gamma", "gae_lambda", "update_epochs", "num_minibatches")


class RolloutDataModule(EnvDataModule):
    """Rollout-backed training data and evaluation on every object set.

    One training epoch is one rollout of ``rollout_steps x num_envs`` transitions per rank,
    prepared by the algorithm's :class:`~rl_lightning.data.rollout.UpdatePlan` (GAE's
    ``gamma`` and ``gae_lambda``, ``update_epochs x num_minibatches`` minibatches: learning
    settings, so ``PPO`` takes them); this module says how experience is gathered. Validation and test
    run one dataloader per evaluation object set; their metrics are prefixed ``eval/``
    (training set) and ``eval_ood/`` (``test`` set).

    Args:
        env_id: Gymnasium env id.
        num_envs: Training envs per rank.
        rollout_steps: Steps per env per rollout.
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
        wrappers: Gymnasium wrappers for every env of the run, as specs (``{"wrapper": path, **arguments}``;
            :mod:`rl_lightning.envs.wrappers`; Hydra ``env.wrappers``).
        backend: ``"gymnasium"`` (default), ``"envpool"`` (EnvPool's batch, on the tensor path) or
            ``"torch"``: the batched torch env of ``env_id``
            on the Trainer's device, whose rollouts stay there
            (:class:`~rl_lightning.data.device_rollout.DeviceRolloutDataset`; Hydra ``env.backend``).
        env_factory: With ``backend="torch"``, a user's batched env by import path (see
            :class:`~rl_lightning.data.base.EnvDataModule`; Hydra ``env.env_factory``).
        env: Deprecated name of ``env_id`` (warns, for one release).
        update_epochs, num_minibatches, gamma, gae_lambda: Deprecated: the algorithm's
            (``PPO(gamma=...)``). Given here, they warn and override the algorithm's for one
            release (checkpoints of earlier versions hold them in the data module's settings).
    """

    #: Old names: ``env`` (now ``env_id``), and the algorithm's settings (Lightning refuses to log a
    #: key both modules hold with other values).
    unsaved_args = ("env", *MOVED_TO_ALGORITHM)

    def __init__(
        self,
        env_id: str = "CartPole-v1",
        num_envs: int = 4,
        rollout_steps: int = 128,
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
        wrappers: Sequence[Any] | None = None,
        backend: str = "gymnasium",
        env_factory: str | None = None,
        update_epochs: int | None = None,
        num_minibatches: int | None = None,
        gamma: float | None = None,
        gae_lambda: float | None = None,
        env: str | None = None,
    ):
        env_id = renamed_env_argument("RolloutDataModule", env_id, env, default="CartPole-v1")
        check_positive_int(rollout_steps=rollout_steps)
        given = dict(update_epochs=update_epochs, num_minibatches=num_minibatches, gamma=gamma, gae_lambda=gae_lambda)
        moved = {name: value for name, value in given.items() if value is not None}
        if moved:
            listed = ", ".join(f"{name}={value!r}" for name, value in moved.items())
            warnings.warn(
                f"RolloutDataModule({listed}): these are the algorithm's settings now; pass PPO({listed}) "
                f"(Hydra: algo.{next(iter(moved))}=...; CLI: --model.{next(iter(moved))}). Until the next release "
                "the values given here override the algorithm's (its update_plan and saved settings take them "
                "when training starts).",
                DeprecationWarning,
                stacklevel=2,
            )
            UpdatePlan(**moved)  # refuse a bad value now, naming it
        #: Deprecated settings given to this module, which override the algorithm's plan.
        self.plan_overrides = moved
        super().__init__(
            env_id,
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
            wrappers=wrappers,
            backend=backend,
            env_factory=env_factory,
        )
        self.generator = torch.Generator().manual_seed(seed)
        self._train_dataset: RolloutDataset | None = None
        self._pending_obs: torch.Tensor | None = None

    @property
    def steps_per_epoch(self) -> int:
        """Environment steps one epoch takes, summed over ranks."""
        return self.hparams.rollout_steps * self.hparams.num_envs * self.world_size

    def setup(self, stage: str) -> None:
        """Build the envs (:meth:`EnvDataModule.setup`); hand deprecated learning settings to the algorithm.

        Settings given here the old way override the algorithm's for one release: its
        ``update_plan`` and its saved settings take them, so logs and checkpoints say what ran.
        """
        module = self.trainer.lightning_module if self.trainer is not None else None
        if self.plan_overrides and isinstance(module, OnPolicyLearner):
            take_plan_settings(module, self.plan_overrides)
        super().setup(stage)

    def update_plan(self) -> UpdatePlan:
        """The algorithm's :class:`UpdatePlan`: how this module's rollouts are prepared.

        Raises:
            TypeError: The algorithm is not an on-policy learner (it has no ``update_plan``).
        """
        module = self.trainer.lightning_module if self.trainer is not None else None
        if not isinstance(module, OnPolicyLearner):
            raise TypeError(
                f"RolloutDataModule prepares rollouts for an on-policy algorithm with an update_plan (PPO); "
                f"{type(module).__name__} has none. Train it on the data module it names (its datamodule_class)."
            )
        return module.update_plan

    def train_dataloader(self) -> DataLoader:
        """The rollout stream: one rollout and its minibatches per epoch."""
        hp = self.hparams
        if self._train_dataset is None:
            stream = DeviceRolloutDataset if isinstance(self.train_envs, TensorEnvGroup) else RolloutDataset
            learner = getattr(self.trainer.lightning_module, "policy", None)
            if hasattr(learner, "initial_state") and self._policy() is not learner:
                raise ValueError(
                    "A recurrent policy (algo.recurrent=true) acts with its own state; an acting copy (ActorSync, "
                    "callbacks=split_actor) of it is not supported in this version. Drop the ActorSync callback, or "
                    "set algo.recurrent=false."
                )
            if hasattr(self._policy(), "initial_state"):  # a policy with memory: rollouts carry its state
                if stream is DeviceRolloutDataset:
                    raise ValueError(
                        "A recurrent policy (algo.recurrent=true) collects on the gymnasium backend in this version; "
                        "the tensor path (env.backend=torch or envpool) has no recurrent rollout yet. Set "
                        "env.backend=gymnasium, or algo.recurrent=false."
                    )
                stream = RecurrentRolloutDataset
            self._train_dataset = stream(
                self.train_envs,
                self._policy(),
                hp.rollout_steps,
                self.update_plan(),
                self.counters,
                self.generator,
                # A resumed run restarts its episodes with fresh seeds (offset by the steps done).
                reset_seed=hp.seed + self.rank * hp.num_envs + self.counters.env_steps,
                world_size=self.world_size,
            )
            self._train_dataset.pending_obs = self._pending_obs
        else:  # a later fit with this data module: act and plan as the algorithm does now
            self._train_dataset.set_learner(self._policy(), self.update_plan())
        return DataLoader(self._train_dataset, batch_size=None, collate_fn=identity_collate)

    # ---------------------------------------------------------------- checkpointing
    def rank_state_dict(self) -> dict[str, Any]:
        """This rank's shuffling RNG and the observations waiting to update the normalizer."""
        pending = self._train_dataset.pending_obs if self._train_dataset is not None else self._pending_obs
        if isinstance(pending, TensorDict):  # plain tensors, so the checkpoint loads with weights_only=True
            pending = pending.to_dict()
        elif pending is not None:  # the tensor path's, on its device: the file loads on any machine
            pending = pending.cpu()
        return {"shuffle_rng": self.generator.get_state(), "pending_obs": pending}

    def load_rank_state_dict(self, state: dict[str, Any] | None) -> None:
        """Restore shuffling and pending observations (after a world-size change: none pending)."""
        if state is not None:
            self.generator.set_state(state["shuffle_rng"])
        self._pending_obs = None if state is None else state["pending_obs"]
        if isinstance(self._pending_obs, dict):
            self._pending_obs = TensorDict(self._pending_obs, batch_size=leaves(self._pending_obs)[0].shape[:1])
        if self._train_dataset is not None:
            self._train_dataset.pending_obs = self._pending_obs
