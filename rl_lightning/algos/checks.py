"""Checks of an algorithm against the Trainer it runs under (argument checks: ``rl_lightning/checks.py``)."""

from __future__ import annotations

from typing import Any

#: Strategies that refuse (FSDP) or ignore (DeepSpeed) the algorithms' clipping of gradients.
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
            "Set algo.max_grad_norm=null (the algorithms optimize manually, where Lightning refuses the Trainer's "
            "gradient_clip_val too)."
        )
