"""Tests of the settings a fit runs under (rl_lightning/callbacks/fit_settings.py): the garbage collector's freeze."""

from __future__ import annotations

import gc
import weakref

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


class _Cycle:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self):
        self.me = self


class _Alive(pl.Callback):
    """Records, at every optimizer step, whether the object behind ``ref`` is still alive."""

    def __init__(self, ref: weakref.ref):
        self.ref, self.alive = ref, []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        self.alive.append(self.ref() is not None)


def test_garbage_from_before_the_fit_is_collected_not_frozen_with_it():
    """Test that a reference cycle dropped before the fit (a previous fit's model, say) is freed at its start rather
    than frozen and kept through it."""
    cycle = _Cycle()
    seen = _Alive(weakref.ref(cycle))
    gc.collect()  # the cycle is old now: only a full pass frees it
    gc.disable()  # and none runs on its own before the fit starts
    try:
        del cycle
        _fit(seen)
    finally:
        gc.enable()
    assert seen.alive and not any(seen.alive)
