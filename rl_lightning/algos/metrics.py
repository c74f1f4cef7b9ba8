"""Metric logging shared by the algorithms: epoch scalars against env steps, rollout statistics, evaluation.

Every value is logged with the env-step count as its x-axis. Statistics over episodes are
computed over every rank's episodes (one all-reduce of their sums), timings per rank.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch


def explained_variance(value: torch.Tensor, returns: torch.Tensor) -> float:
    """``1 - Var[return - value] / Var[return]``: 1 is a perfect critic, <= 0 a useless one."""
    var = returns.var()
    return float("nan") if var == 0 else float(1 - (returns - value).var() / var)


def global_sums(module: pl.LightningModule, values: Sequence[float]) -> torch.Tensor:
    """``values`` summed over all ranks (a collective under DDP: every rank must call it)."""
    local = torch.tensor([float(v) for v in values], dtype=torch.float64, device=module.device)
    return (module.trainer.strategy.reduce(local, reduce_op="sum") if module.trainer.world_size > 1 else local).cpu()


def env_step_axis(env_steps: int) -> dict[str, float]:
    """The keys that put a logged dict on the env-step axis."""
    # A logged "step" becomes the x-axis of every Lightning logger (LoggerConnector.log_metrics),
    # so curves are drawn against env steps; time/env_steps keeps the value as a metric too.
    return {"time/env_steps": float(env_steps), "step": float(env_steps)}


def log_epoch(
    module: pl.LightningModule, global_metrics: Mapping[str, float], rank_metrics: Mapping[str, float]
) -> None:
    """Log one epoch's scalars to every logger and to ``trainer.callback_metrics``, against env steps.

    Not through ``self.log``: Lightning re-wraps its result object on every ``log`` call (a deep copy of the metric's
    metadata per key), which costs a noticeable share of a small epoch. These are finished epoch scalars, so the loggers
    can take them directly: one all-reduce averages the per-rank values (instead of one collective per key), every rank
    ends with the same ``callback_metrics`` (progress bar, callbacks), and loggers write on rank zero.

    Args:
        module: The algorithm (its trainer and ``env_steps``).
        global_metrics: Values already computed over all ranks.
        rank_metrics: This rank's values, averaged over ranks.
    """
    trainer = module.trainer
    rank_metrics = {k: float(v) for k, v in rank_metrics.items()}
    if rank_metrics and trainer.world_size > 1:
        local = torch.tensor(list(rank_metrics.values()), dtype=torch.float64, device=module.device)
        reduced = trainer.strategy.reduce(local, reduce_op="mean").cpu().tolist()
        rank_metrics = dict(zip(rank_metrics, reduced, strict=True))
    metrics = {**rank_metrics, **{k: float(v) for k, v in global_metrics.items()}}
    metrics["time/env_steps"] = float(module.env_steps)
    for logger in trainer.loggers:  # Lightning's loggers write on rank zero only
        logger.log_metrics(metrics, step=module.env_steps)
        logger.save()
    trainer.callback_metrics.update({k: torch.tensor(v) for k, v in metrics.items()})


def rollout_metrics(
    module: pl.LightningModule, rollout: Any, fit_start: tuple[float, int] | None, now: float, ev: float = math.nan
) -> tuple[dict[str, float], dict[str, float]]:
    """The ``rollout/``, ``time/`` and explained-variance metrics of the rollout that fed this epoch.

    Args:
        module: The algorithm (for the all-reduce and ``env_steps``).
        rollout: The data module's ``last_collection`` (a :class:`~rl_lightning.data.collection.CollectionMetrics`).
        fit_start: ``(perf_counter, env_steps)`` at fit start, for ``time/sps``.
        now: ``time.perf_counter()`` now.
        ev: The critic's explained variance on this rank's rollout (NaN: undefined, or off-policy).

    Returns:
        ``(global_metrics, rank_metrics)`` for :func:`log_epoch`.
    """
    rank_metrics = {}
    if fit_start is not None:
        rank_metrics["time/sps"] = (module.env_steps - fit_start[1]) / max(now - fit_start[0], 1e-9)
    # Timings are per rank (averaged); the rest is computed over every rank's episodes
    # (ranks finish different numbers of them). Explained variance over the ranks where it
    # is defined (NaN where returns did not vary, and always off-policy).
    rank_metrics["time/rollout_seconds"] = rollout.rollout_seconds
    episodes = rollout.episodes
    returns, lengths = np.asarray(episodes.returns), np.asarray(episodes.lengths)
    successes = np.asarray(episodes.successes, dtype=float)  # NaN where the env reports no success
    once = np.asarray(episodes.successes_once, dtype=float)
    graded, graded_once = ~np.isnan(successes), ~np.isnan(once)
    faults = ("env_restarts", "nonfinite_steps", "obs_clipped")
    sums = global_sums(module, [len(returns), returns.sum(), lengths.sum(), not math.isnan(ev), np.nan_to_num(ev),
                                successes[graded].sum(), graded.sum(), once[graded_once].sum(), graded_once.sum(),
                                *(getattr(episodes, fault) for fault in faults)])  # fmt: skip
    total, return_sum, length_sum, ev_count, ev_sum, hits, graded_count, hits_once, once_count = sums[:9].tolist()
    global_metrics = {"train/explained_variance": ev_sum / ev_count} if ev_count else {}
    # Counts of env fault events this epoch, over all ranks (envs/env_group.py).
    global_metrics.update({f"rollout/{fault}": count for fault, count in zip(faults, sums[9:].tolist(), strict=True)})
    if total:
        global_metrics["rollout/episode_return"] = return_sum / total
        global_metrics["rollout/episode_length"] = length_sum / total
    if graded_count:  # the episodes that ended this epoch on envs that report success
        global_metrics["rollout/success_rate"] = hits / graded_count
    if once_count:
        global_metrics["rollout/success_once"] = hits_once / once_count
    return global_metrics, rank_metrics


def with_generalization_gap(logged: dict[str, float], means: Mapping[str, float]) -> dict[str, float]:
    """``logged`` plus ``eval_ood/generalization_gap`` (train-set minus test-set mean return) when both ran."""
    if "eval" in means and "eval_ood" in means:
        logged["eval_ood/generalization_gap"] = means["eval"] - means["eval_ood"]
    return logged


def evaluation_metrics(module: pl.LightningModule, batch: Mapping[str, Any]) -> tuple[dict[str, float], float]:
    """One object set's evaluation statistics over every rank's episodes: ``<prefix>/return_mean`` and friends.

    Args:
        module: The algorithm (for the all-reduce).
        batch: The evaluation loader's batch: ``prefix``, per-episode ``return``, ``length``
            and, where the env reports it, ``success``.

    Returns:
        The metrics and the mean return.
    """
    prefix, returns, lengths = batch["prefix"], batch["return"].double(), batch["length"].double()
    nan = torch.full_like(returns, float("nan"))
    success, once = (batch[k].double() if k in batch else nan for k in ("success", "success_once"))
    known, known_once = ~torch.isnan(success), ~torch.isnan(once)
    sums = [returns.numel(), returns.sum(), (returns**2).sum(), lengths.sum(), success[known].sum(), known.sum(),
            once[known_once].sum(), known_once.sum()]  # fmt: skip
    n, total, squares, length, hits, graded, hits_once, graded_once = global_sums(module, sums).tolist()
    mean = total / n
    metrics = {
        f"{prefix}/return_mean": mean,
        f"{prefix}/return_std": math.sqrt(max(squares / n - mean**2, 0.0)),
        f"{prefix}/length_mean": length / n,
    }
    if graded:  # success at the final step: ManiSkill's success_at_end
        metrics[f"{prefix}/success_rate"] = hits / graded
    if graded_once:  # success at any step
        metrics[f"{prefix}/success_once"] = hits_once / graded_once
    return metrics, mean
