"""The fast path's tests hold each shortcut against the plain path, so they run with the switch on."""

import pytest

from rl_lightning import fast


@pytest.fixture(autouse=True)
def fast_path_on():
    """Turn the fast path on for the test (a run with ``RL_LIGHTNING_FAST=0`` still tests the shortcuts here)."""
    before = fast.enabled()
    fast.set_enabled(True)
    yield
    fast.set_enabled(before)
