"""``FusedAdam``: ``Adam(fused=True)`` whose step calls the fused kernel itself where nothing else would run.

Why: on small networks the optimizer's Python around the kernel costs more than the kernel.
``Optimizer.step`` opens a profiler scope (``record_function``, even with no profiler
running), dispatches the step hooks, and ``torch.optim.adam._fused_adam`` groups the
tensors by device and dtype on every call before its two kernel calls; for PPO's
actor-critic that is more than the two kernel calls themselves (``docs/fast_path.md``).

What is the same: the kernel calls, their arguments and order (``_foreach_add_`` on the
step counts, then ``_fused_adam_`` per group), hence the same parameters and state to the
bit (``tests/fast/test_adam.py``), the same ``state_dict``, and the class is an
``Adam``. What is skipped only where it would do nothing: hooks (none registered, the
optimizer's own or global), the profiler scope (no profiler enabled), the grouping (every
group holds one device and dtype). Anything else goes through ``Adam.step`` unchanged: a
closure, hooks, a running profiler, the first step (it creates the state), parameters of
several dtypes or devices in a group, AMSGrad, ``maximize``, ``capturable``,
``differentiable``, decoupled weight decay, a tensor learning rate or betas, a gradient
scaler's ``grad_scale``/``found_inf``, ``torch.compile`` tracing, and the fast path switched off.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim import optimizer as _optimizer

from rl_lightning.fast.switch import on_for

#: Group options under which ``Adam.step`` does more than the two fused calls.
_OTHER_PATHS = ("amsgrad", "maximize", "capturable", "differentiable", "decoupled_weight_decay")


class FusedAdam(torch.optim.Adam):
    """``torch.optim.Adam`` with ``fused=True``; ``step`` runs the fused kernel directly where that is all it would do.

    Args:
        params: Tensors or parameter groups, as for ``torch.optim.Adam``.
        **kwargs: ``torch.optim.Adam``'s options (``fused`` is set).
    """

    def __init__(self, params, **kwargs):
        super().__init__(params, **{**kwargs, "fused": True})

    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One Adam step (see the module docstring for when it bypasses ``Adam.step``)."""
        if closure is None and self._step_fused():
            return None
        return super().step(closure)  # Adam.step, with the profiler scope and hooks around it

    # Optimizer.__init__ wraps a subclass's step in the profiler scope and hook dispatch
    # (``_patch_step_function``) unless it is marked as wrapped already: this one dispatches
    # to the wrapped Adam.step itself whenever a hook or profiler is there to see it.
    step.hooked = True

    def _step_fused(self) -> bool:
        """The fused kernel calls on every group, or ``False`` (nothing done) where ``Adam.step`` is needed."""
        if (
            not on_for("torch")
            or self._optimizer_step_pre_hooks
            or self._optimizer_step_post_hooks
            or _optimizer._global_optimizer_pre_hooks
            or _optimizer._global_optimizer_post_hooks
            or torch.autograd.profiler._is_profiler_enabled
            or torch.compiler.is_compiling()
            or getattr(self, "grad_scale", None) is not None
            or getattr(self, "found_inf", None) is not None
        ):
            return False
        calls = []  # everything is checked before anything is written
        state = self.state
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            if (
                not group["fused"]
                or any(group.get(option) for option in _OTHER_PATHS)
                or isinstance(group["lr"], torch.Tensor)
                or isinstance(beta1, torch.Tensor)
                or isinstance(beta2, torch.Tensor)
            ):
                return False
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            dtype = device = None
            for param in group["params"]:
                grad = param.grad  # of the parameter's dtype and device (the .grad setter ensures it)
                if grad is None:  # Adam skips a parameter without a gradient
                    continue
                param_state = state.get(param)
                if not param_state or grad.is_sparse:
                    return False  # the first step (it creates the state), or what Adam.step refuses
                if dtype is None:
                    dtype, device = param.dtype, param.device
                    if dtype.is_complex:
                        return False
                elif param.dtype is not dtype or param.device != device:
                    return False  # _fused_adam would group them
                step = param_state["step"]
                if not isinstance(step, torch.Tensor):
                    return False
                params.append(param)
                grads.append(grad)
                exp_avgs.append(param_state["exp_avg"])
                exp_avg_sqs.append(param_state["exp_avg_sq"])
                steps.append(step)
            if params:
                calls.append((group, beta1, beta2, params, grads, exp_avgs, exp_avg_sqs, steps))
        with torch.no_grad():  # as in Adam.step: the parameters are written in place
            for group, beta1, beta2, params, grads, exp_avgs, exp_avg_sqs, steps in calls:
                # torch.optim.adam._fused_adam's two calls for one device and dtype.
                torch._foreach_add_(steps, 1)
                torch._fused_adam_(
                    params,
                    grads,
                    exp_avgs,
                    exp_avg_sqs,
                    [],
                    steps,
                    amsgrad=False,
                    lr=group["lr"],
                    beta1=beta1,
                    beta2=beta2,
                    weight_decay=group["weight_decay"],
                    eps=group["eps"],
                    maximize=False,
                    grad_scale=None,
                    found_inf=None,
                )
        return True


def fused_adam(params, lr: float, eps: float) -> FusedAdam | None:
    """A :class:`FusedAdam` over ``params`` (tensors or groups), or ``None`` where the fused kernel does not apply.

    It needs every parameter to be a floating tensor on CPU or CUDA.
    """
    if not on_for("torch"):
        return None
    params = list(params)
    groups = params if params and isinstance(params[0], dict) else [{"params": params}]
    if all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for group in groups for p in group["params"]):
        return FusedAdam(params, lr=lr, eps=eps)
    return None
