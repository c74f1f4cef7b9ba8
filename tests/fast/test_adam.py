"""Tests that FusedAdam steps exactly as torch.optim.Adam(fused=True), and takes Adam.step wherever that does more."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from rl_lightning.algos.update import adam
from rl_lightning.fast.adam import FusedAdam


def _params(seed=0, dtypes=(torch.float32,) * 4):
    g = torch.Generator().manual_seed(seed)
    shapes = [(8, 4), (8,), (3, 8), (3,)]
    pairs = zip(shapes, dtypes, strict=True)
    return [torch.nn.Parameter(torch.randn(shape, generator=g).to(dtype)) for shape, dtype in pairs]


def _groups(params):
    return [
        {"params": params[:2]},
        {"params": params[2:], "lr": 0.03, "weight_decay": 0.1},
    ]


def _set_grads(params, step, skip_last=False):
    g = torch.Generator().manual_seed(100 + step)
    for i, p in enumerate(params):
        p.grad = None if skip_last and i == len(params) - 1 else torch.randn(p.shape, generator=g).to(p.dtype)


class _CountAdamStep:
    """Counts FusedAdam's calls of torch.optim.Adam.step (the path it falls back to)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        real = torch.optim.Adam.step

        def counted(optimizer, *args, **kwargs):
            self.calls += type(optimizer) is FusedAdam
            return real(optimizer, *args, **kwargs)

        monkeypatch.setattr(torch.optim.Adam, "step", counted)


def _run(make, steps=6, **options):
    params = _params()
    optimizer = make(_groups(params), **options)
    for step in range(steps):
        _set_grads(params, step, skip_last=step in (2, 3))  # Adam skips a parameter without a gradient
        if step == 4:
            for group in optimizer.param_groups:
                group["lr"] *= 0.5  # annealed between steps, as PPO does
        optimizer.step()
    return params, optimizer


def _assert_same(params, optimizer, ref_params, reference):
    for p, q in zip(params, ref_params, strict=True):
        assert torch.equal(p, q)
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(optimizer.state[p][key], reference.state[q][key]), key


def test_fused_adam_steps_bit_identically_to_adam_and_skips_adam_step_after_the_first(monkeypatch):
    """Test parameters and state against Adam(fused=True) over steps with a missing gradient and a changed lr."""
    ref_params, reference = _run(lambda groups: torch.optim.Adam(groups, lr=0.01, eps=1e-5, fused=True))
    counter = _CountAdamStep(monkeypatch)
    params, optimizer = _run(lambda groups: FusedAdam(groups, lr=0.01, eps=1e-5))
    assert counter.calls == 1  # the first step creates the state through Adam.step; the other five are direct
    _assert_same(params, optimizer, ref_params, reference)
    assert isinstance(optimizer, torch.optim.Adam) and optimizer.defaults["fused"]


def test_fused_adam_continues_identically_after_a_state_dict_round_trip():
    """Test that a FusedAdam loaded from a state dict continues as Adam(fused=True) loaded from it."""
    params, optimizer = _run(lambda groups: FusedAdam(groups, lr=0.01), steps=3)
    saved = optimizer.state_dict()
    copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    ref_copies = [torch.nn.Parameter(p.detach().clone()) for p in params]
    resumed = FusedAdam(_groups(copies), lr=0.01)
    resumed.load_state_dict(copy.deepcopy(saved))  # loading keeps the saved tensors: one copy each
    reference = torch.optim.Adam(_groups(ref_copies), lr=0.01, fused=True)
    reference.load_state_dict(copy.deepcopy(saved))
    for step in range(3, 6):
        for ps in (copies, ref_copies):
            _set_grads(ps, step)
        resumed.step()
        reference.step()
    _assert_same(copies, resumed, ref_copies, reference)


@pytest.mark.parametrize(
    "why", ["pre_hook", "post_hook", "global_hook", "profiler", "closure", "amsgrad", "mixed_dtypes", "maximize"]
)
def test_fused_adam_takes_adam_step_where_it_does_more(why, monkeypatch):
    """Test that hooks, a profiler, a closure and the options the direct path does not cover go through Adam.step,
    with Adam's results and every hook run."""
    options = {"amsgrad": True} if why == "amsgrad" else {"maximize": True} if why == "maximize" else {}
    dtypes = (torch.float32, torch.float64, torch.float32, torch.float32) if why == "mixed_dtypes" else None
    params = _params(dtypes=dtypes) if dtypes else _params()
    ref_params = [torch.nn.Parameter(p.detach().clone()) for p in params]
    optimizer = FusedAdam(_groups(params), lr=0.01, **options)
    reference = torch.optim.Adam(_groups(ref_params), lr=0.01, fused=True, **options)
    seen, handles = [], []
    if why == "pre_hook":
        handles.append(optimizer.register_step_pre_hook(lambda *a: seen.append("pre")))
    elif why == "post_hook":
        handles.append(optimizer.register_step_post_hook(lambda *a: seen.append("post")))
    elif why == "global_hook":
        handles.append(
            register_optimizer_step_pre_hook(lambda opt, *a: seen.append("global") if opt is optimizer else None)
        )
    try:
        _set_grads(params, 0)
        _set_grads(ref_params, 0)
        optimizer.step()  # the state exists from here on
        reference.step()
        counter = _CountAdamStep(monkeypatch)
        for step in range(1, 4):
            _set_grads(params, step)
            _set_grads(ref_params, step)
            if why == "profiler":
                with torch.profiler.profile() as prof:
                    optimizer.step()
                assert any(e.name == "Optimizer.step#FusedAdam.step" for e in prof.events())
            elif why == "closure":
                assert optimizer.step(lambda: 7.0) == 7.0
            else:
                optimizer.step()
            reference.step()
    finally:
        for handle in handles:
            handle.remove()
    assert counter.calls == 3
    if why in ("pre_hook", "post_hook", "global_hook"):
        assert len(seen) == 4
    _assert_same(params, optimizer, ref_params, reference)


def test_fused_adam_with_an_lr_scheduler_gives_no_order_warning():
    """Test that a scheduler sees the direct steps as optimizer steps (no 'scheduler before optimizer' warning)."""
    params = _params()
    optimizer = FusedAdam(params, lr=0.01)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for step in range(3):
            _set_grads(params, step)
            optimizer.step()
            scheduler.step()
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.01 * 0.5**3)


def test_adam_factory_is_fused_where_the_parameters_allow_it():
    """Test that adam() gives a FusedAdam for floating CPU parameters and torch's Adam otherwise."""
    assert type(adam(_params(), lr=0.01)) is FusedAdam
    meta = torch.nn.Parameter(torch.empty(3, device="meta"))
    assert type(adam([meta], lr=0.01)) is torch.optim.Adam
