"""Argument checks shared by the algorithms: each names the argument, the value and what is allowed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


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


def check_positive_int(none: str | None = None, **values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a positive integer.

    Args:
        none: Where ``None`` is allowed, what it means (e.g. ``"None (keep all)"``); ``None``
            refuses it.
        **values: The arguments by name.
    """
    for name, value in values.items():
        if value is None and none is not None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            allowed = f"a positive integer or {none}" if none is not None else "a positive integer"
            raise ValueError(f"{name} must be {allowed}, got {value!r}.")
