"""``RLModule``: what every algorithm's LightningModule shares.

It builds the policy from the data module's spaces (or from the spaces stored in a
checkpoint), runs the evaluation steps for every object set, logs the rollout metrics
and adds the env-step budget and interval checkpoints to whatever ``Trainer`` runs it.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import SingleDeviceStrategy
from lightning.pytorch.trainer.states import TrainerFn
from torch import nn

from rl_lightning.algos.fused_adam import FusedAdam
from rl_lightning.callbacks import BestCheckpoint, EnvStepBudget, Interruption, IntervalCheckpoint
from rl_lightning.callbacks.checkpoint import check_checkpoint_file, install_atomic_checkpoint_io
from rl_lightning.callbacks.interrupt import stop_if_requested
from rl_lightning.data.rollout import to_env_action
from rl_lightning.envs.checks import ON_NONFINITE
from rl_lightning.envs.spaces import space_from_dict, space_to_dict
from rl_lightning.faults import NumericalFault
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
    otherwise (e.g. another accelerator) the default implementation runs. The fused one is a
    :class:`~rl_lightning.algos.fused_adam.FusedAdam`, which also skips ``Optimizer.step``'s
    bookkeeping where nothing would see it.

    Args:
        params: Tensors, or parameter-group dicts (``{"params": [...], "lr": ...}``).
        lr: Learning rate (of groups that set none).
        eps: Adam's epsilon.
    """
    params = list(params)
    groups = params if params and isinstance(params[0], dict) else [{"params": params}]
    tensors = [p for group in groups for p in group["params"]]
    if all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in tensors):
        return FusedAdam(params, lr=lr, eps=eps)
    return torch.optim.Adam(params, lr=lr, eps=eps)


def _named_loss_tensors(losses: Any) -> dict[str, torch.Tensor]:
    """The scalar tensors of loss terms given as a mapping, a NamedTuple or a dataclass."""
    if dataclasses.is_dataclass(losses):
        items = vars(losses).items()
    elif hasattr(losses, "_asdict"):
        items = losses._asdict().items()
    else:
        items = (losses or {}).items()
    return {k: v for k, v in items if isinstance(v, torch.Tensor) and v.numel() == 1}


def _loss_tensors(losses: Any) -> list[torch.Tensor]:
    """The losses to check on every update: the total ``loss`` when the terms have one (its parts
    are in it), else every scalar term (SAC's three losses)."""
    total = getattr(losses, "loss", None)
    if isinstance(total, torch.Tensor):
        return [total]
    values = losses.values() if isinstance(losses, Mapping) else (losses or ())
    return [v for v in values if isinstance(v, torch.Tensor) and v.numel() == 1]


def clear_grads(optimizer: torch.optim.Optimizer) -> None:
    """Set the gradients of the optimizer's parameters to ``None``, as ``optimizer.zero_grad()`` does.

    A plain loop: 7 us against 97 us for ``zero_grad`` calls with their profiler scopes and
    per-device grouping (measured over SAC's 13 parameter tensors in three optimizers, one
    CPU thread); 11 against 111 us per PPO minibatch inside a fit, about 5% of its update.
    """
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None


def _foreach_ok(grads: list[torch.Tensor]) -> bool:
    """Whether the foreach kernels take ``grads`` at once: one device (CPU or CUDA) and one dtype."""
    first = grads[0]
    return first.device.type in ("cpu", "cuda") and all(
        g.device == first.device and g.dtype == first.dtype for g in grads
    )


# torch.nn.utils.get_total_norm and clip_grads_with_norm_ compute the same thing as the two
# functions below, but first group the tensors by device and dtype on every call; with one
# group (a single-device model) going straight to the foreach kernels cost 26 against 57 us
# and 27 against 47 us for PPO's 64x64 actor-critic (one CPU thread), about 3% of a
# CleanRL-settings minibatch update. Anything else takes torch's functions. ``foreach`` is
# ``_foreach_ok(grads)``, passed in by a caller that already knows it.
def _total_norm(grads: list[torch.Tensor], foreach: bool | None = None) -> torch.Tensor:
    """The L2 norm of all ``grads`` taken as one vector (``torch.nn.utils.get_total_norm``)."""
    if _foreach_ok(grads) if foreach is None else foreach:
        return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
    return torch.nn.utils.get_total_norm(grads)


