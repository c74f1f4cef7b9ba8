"""Tests of the settings a fit runs under (rl_lightning/callbacks/fit_settings.py): the garbage collector's freeze."""

from __future__ import annotations

import gc

import lightning.pytorch as pl
import pytest

from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data


class _Frozen(pl.Callback):
    """Records the number of frozen objects at every optimizer step; raises at step ``fail_at``."""

    def __init__(self, fail_at: int | None = None):
        self.counts: list[int] = []
        self.fail_at = fail_at

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.counts.append(gc.get_freeze_count())
        if len(self.counts) == self.fail_at:
            raise RuntimeError("stop here")


def _fit(callback: pl.Callback) -> None:
    pl.seed_everything(0, verbose=False)
    quiet_trainer(callbacks=[callback], max_epochs=1).fit(tiny_ppo(total_timesteps=64), tiny_rollout_data())


@pytest.fixture(autouse=True)
def _unfrozen():
    gc.unfreeze()  # whatever an earlier test left
    yield
    gc.unfreeze()


def test_a_fit_runs_with_the_objects_of_its_start_frozen_and_ends_with_none():
    """Test that every optimizer step of a fit sees the objects alive at its start out of the collector's passes, and
    that they are back in them after it."""
    seen = _Frozen()
    _fit(seen)
    assert seen.counts and all(count > 1000 for count in seen.counts)
    assert gc.get_freeze_count() == 0


def test_a_failed_fit_puts_the_frozen_objects_back():
    """Test that an exception inside the fit leaves nothing frozen."""
    seen = _Frozen(fail_at=2)
    with pytest.raises(RuntimeError, match="stop here"):
        _fit(seen)
    assert len(seen.counts) == 2 and seen.counts[0] > 1000
    assert gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_keeps_them_as_they_were():
    """Test that a fit neither freezes more nor unfreezes the objects a process froze before it."""
    gc.freeze()
    before = gc.get_freeze_count()
    seen = _Frozen()
    _fit(seen)
    # Frozen objects that die (by reference counting) leave the count; none joins it, and none is put back.
    assert seen.counts and before - 1000 < min(seen.counts) and max(seen.counts) <= before
    assert before - 1000 < gc.get_freeze_count() <= min(seen.counts)
