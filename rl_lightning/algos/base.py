"""``RLModule``: what every algorithm's LightningModule shares.

It builds the policy from the data module's spaces (or from the spaces stored in a checkpoint), guards every update
(``algos/update.py``), logs the epoch's rollout and evaluation metrics (``algos/metrics.py``), checks checkpoints before
loading them (``algos/ckpt.py``) and adds the env-step budget and interval checkpoints to whatever ``Trainer`` runs it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn

from rl_lightning.algos import ckpt, metrics
from rl_lightning.algos.checks import check_clipping_strategy
from rl_lightning.algos.update import UpdateGuard
from rl_lightning.callbacks import BestCheckpoint, EnvStepBudget, FlushDenormals, Interruption, IntervalCheckpoint
from rl_lightning.callbacks.checkpoint import CHECKPOINT_KEY, check_checkpoint_file, install_atomic_checkpoint_io
from rl_lightning.callbacks.interrupt import stop_if_requested
from rl_lightning.callbacks.video import EvaluationVideo
from rl_lightning.checks import check_bool, check_positive, check_positive_int
from rl_lightning.data.base import EnvDataModule, collected_since, last_collection
from rl_lightning.envs.obs import Obs, clip_floats, leaves, map_obs, to_tensor
from rl_lightning.loggers import LOGGERS_KEY, logger_state, rewind_loggers
from rl_lightning.nets.actor_copy import ActorCopy
from rl_lightning.nets.encoders import actor_space
from rl_lightning.spaces import env_action, single_to_batch


class RLModule(pl.LightningModule):
    """Base class of the algorithms (one level of inheritance: ``PPO(RLModule)``).

    Subclasses implement :meth:`build_policy`, ``training_step`` and ``configure_optimizers``,
    and pass their own settings to this constructor.

    Args:
        total_timesteps: Environment-step budget over all ranks; training stops after the epoch that reaches it.
        save_interval: Collections (epochs) between checkpoints (plus an always-current ``last.ckpt`` and ``best.ckpt``,
            the highest ``eval/return_mean`` so far); ``None`` leaves checkpointing to the Trainer's own callbacks.
        keep_last: Interval checkpoints kept on disk (the newest; ``last.ckpt`` and
            ``best.ckpt`` come on top); ``None`` keeps every one.
        on_nonfinite: ``"stop"``: a NaN or inf in a loss or gradient ends the run with a message
            naming where it appeared (the last good checkpoint stays the newest); ``"skip"``: such
            an update is skipped (counted in ``train/skipped_updates``). Observations and rewards
            are the data module's ``on_nonfinite`` (Hydra: ``env.on_nonfinite``).
        max_grad_norm: The algorithm's global gradient-norm clip (``None``: none).
        flush_denormal: Flush denormal floats (below 1.2e-38) to zero on the fit's thread
            (:class:`~rl_lightning.callbacks.FlushDenormals`): Adam's second moments sink that low,
            and the CPU computes on them several times slower (DQN's optimizer step 0.52 against
            0.09 ms; ``python -m benchmarks.denormals``). A value that small reads as 0.
        compile: Run the update's loss (forward and backward) and the acting methods through
            ``torch.compile`` during ``fit``. Compiling costs seconds up front (a minute on a cold
            cache) and pays back on long runs and GPUs; off by default (``python -m benchmarks.run --compile``).
    """

    #: The data module class this algorithm's training_step expects batches from.
    datamodule_class: type | None = None
    #: The policy methods collection calls (compiled with ``compile=True``).
    acting_methods: tuple[str, ...] = ()
    #: The settings that shape the networks' weights: a checkpoint refused for its weights names those that differ.
    network_settings: tuple[str, ...] = ("hidden_sizes", "encoder")

    def __init__(
        self,
        total_timesteps: int,
        save_interval: int | None = None,
        keep_last: int | None = 5,
        on_nonfinite: str = "stop",
        max_grad_norm: float | None = None,
        flush_denormal: bool = True,
        compile: bool = False,
    ):
        super().__init__()
        check_positive_int(total_timesteps=total_timesteps)
        check_positive_int(save_interval=save_interval, none="None")
        check_positive_int(keep_last=keep_last, none="None (keep all)")
        check_positive(max_grad_norm=max_grad_norm)
        check_bool(flush_denormal=flush_denormal, compile=compile)
        self.total_timesteps = total_timesteps
        self.save_interval = save_interval
        self.keep_last = keep_last
        self.flush_denormal = flush_denormal
        self.torch_compile = compile
        #: What the update calls for its losses: :meth:`loss`, or its ``torch.compile`` during a fit with ``compile``.
        self.loss_fn = self.loss
        self.guard = UpdateGuard(max_grad_norm, on_nonfinite)
        self.policy: nn.Module | None = None
        #: An acting copy of ``policy`` on another device or dtype (set by the ``ActorSync`` callback).
        self.acting_copy: ActorCopy | None = None
        #: The observation and action spaces the policy was built for.
        self.spaces: tuple[gym.Space, gym.Space] | None = None
        #: Per applied update, its diagnostics stacked (logged as ``train/`` means once per epoch).
        self.train_terms: list[torch.Tensor] = []
        #: The epoch's explained variance of the critic (on-policy; logged over ranks, NaN where undefined).
        self.explained_variance = float("nan")
        self._fit_start: tuple[float, int] | None = None
        self._eval_returns: dict[str, float] = {}
        self._interruption: Interruption | None = None
        self._logger_state: dict[str, Any] = {}  # a loaded checkpoint's loggers.logger_state
        # The collection whose epoch row was logged last (log_cut_epoch compares against it).
        self._logged_collection: Any = None

    # ---------------------------------------------------------------- policy
    def build_policy(self, observation_space: gym.Space, action_space: gym.Space) -> nn.Module:
        """Return the policy network for these spaces (implemented by each algorithm)."""
        raise NotImplementedError

    @property
    def actor_observation_space(self) -> gym.Space:
        """What the policy reads of the observation space: the ``Dict`` of ``encoder.actor_keys`` (observation
        groups), or all of it. ``predict`` and an exported policy take only these keys."""
        return actor_space(self.spaces[0], getattr(self, "_encoder", None))

    def _ensure_policy(self, observation_space: gym.Space, action_space: gym.Space) -> None:
        if self.policy is None:
            self.policy = self.build_policy(observation_space, action_space)
            self.spaces = (observation_space, action_space)
        elif self.spaces != (observation_space, action_space):
            raise ValueError(f"The policy was built for observation space {self.spaces[0]} and action space "
                             f"{self.spaces[1]}, but the data provides {observation_space} and {action_space}. "
                             "Use a data module with the env this model was trained on.")  # fmt: skip

    def setup(self, stage: str) -> None:
        """Build the policy from the data module's env spaces; make checkpoint writes atomic."""
        #: Whether a loop (training, validation, test) has started: the front doors explain the
        #: library's refusals, which all come before, and keep the traceback of anything later.
        self.loops_started = False
        install_atomic_checkpoint_io(self.trainer)
        datamodule = self.trainer.datamodule
        if datamodule is None or not hasattr(datamodule, "env_spaces"):
            if self.policy is None:
                data = getattr(self.datamodule_class, "__name__", "RolloutDataModule")
                raise RuntimeError(f"{type(self).__name__} builds its networks from the env of a {data}: "
                                   f"call trainer.fit(model, datamodule={data}(env_id=...)).")  # fmt: skip
            return
        self.check_datamodule(datamodule)
        self._ensure_policy(*datamodule.env_spaces())

    def check_datamodule(self, datamodule: pl.LightningDataModule) -> None:
        """Refuse a data module of another kind than this algorithm learns from (``datamodule_class``); at setup, and
        by the CLI before a fit's run directory and loggers start."""
        if (expected := self.datamodule_class) is not None and not isinstance(datamodule, expected):
            raise TypeError(
                f"{type(self).__name__} learns from a {expected.__name__}, got a {type(datamodule).__name__}. "
                f"Pass {expected.__name__}(env_id=...) (the CLI: --data {expected.__name__}; Hydra: data="
                f"{expected.__name__.removesuffix('DataModule').lower()}, as +experiment={type(self).__name__.lower()} "
                "sets)."
            )

    @property
    def acting_policy(self) -> nn.Module | ActorCopy:
        """What rollouts, replay collection and evaluation act with: the actor copy if any, else ``policy``."""
        return self.policy if self.acting_copy is None else self.acting_copy

    def forward(self, obs: Obs) -> torch.Tensor:
        """Deterministic actions in the policy's numbering for raw observations ``[B, *obs_shape]``, a recurrent
        policy's from its initial state (:meth:`predict` gives env actions and carries the state)."""
        starts = torch.ones(len(leaves(obs)[0]), dtype=torch.bool, device=self.device)  # a dict of batches, too
        return self.policy.act(obs, None, starts, deterministic=True, value=False)[0]

    @torch.no_grad()
    def predict(
        self,
        obs: Obs,
        deterministic: bool = True,
        state: np.ndarray | torch.Tensor | None = None,
        episode_start: np.ndarray | torch.Tensor | None = None,
        obs_bound: float | None = None,
    ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """Act on raw observations, batched ``[B, *obs_shape]`` or single; returns env actions.

        Needs no data module: after ``load_from_checkpoint`` this is the deployed policy.
        ``Dict`` observations are a dict of arrays (one entry per key, batched or single).
        Box actions are clipped to the action space's bounds, ``Discrete`` indices shifted by its ``start``.

        A recurrent policy (``PPO(recurrent=True)``) takes and returns its state, as sb3-contrib's
        ``RecurrentPPO.predict`` does: ``action, state = predict(obs, state=state, episode_start=starts)``. ``state`` is
        float32 ``[B, C, K, H]`` (see :mod:`rl_lightning.nets.recurrent`; ``B`` is 1 for a single observation); ``None``
        starts every env from the initial state. ``episode_start`` (``[B]`` bools) marks the envs whose episode begins
        with this observation: their state is zeroed first. Without it, no env begins one, unless ``state`` is ``None``.

        ``obs_bound`` clips the float observations to ``[-obs_bound, obs_bound]`` first, as the env of
        a run with ``obs_bound`` in ``clip`` mode did (``play`` and the exported actor clip them too).

        Raises:
            TypeError: ``state`` or ``episode_start`` given to a policy without a recurrent state.
            ValueError: A ``state`` of the wrong shape (naming the one expected).
        """
        obs_space, action_space = self.actor_observation_space, self.spaces[1]
        obs, single = single_to_batch(map_obs(lambda x: x.cpu().numpy() if torch.is_tensor(x) else x, obs), obs_space)
        check_positive(obs_bound=obs_bound)
        obs = obs if obs_bound is None else clip_floats(obs, obs_bound)
        obs_t = to_tensor(obs, self.device, batch_dims=1)
        batch = obs_t.shape[0]
        initial = self.policy.initial_state(batch, self.device)
        if initial is None and (state is not None or episode_start is not None):
            raise TypeError(
                f"This {type(self).__name__} policy has no recurrent state: call predict(obs) without state or "
                "episode_start (PPO(recurrent=True) takes them)."
            )
        starts = torch.ones(batch, dtype=torch.bool, device=self.device)
        if state is not None:
            state = torch.as_tensor(state, dtype=torch.float32, device=self.device)
            if state.shape != initial.shape:
                raise ValueError(
                    f"state has shape {tuple(state.shape)}, expected {tuple(initial.shape)} ([batch, C, K, "
                    f"recurrent_size]) for this policy and a batch of {batch}: pass the state the previous "
                    "predict returned, or None to start every env afresh."
                )
            starts = torch.zeros_like(starts)
        if episode_start is not None:
            starts = torch.as_tensor(np.asarray(episode_start), dtype=torch.bool, device=self.device).reshape(-1)
            if starts.shape != (batch,):
                raise ValueError(f"episode_start has {starts.numel()} entries, expected one per observation ({batch}).")
        action, _, _, next_state = self.policy.act(obs_t, state if state is not None else initial, starts,
                                                   deterministic, value=False)  # fmt: skip
        action = env_action(action_space, action.cpu().numpy())
        action = action[0] if single else action
        return action if next_state is None else (action, next_state.cpu().numpy())

    def loss(self, batch: Any) -> Any:
        """The algorithm's losses on one batch of its update (implemented by each algorithm)."""
        raise NotImplementedError

    def train_means(self, names: Sequence[str]) -> dict[str, float]:
        """``train/<name>`` means of the epoch's applied updates (:attr:`train_terms`, emptied), with skipped ones."""
        values = torch.stack(self.train_terms).mean(0).tolist() if self.train_terms else None
        means = {f"train/{name}": value for name, value in zip(names, values, strict=True)} if values else {}
        self.train_terms = []
        return {**means, **self.guard.pop_skipped()}

    def anneal_lr(self, base_lr: float) -> None:
        """Set the optimizer's learning rate to ``base_lr`` times the unspent env-step budget fraction.

        Linear annealing to 0 over ``total_timesteps`` (CleanRL's PPO detail 4; SB3's linear
        schedules), computed from the env-step counter so a resumed run continues it.
        """
        frac = max(0.0, 1.0 - self.env_steps / self.total_timesteps)
        for group in self.optimizers().param_groups:
            group["lr"] = frac * base_lr

    # ---------------------------------------------------------------- progress
    def _data_counter(self, name: str) -> int:
        datamodule = getattr(ckpt.attached_trainer(self), "datamodule", None)
        return int(getattr(datamodule, name, 0))

    @property
    def env_steps(self) -> int:
        """Environment steps taken so far over all ranks (0 without a data module)."""
        return self._data_counter("env_steps")

    @property
    def env_steps_per_epoch(self) -> int:
        """Environment steps per epoch over all ranks (0 without a data module)."""
        return self._data_counter("env_steps_per_epoch")

    def configure_callbacks(self) -> Sequence[pl.Callback]:
        """When fitting: the budget, a checkpoint on interruption; with ``save_interval``, interval
        checkpoints (the last ``keep_last`` kept) and ``best.ckpt``."""
        if ckpt.attached_trainer(self) is None or self.trainer.state.fn != TrainerFn.FITTING:
            return []
        callbacks: list[pl.Callback] = [EnvStepBudget(self.total_timesteps)]
        if self.flush_denormal:
            callbacks.append(FlushDenormals())
        self._interruption = next((c for c in self.trainer.callbacks if isinstance(c, Interruption)), None)
        if self._interruption is None:
            self._interruption = Interruption()
            callbacks.append(self._interruption)
        if self.save_interval is not None:
            # Interval first: trainer.checkpoint_callback (the last.ckpt path) is the first one.
            callbacks += [IntervalCheckpoint(self.save_interval, keep_last=self.keep_last), BestCheckpoint()]
        return callbacks

    def on_fit_start(self) -> None:
        check_clipping_strategy(self.trainer.strategy, self.guard.max_grad_norm)
        if str(self.trainer.precision).startswith("16"):
            # With a GradScaler the gradients are still scaled when clipping and the NaN/inf
            # check see them (it unscales inside the optimizer step), and its routine overflow
            # steps would read as numerical faults.
            raise ValueError(
                f"precision={self.trainer.precision!r} (float16 with a gradient scaler) is not supported: the "
                "algorithms clip and check gradients themselves. Use trainer.precision=bf16-mixed or 32."
            )
        self._fit_start = (time.perf_counter(), self.env_steps)
        if self.torch_compile:
            # torch.compile of bound methods, set on the instances for this fit only (on_fit_end removes them).
            self.loss_fn, acting = torch.compile(self.loss), self.acting_policy
            # Acting runs per env step on a few observations: on the CPU inductor's C++ wrapper around the kernels
            # costs less than its Python one (PPO on 4 CartPoles 1.09x, docs/speed.md).
            cpu = torch.device(getattr(acting, "device", self.device)).type == "cpu"
            options = {"cpp_wrapper": True} if cpu else None
            for name in self.acting_methods:
                setattr(acting, name, torch.compile(getattr(acting, name), options=options))

    def on_fit_end(self) -> None:
        self.loss_fn = self.loss
        for name in self.acting_methods if self.torch_compile else ():
            vars(self.acting_policy).pop(name, None)

    def on_train_start(self) -> None:
        self.loops_started = True
        # A resumed run's logs go on from its checkpoint's env step (rows logged after it are dropped).
        rewind_loggers(self.trainer.loggers, self.env_steps, self._logger_state if self.trainer.ckpt_path else None)
        datamodule = self.trainer.datamodule
        if self.trainer.ckpt_path is not None and isinstance(datamodule, EnvDataModule) and datamodule.evaluation_due:
            self._evaluate_cut(datamodule)

    def _evaluate_cut(self, datamodule: EnvDataModule) -> None:
        """The evaluation an interruption cut off, run before a resumed fit collects again.

        A signal between a collection that ends on the ``eval_interval`` grid and its evaluation (during the update, at
        the batch end, inside the evaluation) leaves that evaluation undone, and Lightning does not rerun it. It runs
        here, on the restored weights, and is logged at the checkpoint's env step, so the evaluations of a resumed run
        fall on the same env steps as an uninterrupted one's. It goes straight to the loggers (Lightning's validation
        loop is not running) and is offered to ``best.ckpt``.
        """
        if self.acting_copy is not None:
            self.acting_copy.sync()
        logged, means, obj_sets = {}, {}, []
        for batch in datamodule.val_dataloader():
            values, means[batch["prefix"]] = metrics.evaluation_metrics(self, batch)
            logged.update(values)
            obj_sets.append(batch["obj_set"])
        if logged:
            metrics.log_epoch(self, metrics.with_generalization_gap(logged, means), {})
        datamodule.mark_evaluated()
        for callback in self.trainer.callbacks:
            if isinstance(callback, BestCheckpoint):
                callback.offer(self.trainer, logged.get(callback.monitor))
            elif isinstance(callback, EvaluationVideo):  # filmed where an uninterrupted run filmed this evaluation
                callback.evaluated(self.trainer, self, obj_sets)

    def on_validation_start(self) -> None:
        self.loops_started = not self.trainer.sanity_checking

    def on_test_start(self) -> None:
        self.loops_started = True

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Stop here if an interruption was requested (after the algorithm's own batch-end work)."""
        if self._interruption is not None:
            stop_if_requested(self.trainer, self.device)

    def log_cut_epoch(self) -> None:
        """Log the epoch an interruption cut short, if its collection was complete (``Interruption`` calls it).

        A signal during PPO's update phase, at a batch end or during evaluation leaves a counted collection whose
        epoch-end row was never logged; the resumed run goes on after it. Its row (the collection's statistics, and the
        minibatch steps it took) is logged here, so the curves hold every env step an uninterrupted run logs. A
        collection cut short is not counted and logs nothing.
        """
        self.on_train_epoch_end()  # which logs nothing when no collection ended since the last row

    def log_rollout_metrics(self, rank_metrics: Mapping[str, float] | None = None) -> None:
        """Log ``rollout/`` and ``time/`` metrics of the rollout that fed this epoch, with the caller's own.

        The env fault counters of the epoch (``rollout/env_restarts``, ``rollout/nonfinite_steps``,
        ``rollout/obs_clipped``, see :class:`~rl_lightning.envs.EpisodeStats`) are summed over ranks.

        Args:
            rank_metrics: This rank's epoch scalars (e.g. PPO's ``train/`` means), averaged over ranks.
        """
        if not collected_since(self.trainer, self._logged_collection):
            return  # this epoch's row is logged (a resume restored the epoch after it)
        rollout = self._logged_collection = last_collection(self.trainer)
        rank_metrics = dict(rank_metrics or {})
        global_metrics = {}
        if rollout is not None:
            global_metrics, rollout_rank = metrics.rollout_metrics(
                self, rollout, self._fit_start, time.perf_counter(), self.explained_variance
            )
            self.explained_variance = float("nan")
            rank_metrics.update(rollout_rank)
        if rollout is not None or rank_metrics:
            metrics.log_epoch(self, global_metrics, rank_metrics)

    # ---------------------------------------------------------------- evaluation
    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> None:
        """Log one object set's evaluation: ``<prefix>/return_mean`` and friends (``test_step``: the final one)."""
        # Each rank ran its share of the episodes: the statistics are over all of them.
        values, mean = metrics.evaluation_metrics(self, batch)
        self.log_dict(values, add_dataloader_idx=False, batch_size=1)
        self._eval_returns[batch["prefix"]] = mean

    test_step = validation_step

    def on_validation_epoch_end(self) -> None:
        if not self._eval_returns:  # evaluation was not due this epoch
            return
        self.log_dict(
            metrics.with_generalization_gap(metrics.env_step_axis(self.env_steps), self._eval_returns), batch_size=1
        )
        self._eval_returns = {}
        datamodule = self.trainer.datamodule
        if self.trainer.validating and isinstance(datamodule, EnvDataModule):
            datamodule.mark_evaluated()

    on_test_epoch_end = on_validation_epoch_end

    # ---------------------------------------------------------------- checkpoints
    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, *args, **kwargs):
        """Load a model from a checkpoint; a missing, corrupt or unfitting file gets one clear error.

        Args:
            checkpoint_path: Path of a checkpoint written by this library.
            *args: Passed to ``LightningModule.load_from_checkpoint``.
            **kwargs: Passed on too (e.g. ``map_location``, or ``actor``/``critic`` modules
                that were not saved in the hyperparameters); settings given here replace the
                checkpoint's.

        Raises:
            FileNotFoundError: The file does not exist.
            ValueError: It is not a complete checkpoint archive, or :meth:`on_load_checkpoint`
                refuses it (the message names the file and the fix).
        """
        path = os.fspath(checkpoint_path) if isinstance(checkpoint_path, (str, os.PathLike)) else None
        if path is not None:
            check_checkpoint_file(path)  # missing, or not a complete archive (a torn write, another file)
        overrides = {
            k: v for k, v in kwargs.items() if k not in ("map_location", "hparams_file", "strict", "weights_only")
        }
        with ckpt.loading(path, kwargs.get("strict") is not False, overrides):
            return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Store the algorithm and env spaces so the policy can be rebuilt without envs, and the loggers' run ids."""
        checkpoint[CHECKPOINT_KEY] = ckpt.checkpoint_entry(self)
        if ckpt.attached_trainer(self) is not None:  # the W&B run id, which a resume continues
            checkpoint[LOGGERS_KEY] = logger_state(self.trainer.loggers)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Check the checkpoint (``algos/ckpt.py``), then rebuild the policy from its spaces before the weights load.

        Raises:
            ValueError: Naming the file and the fix when the checkpoint was not written by rl_lightning, holds another
                algorithm, was trained on other observation or action spaces than this model's env, or its weights do
                not fit this model's settings (the settings that differ are listed).
        """
        self._ensure_policy(*ckpt.checked_spaces(self, checkpoint))
        ckpt.check_weights(self, checkpoint)
        self._logger_state = dict(checkpoint.get(LOGGERS_KEY) or {})  # how far the loggers' history went
