"""Tests of the fast path's gradient helpers and Lightning-call shortcuts (rl_lightning/fast/grads.py, lightning.py)."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import PPO, fast
from rl_lightning.algos.update import clear_grads, scale_to_norm, total_norm
from rl_lightning.fast import lightning as fast_lightning
from rl_lightning.fast.lightning import backward_runs_alone, optimizer_step_runs_alone
from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data


@pytest.mark.parametrize("on", [True, False])
def test_clear_grads_empties_every_groups_gradients_and_nothing_else(on):
    """Test that clear_grads (fast loop or zero_grad) sets every group's gradients to None and leaves others alone."""
    first, second = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    other = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.Adam([{"params": [first]}, {"params": [second], "lr": 0.5}], lr=0.1)
    for p in (first, second, other):
        p.grad = torch.ones_like(p)
    fast.set_enabled(on)
    try:
        assert fast.clear_grads(optimizer) is on
        if not on:
            clear_grads(optimizer)
    finally:
        fast.set_enabled(True)
    assert first.grad is None and second.grad is None and other.grad is not None


def _grads(dtypes):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(5, 3, generator=g).to(dtype) for dtype in dtypes]


@pytest.mark.parametrize("dtypes", [[torch.float32] * 3, [torch.float32, torch.float64, torch.bfloat16]])
def test_total_norm_and_scaling_equal_torchs_clipping(dtypes):
    """Test that the norm and the in-place scaling give what get_total_norm and clip_grads_with_norm_ give.

    One dtype takes the foreach path, mixed dtypes torch's own functions.
    """
    fast_path = len(set(dtypes)) == 1
    ours, reference = _grads(dtypes), _grads(dtypes)
    assert (fast.total_norm(ours) is not None) is fast_path
    norm = total_norm(ours)
    torch.testing.assert_close(norm, torch.nn.utils.get_total_norm(reference))
    params = [torch.nn.Parameter(torch.zeros_like(t)) for t in reference]
    for param, grad in zip(params, reference, strict=True):
        param.grad = grad
    assert fast.scale_to_norm(ours, 0.5, norm) is fast_path
    if not fast_path:
        own = [torch.nn.Parameter(torch.zeros_like(t)) for t in ours]
        for param, grad in zip(own, ours, strict=True):
            param.grad = grad
        scale_to_norm(own, 0.5, norm)
    torch.nn.utils.clip_grads_with_norm_(params, 0.5, norm)
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b)
    assert float(total_norm(ours)) == pytest.approx(0.5, rel=1e-2)
    small = _grads(dtypes)
    before = [t.clone() for t in small]
    fast.scale_to_norm(small, 1e6, total_norm(small))  # below the limit: unchanged
    assert all(torch.equal(a, b) for a, b in zip(small, before, strict=True))


class _CountBackward(pl.Callback):
    """Counts Lightning's backward hooks (overriding them makes Lightning's path necessary)."""

    def __init__(self):
        self.before = self.after = 0

    def on_before_backward(self, trainer, pl_module, loss):
        self.before += 1

    def on_after_backward(self, trainer, pl_module):
        self.after += 1


class _CountOptimizerSteps(pl.Callback):
    """Counts ``on_before_optimizer_step`` (overriding it makes Lightning's optimizer path necessary)."""

    def __init__(self):
        self.calls = 0

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.calls += 1