@torch.no_grad()
def _scale_to_norm(grads: list[torch.Tensor], max_norm: float, norm: torch.Tensor, foreach: bool | None = None) -> None:
    """Scale ``grads`` in place so their norm is at most ``max_norm`` (``clip_grads_with_norm_``'s rule)."""
    coef = (max_norm / (norm + 1e-6)).clamp_(max=1.0)
    if _foreach_ok(grads) if foreach is None else foreach:
        torch._foreach_mul_(grads, coef.to(grads[0].device))
    else:
        for grad in grads:
            grad.mul_(coef.to(grad.device))


BACKWARD_HOOKS = ("on_before_backward", "on_after_backward")
OPTIMIZER_STEP_HOOKS = ("on_before_optimizer_step",)


def _lightning_call_is_plain(module: pl.LightningModule, hooks: Sequence[str]) -> bool:
    """Whether, in this fit, Lightning wraps a manual-optimization call in nothing but dispatch to ``hooks``,
    none of which does anything: manual optimization on a ``SingleDeviceStrategy`` (not a
    subclass: DDP and others prepare and sync around backward and step) with the plain
    32-bit ``Precision`` plugin (mixed precision casts and scales), outside Fabric, and
    neither a callback nor the module overrides one of ``hooks``, on its class or as an
    instance attribute. Skipping the dispatch also drops those hooks' (empty) entries from a
    profiler's report."""
    trainer = module.trainer
    return (
        not module.automatic_optimization
        and module._fabric is None
        and type(trainer.strategy) is SingleDeviceStrategy
        and type(trainer.precision_plugin) is Precision
        and all(_inherited(module, hook, pl.LightningModule) for hook in hooks)
        and all(_inherited(callback, hook, pl.Callback) for callback in trainer.callbacks for hook in hooks)
    )


def _inherited(obj: Any, name: str, base: type) -> bool:
    """Whether ``obj.name`` is ``base``'s method: not overridden by its class, nor set on the instance
    (Lightning calls hooks by attribute lookup, so an instance attribute counts)."""
    return getattr(getattr(obj, name, None), "__func__", None) is getattr(base, name)


def backward_runs_alone(module: pl.LightningModule) -> bool:
    """Whether Lightning's ``manual_backward`` would run nothing but ``loss.backward()`` in this fit.

    :func:`_lightning_call_is_plain` for ``on_before_backward`` / ``on_after_backward``, and the
    module keeps ``LightningModule.backward``.
    """
    return _lightning_call_is_plain(module, BACKWARD_HOOKS) and _inherited(module, "backward", pl.LightningModule)


def backward_without_engine(loss: torch.Tensor) -> bool:
    """``loss.backward()`` by the ``accumulate_grads(node)`` of the autograd Function that made ``loss``, if it has one.

    A Function whose backward is written out may offer it (PPO's
    ``_ActorCriticObjective.accumulate_grads``): it adds the same gradients to ``.grad``
    without autograd's engine, or returns ``False`` where that would not be the same. Only
    for a :func:`backward_runs_alone` fit: nothing else may need to see the backward.

    Returns:
        Whether the gradients were accumulated (``False``: call ``loss.backward()``).
    """
    node = loss.grad_fn
    accumulate = getattr(getattr(node, "_forward_cls", None), "accumulate_grads", None)
    return accumulate is not None and accumulate(node)


def optimizer_step_runs_alone(module: pl.LightningModule) -> bool:
    """Whether a ``LightningOptimizer.step()`` would run nothing but the torch optimizer's step between
    Lightning's progress callbacks in this fit: :func:`_lightning_call_is_plain` for
    ``on_before_optimizer_step``."""
    return _lightning_call_is_plain(module, OPTIMIZER_STEP_HOOKS)


