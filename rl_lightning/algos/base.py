"""``RLModule``: what every algorithm's LightningModule shares.

It builds the policy from the data module's spaces (or from the spaces stored in a
checkpoint), runs the evaluation steps for every object set, logs the rollout metrics
and adds the env-step budget and interval checkpoints to whatever ``Trainer`` runs it.
"""

from __future__ import annotations

import math
import os
import time
import zipfile
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn

from rl_lightning.callbacks import BestCheckpoint, EnvStepBudget, IntervalCheckpoint
from rl_lightning.data.rollout import to_env_action
from rl_lightning.envs.spaces import space_from_dict, space_to_dict
from rl_lightning.nets.actor_copy import ActorCopy

CHECKPOINT_KEY = "rl_lightning"


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_positive(**values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a positive number (``None`` allowed if given)."""
    for name, value in values.items():
        if value is not None and not (_is_number(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}.")


def check_non_negative(**values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a number >= 0."""
    for name, value in values.items():
        if not (_is_number(value) and value >= 0):
            raise ValueError(f"{name} must be a non-negative number, got {value!r}.")


def check_hidden_sizes(hidden_sizes: Any) -> None:
    """Raise a ``ValueError`` unless ``hidden_sizes`` is a non-empty sequence of positive integers."""
    if (
        not isinstance(hidden_sizes, Sequence)
        or not hidden_sizes
        or any(not isinstance(h, int) or isinstance(h, bool) or h <= 0 for h in hidden_sizes)
    ):
        raise ValueError(f"hidden_sizes must be a non-empty list of positive integers, got {hidden_sizes!r}.")


#: Strategies that refuse (FSDP) or ignore (DeepSpeed) clipping through ``configure_gradient_clipping``.
_NO_HOOK_CLIPPING = {"FSDPStrategy": "refuses", "DeepSpeedStrategy": "ignores"}


def check_clipping_strategy(strategy: Any, max_grad_norm: float | None) -> None:
    """Refuse ``max_grad_norm`` under a strategy that would refuse or silently skip our clipping.

    Raises:
        ValueError: Naming the strategy and the fix, before the first update.
    """
    verdict = _NO_HOOK_CLIPPING.get(type(strategy).__name__)
    if max_grad_norm is not None and verdict is not None:
        raise ValueError(
            f"{type(strategy).__name__} {verdict} the algorithm's gradient clipping (max_grad_norm={max_grad_norm}). "
            "Set algo.max_grad_norm=null; under DeepSpeed, DQN can clip with trainer.gradient_clip_val instead "
            "(PPO and SAC optimize manually, where Lightning refuses the Trainer's clipping)."
        )


def adam(params, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """``torch.optim.Adam``, fused into one kernel per step where the parameters allow it.

    Fused Adam updates all tensors in one pass instead of a loop of small ops: 0.14 ms
    against 0.52 ms per step for PPO's 64x64 actor-critic on one CPU thread, and the same
    numbers to rounding. It needs every parameter to be a floating tensor on CPU or CUDA;
    otherwise (e.g. another accelerator) the default implementation runs.

    Args:
        params: Tensors, or parameter-group dicts (``{"params": [...], "lr": ...}``).
        lr: Learning rate (of groups that set none).
        eps: Adam's epsilon.
    """
    params = list(params)
    groups = params if params and isinstance(params[0], dict) else [{"params": params}]
    tensors = [p for group in groups for p in group["params"]]
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in tensors)
    return torch.optim.Adam(params, lr=lr, eps=eps, fused=fused or None)


class RLModule(pl.LightningModule):
    """Base class of the algorithms (one level of inheritance: ``PPO(RLModule)``).

    Subclasses implement :meth:`build_policy`, ``training_step`` and ``configure_optimizers``.

    Args:
        total_timesteps: Environment-step budget over all ranks; training stops after the
            epoch that reaches it.
        save_interval: Epochs between checkpoints (plus an always-current ``last.ckpt`` and
            ``best.ckpt``, the highest ``eval/return_mean`` so far);
            ``None`` leaves checkpointing to the Trainer's own callbacks.
    """

    #: The data module class this algorithm's training_step expects batches from.
    datamodule_class: type | None = None

    def __init__(self, total_timesteps: int, save_interval: int | None = None):
        super().__init__()
        if not isinstance(total_timesteps, int) or isinstance(total_timesteps, bool) or total_timesteps <= 0:
            raise ValueError(f"total_timesteps must be a positive integer, got {total_timesteps!r}.")
        if save_interval is not None and (not isinstance(save_interval, int) or save_interval <= 0):
            raise ValueError(f"save_interval must be a positive integer or None, got {save_interval!r}.")
        self.total_timesteps = total_timesteps
        self.save_interval = save_interval
        self.policy: nn.Module | None = None
        #: An acting copy of ``policy`` on another device or dtype (set by the ``ActorSync`` callback).
        self.actor: ActorCopy | None = None
        self._spaces: tuple[gym.Space, gym.Space] | None = None
        self._fit_start: tuple[float, int] | None = None
        self._eval_returns: dict[str, float] = {}

    # ---------------------------------------------------------------- policy
    def build_policy(self, observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
        """Return the policy network for these spaces (implemented by each algorithm)."""
        raise NotImplementedError

    def _ensure_policy(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        if self.policy is None:
            self.policy = self.build_policy(observation_space, action_space)
            self._spaces = (observation_space, action_space)
        elif self._spaces != (observation_space, action_space):
            raise ValueError(
                f"The policy was built for observation space {self._spaces[0]} and action space "
                f"{self._spaces[1]}, but the data provides {observation_space} and {action_space}. "
                "Use a data module with the env this model was trained on."
            )

    def setup(self, stage: str) -> None:
        """Build the policy from the data module's env spaces."""
        datamodule = getattr(self.trainer, "datamodule", None)
        if datamodule is None or not hasattr(datamodule, "observation_space"):
            if self.policy is None:
                raise RuntimeError(
                    f"{type(self).__name__} builds its networks from the env of a RolloutDataModule: "
                    "call trainer.fit(model, datamodule=RolloutDataModule(env=...))."
                )
            return
        expected = self.datamodule_class
        if expected is not None and not isinstance(datamodule, expected):
            raise TypeError(
                f"{type(self).__name__} learns from a {expected.__name__}, got a {type(datamodule).__name__}. "
                f"Pass {expected.__name__}(env=...) (with Hydra: the data group that goes with algo="
                f"{type(self).__name__.lower()}, as its experiments set)."
            )
        self._ensure_policy(datamodule.observation_space, datamodule.action_space)

    @property
    def acting_policy(self) -> nn.Module | ActorCopy:
        """What rollouts, replay collection and evaluation act with: the actor copy if any, else ``policy``."""
        return self.policy if self.actor is None else self.actor

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic actions for raw observations ``[B, *obs_shape]``."""
        return self.policy(obs)

    @torch.no_grad()
    def predict(self, obs: np.ndarray | torch.Tensor, deterministic: bool = True) -> np.ndarray:
        """Act on raw observations, batched ``[B, *obs_shape]`` or single; returns env actions.

        Needs no data module: after ``load_from_checkpoint`` this is the deployed policy.
        Box actions are clipped to the action space's bounds.
        """
        obs_space, action_space = self._spaces
        obs_t = torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=self.device)
        single = obs_t.dim() == len(obs_space.shape)
        if single:
            obs_t = obs_t.unsqueeze(0)
        action = to_env_action(self.policy.act(obs_t, deterministic)[0], action_space)
        return action[0] if single else action

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        """Clip to the algorithm's ``max_grad_norm`` unless the Trainer was given its own clipping value.

        Used by automatically optimized algorithms (DQN); PPO and SAC optimize manually and clip by hand.
        """
        max_grad_norm = self.hparams.get("max_grad_norm")
        if gradient_clip_val is None and max_grad_norm is not None:
            gradient_clip_val, gradient_clip_algorithm = max_grad_norm, "norm"
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def anneal_lr(self, base_lr: float) -> None:
        """Set every optimizer's learning rate to ``base_lr`` times the unspent env-step budget fraction.

        Linear annealing to 0 over ``total_timesteps`` (CleanRL's PPO detail 4; SB3's linear
        schedules), computed from the env-step counter so a resumed run continues it.
        """
        frac = max(0.0, 1.0 - self.env_steps / self.total_timesteps)
        optimizers = self.optimizers()
        for optimizer in optimizers if isinstance(optimizers, list) else [optimizers]:
            for group in optimizer.param_groups:
                group["lr"] = frac * base_lr

    # ---------------------------------------------------------------- progress
    def _data_counter(self, name: str) -> int:
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer else None
        return int(getattr(datamodule, name, 0))

    @property
    def env_steps(self) -> int:
        """Environment steps taken so far over all ranks (0 without a data module)."""
        return self._data_counter("env_steps")

    @property
    def steps_per_epoch(self) -> int:
        """Environment steps per epoch over all ranks (0 without a data module)."""
        return self._data_counter("steps_per_epoch")

    def configure_callbacks(self) -> Sequence[pl.Callback]:
        """When fitting: the budget; with ``save_interval``, interval checkpoints and ``best.ckpt``."""
        if self._trainer is None or self.trainer.state.fn != TrainerFn.FITTING:
            return []
        callbacks: list[pl.Callback] = [EnvStepBudget(self.total_timesteps)]
        if self.save_interval is not None:
            # Interval first: trainer.checkpoint_callback (the last.ckpt path) is the first one.
            callbacks += [IntervalCheckpoint(self.save_interval), BestCheckpoint()]
        return callbacks

    def on_fit_start(self) -> None:
        check_clipping_strategy(self.trainer.strategy, self.hparams.get("max_grad_norm"))
        self._fit_start = (time.perf_counter(), self.env_steps)

    def log_rollout_metrics(self, rank_metrics: Mapping[str, float] | None = None) -> None:
        """Log ``rollout/`` and ``time/`` metrics of the rollout that fed this epoch, with the caller's own.

        Args:
            rank_metrics: This rank's epoch scalars (e.g. PPO's ``train/`` means), averaged over ranks.
        """
        rollout = getattr(self.trainer.datamodule, "last_rollout", None)
        rank_metrics = dict(rank_metrics or {})
        if rollout is None:
            if rank_metrics:
                self.log_epoch({}, rank_metrics)
            return
        if self._fit_start is not None:
            elapsed = time.perf_counter() - self._fit_start[0]
            rank_metrics["time/sps"] = (self.env_steps - self._fit_start[1]) / max(elapsed, 1e-9)
        # Timings are per rank (averaged); the rest is computed over every rank's episodes
        # (ranks finish different numbers of them). Explained variance over the ranks where it
        # is defined (NaN where returns did not vary, and always off-policy).
        rank_metrics["time/rollout_seconds"] = rollout.rollout_seconds
        returns, lengths = np.asarray(rollout.episodes.returns), np.asarray(rollout.episodes.lengths)
        ev = rollout.explained_variance
        sums = self._global_sums([len(returns), returns.sum(), lengths.sum(), not math.isnan(ev), np.nan_to_num(ev)])
        total, return_sum, length_sum, ev_count, ev_sum = sums.tolist()
        global_metrics = {"train/explained_variance": ev_sum / ev_count} if ev_count else {}
        if total:
            global_metrics["rollout/episode_return"] = return_sum / total
            global_metrics["rollout/episode_length"] = length_sum / total
        self.log_epoch(global_metrics, rank_metrics)

    def log_epoch(self, global_metrics: Mapping[str, float], rank_metrics: Mapping[str, float]) -> None:
        """Log one epoch's scalars to every logger and to ``trainer.callback_metrics``, against env steps.

        Not through ``self.log``: Lightning re-wraps its result object on every ``log`` call
        (a deep copy of the metric's metadata per key), about 0.5 ms per key here, so the 13
        keys of a PPO epoch cost about a tenth of a CleanRL-sized epoch. These are finished
        epoch scalars, so the loggers can take them directly: one all-reduce averages the
        per-rank values (instead of one collective per key), every rank ends with the same
        ``callback_metrics`` (progress bar, callbacks), and loggers write on rank zero.

        Args:
            global_metrics: Values already computed over all ranks.
            rank_metrics: This rank's values, averaged over ranks.
        """
        rank_metrics = {k: float(v) for k, v in rank_metrics.items()}
        if rank_metrics and self.trainer.world_size > 1:
            local = torch.tensor(list(rank_metrics.values()), dtype=torch.float64, device=self.device)
            reduced = self.trainer.strategy.reduce(local, reduce_op="mean").cpu().tolist()
            rank_metrics = dict(zip(rank_metrics, reduced, strict=True))
        metrics = {**rank_metrics, **{k: float(v) for k, v in global_metrics.items()}}
        metrics["time/env_steps"] = float(self.env_steps)
        for logger in self.trainer.loggers:  # Lightning's loggers write on rank zero only
            logger.log_metrics(metrics, step=self.env_steps)
            logger.save()
        self.trainer.callback_metrics.update({k: torch.tensor(v) for k, v in metrics.items()})

    def _global_sums(self, values: Sequence[float]) -> torch.Tensor:
        """``values`` summed over all ranks (a collective under DDP: every rank must call it)."""
        local = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.device)
        if self.trainer.world_size > 1:
            return self.trainer.strategy.reduce(local, reduce_op="sum").cpu()
        return local.cpu()

    def _env_step_axis(self) -> dict[str, float]:
        # A logged "step" becomes the x-axis of every Lightning logger (LoggerConnector.log_metrics),
        # so curves are drawn against env steps; time/env_steps keeps the value as a metric too.
        return {"time/env_steps": float(self.env_steps), "step": float(self.env_steps)}

    # ---------------------------------------------------------------- evaluation
    def _eval_step(self, batch: dict[str, Any]) -> None:
        # Each rank ran its share of the episodes: the statistics are over all of them.
        prefix, returns, lengths = batch["prefix"], batch["return"].double(), batch["length"].double()
        success = batch["success"].double() if "success" in batch else torch.full_like(returns, float("nan"))
        known = ~torch.isnan(success)
        n, total, squares, length, hits, graded = self._global_sums(
            [returns.numel(), returns.sum(), (returns**2).sum(), lengths.sum(), success[known].sum(), known.sum()]
        ).tolist()
        mean = total / n
        metrics = {
            f"{prefix}/return_mean": mean,
            f"{prefix}/return_std": math.sqrt(max(squares / n - mean**2, 0.0)),
            f"{prefix}/length_mean": length / n,
        }
        if graded:
            metrics[f"{prefix}/success_rate"] = hits / graded
        self.log_dict(metrics, add_dataloader_idx=False, batch_size=1)
        self._eval_returns[prefix] = mean

    def _end_evaluation(self) -> None:
        if not self._eval_returns:  # evaluation was not due this epoch
            return
        metrics = self._env_step_axis()
        if "eval" in self._eval_returns and "eval_ood" in self._eval_returns:
            metrics["eval_ood/generalization_gap"] = self._eval_returns["eval"] - self._eval_returns["eval_ood"]
        self.log_dict(metrics, batch_size=1)
        self._eval_returns = {}

    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Log one object set's evaluation: ``<prefix>/return_mean`` and friends."""
        self._eval_step(batch)

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        """The final evaluation: same metrics as validation."""
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._end_evaluation()

    def on_test_epoch_end(self) -> None:
        self._end_evaluation()

    # ---------------------------------------------------------------- checkpoints
    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, *args, **kwargs):
        """Load a model from a checkpoint; a corrupt or truncated file gets a clear error.

        Args:
            checkpoint_path: Path of a checkpoint written by this library.
            *args: Passed to ``LightningModule.load_from_checkpoint``.
            **kwargs: Passed on too (e.g. ``map_location``, or ``actor``/``critic`` modules
                that were not saved in the hyperparameters).
        """
        path = os.fspath(checkpoint_path) if isinstance(checkpoint_path, (str, os.PathLike)) else None
        if path is not None and os.path.isfile(path) and not zipfile.is_zipfile(path):
            # torch.save writes a zip archive; anything else is a partial write or another file.
            raise ValueError(
                f"Cannot read checkpoint '{path}': it is not a complete checkpoint archive (a write "
                "may have been interrupted, or it is another kind of file). Load an earlier checkpoint "
                "from the same directory instead."
            )
        return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Store the algorithm and env spaces so the policy can be rebuilt without envs."""
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer else None
        checkpoint[CHECKPOINT_KEY] = {
            "algorithm": type(self).__name__,
            "datamodule": f"{type(datamodule).__module__}.{type(datamodule).__name__}" if datamodule else None,
            "observation_space": space_to_dict(self._spaces[0]),
            "action_space": space_to_dict(self._spaces[1]),
        }

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Rebuild the policy from the stored spaces before the weights are loaded."""
        meta = checkpoint.get(CHECKPOINT_KEY)
        if meta is None:
            raise ValueError(
                "This checkpoint was not written by rl_lightning (it has no 'rl_lightning' entry); "
                f"load it with the class that wrote it, not {type(self).__name__}."
            )
        if meta["algorithm"] != type(self).__name__:
            raise ValueError(
                f"This checkpoint holds a {meta['algorithm']} model; load it with "
                f"{meta['algorithm']}.load_from_checkpoint, not {type(self).__name__}."
            )
        self._ensure_policy(space_from_dict(meta["observation_space"]), space_from_dict(meta["action_space"]))
