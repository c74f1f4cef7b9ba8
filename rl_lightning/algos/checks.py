"""Checks of an algorithm against the Trainer and the data it runs with (argument checks: rl_lightning/checks.py)."""

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


def check_rollout_cut(rollout_steps: int, num_envs: int, length: int, num_minibatches: int) -> None:
    """Refuse, naming the fix, a rollout that does not cut into whole sequences of ``length`` steps (PPO's
    ``sequence_length``) and ``num_minibatches`` equal minibatches of them."""
    if rollout_steps % length:
        raise ValueError(
            f"bptt_length={length} does not divide rollout_steps={rollout_steps}: each env's rollout is cut into "
            "sequences of bptt_length steps. Choose a divisor (Hydra: algo.bptt_length), or change "
            "data.rollout_steps."
        )
    sequences = num_envs * rollout_steps // length
    if sequences % num_minibatches:
        raise ValueError(f"num_minibatches={num_minibatches} does not divide the rollout's sequences of {length} "
                         f"step(s): rollout_steps x num_envs{' / L' * (length > 1)} = {rollout_steps} x {num_envs}"
                         f"{f' / {length}' * (length > 1)} = {sequences}; "
                         "choose a divisor so every minibatch has the same size: PPO(num_minibatches=...) (Hydra: "
                         "algo.num_minibatches=...; CLI: --model.num_minibatches).")  # fmt: skip
