"""Tests of denormal flushing during a fit (rl_lightning/callbacks/denormals.py) against torch's default handling."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import DQN
from rl_lightning.callbacks.denormals import FlushDenormals, flushing
from tests.helpers import quiet_trainer, tiny_replay_data

pytestmark = pytest.mark.skipif(
    not torch.set_flush_denormal(False), reason="this CPU has no flush-to-zero flags (torch cannot set them)"
)


class _Seen(pl.Callback):
    """Records whether the fit's thread flushed denormals at every optimizer step; raises at step ``fail_at``."""

    def __init__(self, fail_at: int | None = None):
        self.seen: list[bool] = []
        self.fail_at = fail_at

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.seen.append(flushing())
        if len(self.seen) == self.fail_at:
            raise RuntimeError("stop here")


def _fit(tmp_path, callback: pl.Callback, seed: int = 0, **kwargs) -> DQN:
    pl.seed_everything(seed, verbose=False)
    model = DQN(hidden_sizes=(16,), total_timesteps=60, target_update_interval=5, **kwargs)
    quiet_trainer(tmp_path, callbacks=[callback], max_epochs=1).fit(model, tiny_replay_data("CartPole-v1", seed=seed))
    return model


def test_half_the_smallest_normal_float_reads_zero_only_while_flushing():
    """Test the probe: flushing() follows torch.set_flush_denormal both ways."""
    assert not flushing()
    try:
        torch.set_flush_denormal(True)
        assert flushing()
    finally:
        torch.set_flush_denormal(False)
    assert not flushing()


@pytest.mark.parametrize("on", [True, False])
def test_a_fit_flushes_denormals_only_with_flush_denormal_and_puts_the_setting_back(tmp_path, on):
    """Test that every gradient step of a fit runs flushed with flush_denormal=True (the default), none with False,
    and neither after the fit."""
    seen = _Seen()
    _fit(tmp_path, seen, flush_denormal=on)
    assert seen.seen and all(s is on for s in seen.seen)
    assert not flushing()


def test_a_failed_fit_puts_the_setting_back(tmp_path):
    """Test that an exception inside the fit leaves the thread as it found it."""
    seen = _Seen(fail_at=3)
    with pytest.raises(RuntimeError, match="stop here"):
        _fit(tmp_path, seen)
    assert seen.seen == [True] * 3
    assert not flushing()


def test_a_thread_that_flushes_already_keeps_flushing(tmp_path):
    """Test that a fit does not turn off what the caller had set."""
    torch.set_flush_denormal(True)
    try:
        seen = _Seen()
        _fit(tmp_path, seen)
        assert seen.seen and all(seen.seen) and flushing()
    finally:
        torch.set_flush_denormal(False)


def test_adam_on_normal_numbers_is_bit_identical_and_on_denormal_ones_within_their_size():
    """Test Adam's step with and without flushing.

    Gradients of normal size give the same weights to the bit; gradients near 1e-39 (whose
    moments are denormal) give weights that differ by far less than float32 can show on
    weights of order one.
    """

    def adam_steps(grads: list[torch.Tensor], flush: bool) -> tuple[torch.Tensor, torch.Tensor]:
        weight = torch.nn.Parameter(torch.linspace(-1.0, 1.0, grads[0].numel()))
        optimizer = torch.optim.Adam([weight], lr=1e-3)
        torch.set_flush_denormal(flush)
        try:
            for grad in grads:
                weight.grad = grad.clone()
                optimizer.step()
        finally:
            torch.set_flush_denormal(False)
        return weight.detach(), optimizer.state[weight]["exp_avg"]

    g = torch.Generator().manual_seed(0)
    normal = [torch.randn(64, generator=g) for _ in range(5)]
    (flushed, flushed_moment), (plain, plain_moment) = adam_steps(normal, True), adam_steps(normal, False)
    assert torch.equal(flushed, plain) and torch.equal(flushed_moment, plain_moment)
    tiny = [torch.randn(64, generator=g) * 1e-39 for _ in range(5)]
    assert (tiny[0].abs() < torch.finfo(torch.float32).tiny).all()  # really denormal
    (flushed, flushed_moment), (plain, plain_moment) = adam_steps(tiny, True), adam_steps(tiny, False)
    # The flush took effect: the first moment is zero flushed, denormal in full.
    assert (flushed_moment == 0).all() and (plain_moment != 0).all()
    torch.testing.assert_close(flushed, plain, rtol=0, atol=1e-6)


def test_a_dqn_fit_flushed_ends_with_the_weights_of_one_computed_in_full(tmp_path, monkeypatch):
    """Test a whole fit flushed against one computed in full (the same seed): the same weights to float rounding."""
    flushed = _fit(tmp_path / "a", _Seen())
    monkeypatch.setattr(FlushDenormals, "on_fit_start", lambda self, trainer, module: None)
    plain = _fit(tmp_path / "b", _Seen())
    for (name, a), (_, b) in zip(flushed.state_dict().items(), plain.state_dict().items(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