class RLModule(pl.LightningModule):
    """Base class of the algorithms (one level of inheritance: ``PPO(RLModule)``).

    Subclasses implement :meth:`build_policy`, ``training_step`` and ``configure_optimizers``.

    Args:
        total_timesteps: Environment-step budget over all ranks; training stops after the
            epoch that reaches it.
        save_interval: Epochs between checkpoints (plus an always-current ``last.ckpt`` and
            ``best.ckpt``, the highest ``eval/return_mean`` so far);
            ``None`` leaves checkpointing to the Trainer's own callbacks.
        keep_last: Interval checkpoints kept on disk (the newest; ``last.ckpt`` and
            ``best.ckpt`` come on top); ``None`` keeps every one.
        on_nonfinite: ``"stop"``: a NaN or inf in observations, rewards, losses or gradients
            ends the run with a message naming where it appeared (the last good checkpoint
            stays the newest); ``"skip"``: such an update is skipped (counted in
            ``train/skipped_updates``) and such an env episode is cut short (counted in
            ``rollout/nonfinite_steps``).
    """

    #: The data module class this algorithm's training_step expects batches from.
    datamodule_class: type | None = None

    def __init__(
        self,
        total_timesteps: int,
        save_interval: int | None = None,
        keep_last: int | None = 5,
        on_nonfinite: str = "stop",
    ):
        super().__init__()
        if not isinstance(total_timesteps, int) or isinstance(total_timesteps, bool) or total_timesteps <= 0:
            raise ValueError(f"total_timesteps must be a positive integer, got {total_timesteps!r}.")
        if save_interval is not None and (not isinstance(save_interval, int) or save_interval <= 0):
            raise ValueError(f"save_interval must be a positive integer or None, got {save_interval!r}.")
        if keep_last is not None and (not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last <= 0):
            raise ValueError(f"keep_last must be a positive integer or None (keep all), got {keep_last!r}.")
        if on_nonfinite not in ON_NONFINITE:
            raise ValueError(f"on_nonfinite must be one of {ON_NONFINITE}, got {on_nonfinite!r}.")
        self.total_timesteps = total_timesteps
        self.save_interval = save_interval
        self.policy: nn.Module | None = None
        #: An acting copy of ``policy`` on another device or dtype (set by the ``ActorSync`` callback).
        self.actor: ActorCopy | None = None
        self._spaces: tuple[gym.Space, gym.Space] | None = None
        self._fit_start: tuple[float, int] | None = None
        self._eval_returns: dict[str, float] = {}
        self._skipped_updates = 0
        self._interruption: Interruption | None = None
        #: The loss terms of the update in progress (automatic optimization: named if it is refused).
        self.update_losses: Any = None
        #: Whether ``manual_backward`` may be a plain ``loss.backward()`` and ``step_optimizer``
        #: the torch optimizer's step (decided at fit start).
        self._plain_backward = self._plain_optimizer_step = False

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
        """Build the policy from the data module's env spaces; make checkpoint writes atomic."""
        #: Whether a loop (training, validation, test) has started: the front doors explain the
        #: library's refusals, which all come before, and keep the traceback of anything later.
        self.loops_started = False
        if self._trainer is not None:
            install_atomic_checkpoint_io(self.trainer)
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
        """Clip to the algorithm's ``max_grad_norm`` unless the Trainer was given its own clipping value,
        and refuse (or skip) a non-finite update (:meth:`gradients_finite`).

        Used by automatically optimized algorithms (DQN), where Lightning calls it between backward
        and the optimizer step; PPO and SAC optimize manually and call :meth:`gradients_finite` by hand.
        A skipped update leaves no gradients, so the optimizer step changes nothing.
        """
        if gradient_clip_val is not None:
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)
        if not self.gradients_finite(optimizer, self.update_losses, clip=gradient_clip_val is None):
            terms = getattr(self, "_train_terms", None)
            if terms:  # the epoch's train/ means are over the updates that were applied
                terms.pop()

    def gradients_finite(
        self, optimizer: torch.optim.Optimizer, losses: Any, clip_per_group: bool = False, clip: bool = True
    ) -> bool:
        """Clip the gradients to ``max_grad_norm`` (if set) and tell whether the update may go ahead.

        Called after backward, when DDP has already averaged the gradients: a NaN on any rank
        is then a NaN on every rank, so every rank takes the same decision without another
        collective. Non-finite gradients (a NaN or inf loss always leads there) stop the run
        with :class:`~rl_lightning.faults.NumericalFault` naming the loss terms and parameters
        where they appeared, or, with ``on_nonfinite="skip"``, drop the gradients (Adam skips
        parameters without one) and count the skipped update.

        The norm is computed once for the check and for clipping (what ``clip_grad_norm_``
        does, see :func:`_total_norm`), and clipping waits for the check, so a report names
        the parameters that were non-finite rather than every one a NaN norm would have scaled.

        Args:
            optimizer: The optimizer about to step.
            losses: The loss terms of this update (a mapping, NamedTuple or dataclass of
                tensors), read only for the message.
            clip_per_group: Clip each parameter group to the norm on its own (SAC's actor,
                critics and temperature, as separate optimizers would).
            clip: Clip to ``max_grad_norm``; ``False`` only checks (the Trainer clipped already).

        Returns:
            ``True`` when the optimizer should step.
        """
        max_norm = self.hparams.get("max_grad_norm") if clip else None
        if clip_per_group and max_norm is not None:
            groups = [group["params"] for group in optimizer.param_groups]
        else:  # one norm for the check (and for clipping all groups together)
            groups = [[p for group in optimizer.param_groups for p in group["params"]]]
        norms = []
        grouped = []  # (gradients, whether the foreach kernels take them), per clipping group
        for params in groups:
            grads = [p.grad for p in params if p.grad is not None]
            if grads:
                foreach = _foreach_ok(grads)
                grouped.append((grads, foreach))
                norms.append(_total_norm(grads, foreach))
        if not norms:
            return True
        # One check (one device sync) of the sum of the norms and, in a single process, the
        # losses (a NaN or inf in any addend makes the sum one): a NaN can sit in a loss without
        # reaching the gradients. Under DDP only the averaged gradients are checked, the one
        # thing every rank sees alike, so every rank decides the same.
        total = norms[0] if len(norms) == 1 else torch.stack(norms).sum()
        if self.trainer.world_size == 1:
            for loss in _loss_tensors(losses):
                total = total + loss.detach().reshape(())
        if bool(total.isfinite()):
            if max_norm is not None:
                for (grads, foreach), norm in zip(grouped, norms, strict=True):
                    _scale_to_norm(grads, max_norm, norm, foreach)
            return True
        where = self._nonfinite_report(optimizer, losses)
        if self.hparams.get("on_nonfinite", "stop") == "stop":
            raise NumericalFault(
                f"{type(self).__name__}: non-finite {where} at gradient step {self.global_step} "
                f"(env step {self.env_steps:,}, epoch {self.current_epoch}); the update was not applied. "
                f"{self._last_good_checkpoint()} Fix: check the env's observations and rewards (env.obs_bound clips "
                "observations), lower the learning rate, clip gradients (algo.max_grad_norm), or skip such updates "
                "with algo.on_nonfinite=skip."
            )
        clear_grads(optimizer)
        self._skipped_updates += 1
        return False

    def _nonfinite_report(self, optimizer: torch.optim.Optimizer, losses: Any) -> str:
        """Which loss terms and parameters' gradients hold a NaN or inf (the failure path only)."""
        terms = _named_loss_tensors(losses)
        bad_losses = [
            f"{name}={float(value.detach()):g}" for name, value in terms.items() if not torch.isfinite(value).all()
        ]
        names = {id(p): name for name, p in self.named_parameters()}
        bad_params = [
            names.get(id(p), "?")
            for group in optimizer.param_groups
            for p in group["params"]
            if p.grad is not None and not torch.isfinite(p.grad).all()
        ]
        parts = []
        if bad_losses:
            parts.append(f"loss ({', '.join(bad_losses)})")
        if bad_params:
            shown = ", ".join(bad_params[:4]) + (f" and {len(bad_params) - 4} more" if len(bad_params) > 4 else "")
            parts.append(f"gradients of {shown}")
        return " and ".join(parts) or "gradient norm (overflow)"

    def _last_good_checkpoint(self) -> str:
        callback = self.trainer.checkpoint_callback if self._trainer is not None else None
        path = getattr(callback, "last_model_path", "") or ""
        if path and os.path.isfile(path):
            return f"The last good checkpoint is {path}."
        return "No checkpoint was written before it (set algo.save_interval to keep some)."

    def pop_skipped_updates(self) -> dict[str, float]:
        """``{"train/skipped_updates": n}`` since the last call, with ``on_nonfinite="skip"``; else nothing."""
        if self.hparams.get("on_nonfinite", "stop") != "skip":
            return {}
        skipped, self._skipped_updates = self._skipped_updates, 0
        return {"train/skipped_updates": float(skipped)}

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
        """When fitting: the budget, a checkpoint on interruption; with ``save_interval``, interval
        checkpoints (the last ``keep_last`` kept) and ``best.ckpt``."""
        if self._trainer is None or self.trainer.state.fn != TrainerFn.FITTING:
            return []
        callbacks: list[pl.Callback] = [EnvStepBudget(self.total_timesteps)]
        self._interruption = next((c for c in self.trainer.callbacks if isinstance(c, Interruption)), None)
        if self._interruption is None:
            self._interruption = Interruption()
            callbacks.append(self._interruption)
        if self.save_interval is not None:
            # Interval first: trainer.checkpoint_callback (the last.ckpt path) is the first one.
            keep_last = self.hparams.get("keep_last", 5)
            callbacks += [IntervalCheckpoint(self.save_interval, keep_last=keep_last), BestCheckpoint()]
        return callbacks

    def on_fit_start(self) -> None:
        check_clipping_strategy(self.trainer.strategy, self.hparams.get("max_grad_norm"))
        if str(self.trainer.precision).startswith("16"):
            # With a GradScaler the gradients are still scaled when clipping and the NaN/inf
            # check see them (it unscales inside the optimizer step), and its routine overflow
            # steps would read as numerical faults.
            raise ValueError(
                f"precision={self.trainer.precision!r} (float16 with a gradient scaler) is not supported: the "
                "algorithms clip and check gradients themselves. Use trainer.precision=bf16-mixed or 32."
            )
        self._fit_start = (time.perf_counter(), self.env_steps)
        self._plain_backward = backward_runs_alone(self)
        self._plain_optimizer_step = optimizer_step_runs_alone(self)

    def on_fit_end(self) -> None:
        self._plain_backward = self._plain_optimizer_step = False

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Lightning's ``manual_backward``, or ``loss.backward()`` where Lightning would run nothing else.

        On one device in 32-bit precision, with no callback and no module override of
        ``on_before_backward``, ``on_after_backward`` or ``backward``, Lightning's call amounts to
        ``loss.backward()`` wrapped in hook dispatch: calling it directly saves 0.13 ms per
        gradient step (0.63 against 0.76 ms for a CleanRL-settings PPO minibatch, interleaved
        inside a fit; about 3% of a PPO iteration). Anything else takes Lightning's path, so
        every hook that does something still runs (:func:`backward_runs_alone`).
        """
        if self._plain_backward and not args and not kwargs:
            if not backward_without_engine(loss):
                loss.backward()
        else:
            super().manual_backward(loss, *args, **kwargs)

    def step_optimizer(self, optimizer: LightningOptimizer) -> None:
        """``optimizer.step()``, or where Lightning would add nothing but progress tracking, the torch step inside it.

        ``LightningOptimizer.step`` goes through the strategy, the precision plugin and a
        closure to call ``on_before_optimizer_step``; when nothing overrides that hook on one
        device in 32-bit precision (:func:`optimizer_step_runs_alone`), this calls the torch
        optimizer between the same two progress callbacks the manual-optimization loop
        installs on it (``global_step`` and the profiler's ``optimizer_step`` count as
        before): 0.25 against 0.33 ms per PPO minibatch step, interleaved inside a fit.
        """
        if self._plain_optimizer_step:
            optimizer._on_before_step()
            optimizer.optimizer.step()
            optimizer._on_after_step()
        else:
            optimizer.step()

    def on_train_start(self) -> None:
        self.loops_started = True

    def on_validation_start(self) -> None:
        self.loops_started = not self.trainer.sanity_checking

    def on_test_start(self) -> None:
        self.loops_started = True

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Stop here if an interruption was requested (after the algorithm's own batch-end work)."""
        if self._interruption is not None:
            stop_if_requested(self.trainer, self.device)

    def log_rollout_metrics(self, rank_metrics: Mapping[str, float] | None = None) -> None:
        """Log ``rollout/`` and ``time/`` metrics of the rollout that fed this epoch, with the caller's own.

        The env fault counters of the epoch (``rollout/env_restarts``, ``rollout/nonfinite_steps``,
        ``rollout/obs_clipped``, see :class:`~rl_lightning.envs.EpisodeStats`) are summed over ranks.

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
        episodes = rollout.episodes
        returns, lengths = np.asarray(episodes.returns), np.asarray(episodes.lengths)
        ev = rollout.explained_variance
        faults = [episodes.env_restarts, episodes.nonfinite_steps, episodes.obs_clipped]
        sums = self._global_sums(
            [len(returns), returns.sum(), lengths.sum(), not math.isnan(ev), np.nan_to_num(ev), *faults]
        )
        total, return_sum, length_sum, ev_count, ev_sum, restarts, nonfinite, clipped = sums.tolist()
        global_metrics = {"train/explained_variance": ev_sum / ev_count} if ev_count else {}
        # Counts of env fault events this epoch, over all ranks (envs/env_group.py).
        global_metrics["rollout/env_restarts"] = restarts
        global_metrics["rollout/nonfinite_steps"] = nonfinite
        global_metrics["rollout/obs_clipped"] = clipped
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
        # Interval checkpoints are named from callback_metrics["step"] at validation end, which
        # comes before this epoch's on_train_epoch_end logging: keep it the current env-step count.
        self.trainer.callback_metrics["step"] = torch.tensor(float(self.env_steps))

    def on_test_epoch_end(self) -> None:
        self._end_evaluation()

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
        # on_load_checkpoint has no trainer here to ask for the file's name or the strictness, and
        # Lightning has written the settings given here over the checkpoint's by then.
        overrides = {
            k: v for k, v in kwargs.items() if k not in ("map_location", "hparams_file", "strict", "weights_only")
        }
        token = _LOADING.set({"path": path, "strict": kwargs.get("strict") is not False, "overrides": overrides})
        try:
            return super().load_from_checkpoint(checkpoint_path, *args, **kwargs)
        finally:
            _LOADING.reset(token)

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
        """Rebuild the policy from the stored spaces before the weights are loaded.

        Everything is checked here, before Lightning loads a tensor or the data module's
        counters, so a refused checkpoint leaves the run (and the file) as it was.

        Raises:
            ValueError: Naming the file and the fix when the checkpoint was not written by
                rl_lightning, holds another algorithm, was trained on other observation or
                action spaces than this model's env, or its weights do not fit this model's
                settings (the settings that differ are listed).
        """
        name = type(self).__name__
        path = _checkpoint_path(self)
        where = f"Checkpoint '{path}'" if path else "This checkpoint"
        meta = checkpoint.get(CHECKPOINT_KEY)
        if meta is None:
            raise ValueError(
                f"{where} was not written by rl_lightning (it has no '{CHECKPOINT_KEY}' entry), so {name} cannot "
                "rebuild its policy from it. Load it with the class that wrote it, or pass a checkpoint from an "
                "rl_lightning run's checkpoints/ directory."
            )
        algorithm = meta["algorithm"]
        if algorithm != name:
            raise ValueError(
                f"{where} holds a {algorithm} model, not a {name} one. Load it with {algorithm}.load_from_checkpoint "
                f"(Hydra: algo={algorithm.lower()}; CLI: --model {algorithm}), or pass a {name} checkpoint."
            )
        spaces = (space_from_dict(meta["observation_space"]), space_from_dict(meta["action_space"]))
        if self.policy is not None and self._spaces != spaces:
            raise ValueError(_spaces_mismatch(self, where, checkpoint, spaces))
        self._ensure_policy(*spaces)
        problem = _weights_mismatch(self, checkpoint)
        if problem is not None:
            raise ValueError(f"{where} does not fit this {name}: {problem}")


#: The file and strictness of a ``load_from_checkpoint`` in progress (no trainer holds them there).
_LOADING: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("rl_lightning_loading", default=None)


def _checkpoint_path(module: RLModule) -> str | None:
    """The file being loaded: the trainer's ``ckpt_path`` (fit/validate/test) or ``load_from_checkpoint``'s."""
    trainer = module._trainer
    path = trainer.ckpt_path if trainer is not None else (_LOADING.get() or {}).get("path")
    return None if path is None else os.fspath(path)


def _describe_space(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Box):
        return f"Box{tuple(space.shape)}"
    if isinstance(space, gym.spaces.Discrete):
        return f"Discrete({int(space.n)})"
    return str(space)


def _spaces_mismatch(module: RLModule, where: str, checkpoint: dict[str, Any], spaces: tuple) -> str:
    """Explain a checkpoint trained on other spaces than the env this model was built for."""
    saved_env = (checkpoint.get("datamodule_hyper_parameters") or {}).get("env")
    datamodule = getattr(module._trainer, "datamodule", None) if module._trainer else None
    env = getattr(datamodule, "hparams", {}).get("env") or "the data module's env"
    saved = f"{_describe_space(spaces[0])} observations, {_describe_space(spaces[1])} actions"
    own = f"{_describe_space(module._spaces[0])} observations, {_describe_space(module._spaces[1])} actions"
    return (
        f"{where} was trained on {saved_env or 'another env'} ({saved}), but this {type(module).__name__} was "
        f"built for {env} ({own}). Give the data module the env the "
        f"checkpoint was trained on{f' (env={saved_env!r})' if saved_env else ''}, or train from scratch without "
        "the checkpoint."
    )


def _plain_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain_value(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain_value(v) for k, v in value.items()}
    return value


def _saved_hparams(checkpoint: dict[str, Any], loading: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's own settings (``load_from_checkpoint`` has written the ones it was given over them)."""
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    overrides, path = loading.get("overrides") or {}, loading.get("path")
    if overrides and path:
        try:  # only on the way to an error: mmap reads the settings without the tensors
            original = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("hyper_parameters")
        except Exception:  # noqa: BLE001 - then the settings given are compared as they are
            original = None
        for key in overrides:
            if original and key in original:
                hparams[key] = original[key]
    return hparams


