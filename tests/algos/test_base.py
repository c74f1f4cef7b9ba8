"""Tests of the gradient helpers shared by the algorithms (rl_lightning/algos/base.py)."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.algos.base import _scale_to_norm, _total_norm, clear_grads


def test_clear_grads_empties_every_groups_gradients_and_nothing_else():
    """Test that clear_grads sets the gradients of every parameter group to None and leaves other tensors' alone."""
    first, second = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    other = torch.nn.Parameter(torch.ones(1))
    optimizer = torch.optim.Adam([{"params": [first]}, {"params": [second], "lr": 0.5}], lr=0.1)
    for p in (first, second, other):
        p.grad = torch.ones_like(p)
    clear_grads(optimizer)
    assert first.grad is None and second.grad is None and other.grad is not None


def _grads(dtypes):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(5, 3, generator=g).to(dtype) for dtype in dtypes]


@pytest.mark.parametrize("dtypes", [[torch.float32] * 3, [torch.float32, torch.float64, torch.bfloat16]])
def test_total_norm_and_scaling_equal_torchs_clipping(dtypes):
    """Test that the norm and the in-place scaling give what get_total_norm and clip_grads_with_norm_ give.

    One dtype takes the foreach path, mixed dtypes torch's own functions.
    """
    ours, reference = _grads(dtypes), _grads(dtypes)
    norm = _total_norm(ours)
    torch.testing.assert_close(norm, torch.nn.utils.get_total_norm(reference))
    params = [torch.nn.Parameter(torch.zeros_like(t)) for t in reference]
    for param, grad in zip(params, reference, strict=True):
        param.grad = grad
    _scale_to_norm(ours, 0.5, norm)
    torch.nn.utils.clip_grads_with_norm_(params, 0.5, norm)
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a, b)
    assert float(_total_norm(ours)) == pytest.approx(0.5, rel=1e-2)
    small = _grads(dtypes)
    before = [t.clone() for t in small]
    _scale_to_norm(small, 1e6, _total_norm(small))  # below the limit: unchanged
    assert all(torch.equal(a, b) for a, b in zip(small, before, strict=True))
