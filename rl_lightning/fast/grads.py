"""Gradient and parameter updates on the foreach kernels: clearing, the global norm, clipping, Polyak averaging.

torch's public functions (``Optimizer.zero_grad``, ``torch.nn.utils.get_total_norm`` and
``clip_grads_with_norm_``, a per-tensor ``lerp_`` loop) compute the same results, but first
open profiler scopes or group the tensors by device and dtype on every call. With one group
(a single-device model) going straight to the kernels saves that per-call work
(``docs/fast_path.md``). Tensors of several devices or dtypes return ``None`` or ``False``
and the caller takes torch's function.
"""

from __future__ import annotations

import torch

from rl_lightning.fast.switch import on_for


def _one_group(tensors: list[torch.Tensor]) -> bool:
    """Whether the foreach kernels take ``tensors`` at once: one device (CPU or CUDA) and one dtype."""
    first = tensors[0]
    return first.device.type in ("cpu", "cuda") and all(
        t.device == first.device and t.dtype == first.dtype for t in tensors
    )


def clear_grads(optimizer: torch.optim.Optimizer) -> bool:
    """Set the gradients of the optimizer's parameters to ``None`` (what ``zero_grad()`` does) by a plain loop.

    Returns:
        ``False`` (nothing done) with the fast path off.
    """
    if not on_for("torch"):
        return False
    for group in optimizer.param_groups:
        for param in group["params"]:
            param.grad = None
    return True


def total_norm(grads: list[torch.Tensor]) -> torch.Tensor | None:
    """The L2 norm of all ``grads`` taken as one vector (``get_total_norm``), or ``None`` (use torch's)."""
    if not (on_for("torch") and _one_group(grads)):
        return None
    return torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))


@torch.no_grad()
def scale_to_norm(grads: list[torch.Tensor], max_norm: float, norm: torch.Tensor) -> bool:
    """Scale ``grads`` in place so their norm is at most ``max_norm`` (``clip_grads_with_norm_``'s rule).

    Returns:
        ``False`` (nothing done) where torch's function must run.
    """
    if not (on_for("torch") and _one_group(grads)):
        return False
    coef = (max_norm / (norm + 1e-6)).clamp_(max=1.0)
    torch._foreach_mul_(grads, coef.to(grads[0].device))
    return True


@torch.no_grad()
def polyak(targets: list[torch.Tensor], sources: list[torch.Tensor], tau: float) -> bool:
    """``target <- (1 - tau) target + tau source`` for every pair, in one foreach call.

    Returns:
        ``False`` (nothing done) where a per-tensor ``lerp_`` loop must run.
    """
    if not (on_for("torch") and targets and _one_group(targets + sources)):
        return False
    torch._foreach_lerp_(targets, sources, tau)
    return True