def _weights_mismatch(module: RLModule, checkpoint: dict[str, Any]) -> str | None:
    """Why the checkpoint's ``state_dict`` cannot load into ``module`` (``None`` if it can).

    Compared before loading, so the user gets the settings that differ rather than PyTorch's
    list of tensors. Tensors whose shapes differ always refuse the load; entries present on
    one side only do when the settings differ too (otherwise a subclass may still rename
    them, as SAC does for old checkpoints, or the load is not strict).
    """
    saved = checkpoint.get("state_dict") or {}
    own = module.state_dict()
    shapes = [
        (key, tuple(saved[key].shape), tuple(value.shape))
        for key, value in own.items()
        if key in saved and hasattr(saved[key], "shape") and tuple(saved[key].shape) != tuple(value.shape)
    ]
    if not shapes and set(saved) == set(own):
        return None
    loading = _LOADING.get() or {}
    saved_hparams = _saved_hparams(checkpoint, loading)
    differ = [
        (key, _plain_value(saved_hparams[key]), _plain_value(value))
        for key, value in module.hparams.items()
        if not key.startswith("_") and key in saved_hparams and _plain_value(saved_hparams[key]) != _plain_value(value)
    ]
    if not shapes and not (differ and module.strict_loading and loading.get("strict", True)):
        return None
    name = type(module).__name__
    given = [key for key, _, _ in differ if key in (loading.get("overrides") or {})]
    if given:
        settings = "; ".join(f"{key}: checkpoint {old!r}, given {new!r}" for key, old, new in differ if key in given)
        return (
            f"it was trained with other settings than those given to {name}.load_from_checkpoint ({settings}). "
            f"Drop {', '.join(f'{key}=...' for key in given)}: load_from_checkpoint takes the settings from the "
            "checkpoint."
        )
    if differ:
        settings = "; ".join(f"{key}: checkpoint {old!r}, this model {new!r}" for key, old, new in differ)
        return (
            f"it was trained with other settings ({settings}). Build the model with the checkpoint's settings, "
            f"or load it with {name}.load_from_checkpoint(path), which takes them from the checkpoint."
        )
    tensors = "; ".join(f"{key}: checkpoint {old}, this model {new}" for key, old, new in shapes[:3])
    return (
        f"tensor shapes differ ({tensors}{'; ...' if len(shapes) > 3 else ''}). Build the model with the "
        "networks the checkpoint was trained with (pass the same actor/critic modules)."
    )
