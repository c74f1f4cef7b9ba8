"""Lightning-call shortcuts: ``manual_backward`` and ``LightningOptimizer.step`` as plain torch calls.

Where Lightning would wrap a call in nothing but dispatch to hooks that do nothing, the
call is made directly:

- ``manual_backward(loss)`` becomes ``loss.backward()``, or, for a loss whose autograd
  Function offers an ``accumulate_grads(node)`` (PPO's and SAC's written-out objectives,
  ``fast/ppo.py``, ``fast/sac.py``), the gradients added to ``.grad`` without autograd's engine.
- ``LightningOptimizer.step()`` becomes the torch optimizer's ``step()`` between the two
  progress callbacks Lightning's manual loop installs (so ``global_step`` and a profiler's
  ``optimizer_step`` count as before).

"Nothing but dispatch" is decided once per fit (:func:`plain_calls`): manual optimization on
a ``SingleDeviceStrategy`` (not a subclass: DDP and others prepare and sync around backward
and step) with the plain 32-bit ``Precision`` plugin, outside Fabric, and no callback or
module override of the hooks involved. ``docs/fast_path.md`` has the figures.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import SingleDeviceStrategy

from rl_lightning.fast.switch import on_for

BACKWARD_HOOKS = ("on_before_backward", "on_after_backward")
OPTIMIZER_STEP_HOOKS = ("on_before_optimizer_step",)


def _lightning_call_is_plain(module: pl.LightningModule, hooks: Sequence[str]) -> bool:
    """Whether, in this fit, Lightning wraps a manual-optimization call in nothing but dispatch to ``hooks``,
    none of which does anything (see the module docstring). Skipping the dispatch also drops
    those hooks' (empty) entries from a profiler's report."""
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


def optimizer_step_runs_alone(module: pl.LightningModule) -> bool:
    """Whether a ``LightningOptimizer.step()`` would run nothing but the torch optimizer's step between
    Lightning's progress callbacks in this fit: :func:`_lightning_call_is_plain` for
    ``on_before_optimizer_step``."""
    return _lightning_call_is_plain(module, OPTIMIZER_STEP_HOOKS)


@dataclasses.dataclass(frozen=True)
class PlainCalls:
    """Which of a fit's manual-optimization calls may skip Lightning's wrapping (decided at fit start)."""

    backward: bool = False
    optimizer_step: bool = False


def plain_calls(module: pl.LightningModule) -> PlainCalls:
    """:class:`PlainCalls` for this fit: all ``False`` with the switch off or outside the supported versions."""
    if not (on_for("lightning") and on_for("torch")):
        return PlainCalls()
    return PlainCalls(backward_runs_alone(module), optimizer_step_runs_alone(module))


def backward_without_engine(loss: torch.Tensor) -> bool:
    """``loss.backward()`` by the ``accumulate_grads(node)`` of the autograd Function that made ``loss``, if it has one.

    A Function whose backward is written out may offer it (``fast/ppo.py``, ``fast/sac.py``): it adds the
    same gradients to ``.grad`` without autograd's engine, or returns ``False`` where that
    would not be the same. Only for a :func:`backward_runs_alone` fit: nothing else may need
    to see the backward.

    Returns:
        Whether the gradients were accumulated (``False``: call ``loss.backward()``).
    """
    node = loss.grad_fn
    accumulate = getattr(getattr(node, "_forward_cls", None), "accumulate_grads", None)
    return accumulate is not None and accumulate(node)


def engine_free_leaves(edges: Sequence[tuple[Any, int]]) -> list[torch.Tensor | None] | None:
    """The tensors behind a graph node's edges, where its backward may skip autograd's engine.

    For an ``accumulate_grads(node)`` (see :func:`backward_without_engine`): the engine's
    result is ``.grad`` set or summed on each input only when every edge ends at a leaf with no
    tensor hook (its ``AccumulateGrad`` node) and anomaly detection is off.

    Returns:
        One entry per edge, the leaf or ``None`` (an input without gradient); ``None``
        where the engine must run.
    """
    if torch.is_anomaly_enabled():
        return None
    leaves = []
    for fn, _ in edges:
        leaf = getattr(fn, "variable", None) if fn is not None else None
        if fn is not None and (leaf is None or leaf._backward_hooks or leaf._post_accumulate_grad_hooks):
            return None
        leaves.append(leaf)
    return leaves


def add_to_grads(leaves: Sequence[torch.Tensor | None], grads: Sequence[torch.Tensor | None]) -> None:
    """Add ``grads`` to the leaves' ``.grad`` as ``AccumulateGrad`` does: set where there is none, else summed."""
    for leaf, grad in zip(leaves, grads, strict=True):
        if leaf is not None and grad is not None:
            if leaf.grad is None:
                leaf.grad = grad.contiguous()  # AccumulateGrad's layout for a contiguous parameter
            else:
                leaf.grad += grad


def backward(loss: torch.Tensor) -> None:
    """``loss.backward()``, without autograd's engine where the loss's Function offers that."""
    if not backward_without_engine(loss):
        loss.backward()


def optimizer_step(optimizer: LightningOptimizer) -> None:
    """The torch optimizer's step between the progress callbacks ``LightningOptimizer.step`` would call."""
    optimizer._on_before_step()
    optimizer.optimizer.step()
    optimizer._on_after_step()