def _fit_ppo(monkeypatch, callbacks=()):
    """Fit a tiny PPO, counting the calls that reach Lightning's strategy backward and optimizer step,
    and the backward passes that ran without autograd's engine ("direct")."""
    pl.seed_everything(3, verbose=False)
    model = tiny_ppo(total_timesteps=64)  # 2 rollouts of 2 envs x 16 steps
    trainer = quiet_trainer(callbacks=callbacks, max_epochs=-1, accelerator="cpu")  # bit-identical: CPU kernels
    calls = {"backward": 0, "optimizer_step": 0}
    for name in calls:
        real = getattr(trainer.strategy, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        setattr(trainer.strategy, name, spy)
    calls["direct"] = 0
    real_direct = fast_lightning.backward_without_engine

    def direct_spy(loss):
        done = real_direct(loss)
        calls["direct"] += done
        return done

    with monkeypatch.context() as patch:
        patch.setattr(fast_lightning, "backward_without_engine", direct_spy)
        trainer.fit(model, tiny_rollout_data(seed=3))
    return model, trainer, calls


@pytest.mark.parametrize("hooked", ["backward", "optimizer_step"])
def test_lightnings_dispatch_is_skipped_only_when_no_hook_would_run(hooked, monkeypatch):
    """Test that backward and optimizer steps skip Lightning's dispatch without hooks, and take it otherwise.

    Both paths train to bit-identical weights and count the same gradient steps; with a
    callback overriding the backward hooks (or ``on_before_optimizer_step``), that call goes
    through Lightning and every hook runs once per gradient step, while the other call stays
    direct. Without hooks, PPO's backward also skips autograd's engine (its loss offers
    ``accumulate_grads``); through Lightning it never does.
    """
    plain, plain_trainer, plain_calls = _fit_ppo(monkeypatch)
    counter = _CountBackward() if hooked == "backward" else _CountOptimizerSteps()
    hooked_model, hooked_trainer, hooked_calls = _fit_ppo(monkeypatch, [counter])
    steps = hooked_trainer.global_step
    assert steps == plain_trainer.global_step == 8  # 2 epochs x 2 update epochs x 2 minibatches
    assert plain_calls == {"backward": 0, "optimizer_step": 0, "direct": steps}
    direct = 0 if hooked == "backward" else steps
    assert hooked_calls == {"backward": 0, "optimizer_step": 0, "direct": direct, hooked: steps}
    if hooked == "backward":
        assert counter.before == counter.after == steps
    else:
        assert counter.calls == steps
    for (name, a), b in zip(plain.state_dict().items(), hooked_model.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


#: Changes that make Lightning's backward necessary but leave its optimizer step with nothing to run.
_BACKWARD_ONLY_CHANGES = ("callback", "callback_instance", "module_hook", "module_instance", "module_backward")


@pytest.mark.parametrize("change", [None, *_BACKWARD_ONLY_CHANGES, "precision", "automatic"])
def test_backward_runs_alone_only_where_lightning_would_do_nothing_else(change):
    """Test that backward_runs_alone and optimizer_step_runs_alone hold for a plain PPO on one device only.

    Backward: not with a callback or module overriding a backward hook, a module with its own
    ``backward``, mixed precision or automatic optimization. Optimizer step: not with mixed
    precision, automatic optimization or a callback overriding ``on_before_optimizer_step``.
    """

    class Hooked(PPO):
        def on_after_backward(self):
            pass

    class OwnBackward(PPO):
        def backward(self, loss, *args, **kwargs):
            loss.backward(*args, **kwargs)

    model = {"module_hook": Hooked, "module_backward": OwnBackward}.get(change, PPO)(total_timesteps=100)
    model.automatic_optimization = change == "automatic"
    callback = pl.Callback()
    if change == "module_instance":  # Lightning calls hooks by attribute: an instance's own counts
        model.on_before_backward = lambda loss: None
    if change == "callback_instance":
        callback.on_after_backward = lambda trainer, pl_module: None
    model.trainer = quiet_trainer(
        callbacks=[_CountBackward()] if change == "callback" else [callback],
        accelerator="cpu",
        **({"precision": "bf16-mixed"} if change == "precision" else {}),
    )
    assert backward_runs_alone(model) is (change is None)
    assert optimizer_step_runs_alone(model) is (change is None or change in _BACKWARD_ONLY_CHANGES)
    model.trainer = quiet_trainer(callbacks=[_CountOptimizerSteps()])
    assert not optimizer_step_runs_alone(model)
    callback.on_before_optimizer_step = lambda trainer, pl_module, optimizer: None
    model.trainer = quiet_trainer(callbacks=[callback], accelerator="cpu")
    assert not optimizer_step_runs_alone(model)
