"""``RolloutDataModule``: training and evaluation data for on-policy algorithms."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rl_lightning.checks import check_positive_int
from rl_lightning.data.base import EnvDataModule
from rl_lightning.data.rollout import RolloutDataset
from rl_lightning.envs.gymnasium_env import WORKER_TIMEOUT
from rl_lightning.envs.torchrl_env import EnvFactory


class RolloutDataModule(EnvDataModule):
    """Rollout-backed training data and evaluation on every object set.

    One training epoch is one rollout of ``rollout_steps x num_envs`` transitions per rank
    (:class:`~rl_lightning.data.rollout.RolloutDataset`); the algorithm turns it into advantages and minibatches. This
    module says only how experience is gathered. Validation and test yield a batch per evaluation object set (when due),
    whose metrics are prefixed ``eval/`` (training set) and ``eval_ood/`` (``test`` set).

    Args:
        rollout_steps: Steps per env per rollout.
        env_id, num_envs, obj_sets, train_obj_set, eval_obj_sets, max_episode_steps, vectorization,
        seed, eval_interval, eval_episodes, eval_num_envs, eval_deterministic, eval_max_episode_steps,
        max_env_restarts, obs_bound, obs_bound_mode, on_nonfinite, wrappers, backend, env_factory,
        worker_start_method, worker_timeout:
            The envs, their object sets and their evaluation (:class:`~rl_lightning.data.base.EnvDataModule`).
    """

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
        on_nonfinite: str = "stop",
        wrappers: Sequence[Any] | None = None,
        backend: str = "gymnasium",
        env_factory: EnvFactory | str | None = None,
        worker_start_method: str | None = None,
        worker_timeout: float = WORKER_TIMEOUT,
    ):
        check_positive_int(rollout_steps=rollout_steps)
        super().__init__(
            env_id, num_envs, obj_sets, train_obj_set, eval_obj_sets, max_episode_steps, vectorization, seed,
            eval_interval, eval_episodes, eval_num_envs, eval_deterministic, eval_max_episode_steps, max_env_restarts,
            obs_bound, obs_bound_mode, on_nonfinite, wrappers, backend, env_factory, worker_start_method,
            worker_timeout,
        )  # fmt: skip

    @property
    def env_steps_per_epoch(self) -> int:
        """Environment steps one epoch takes, summed over ranks."""
        return self.hparams.rollout_steps * self.hparams.num_envs * self.world_size

    def _train_stream(self, reset_seed: int) -> RolloutDataset:
        """The rollout stream: one rollout per epoch."""
        return RolloutDataset(
            self.train_envs, self._policy(), self.hparams.rollout_steps, self.counters, reset_seed, self.world_size
        )
