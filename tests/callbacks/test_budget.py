"""Tests for the env-step budget callback."""

from types import SimpleNamespace

import pytest

from rl_lightning.callbacks import EnvStepBudget


def _state(env_steps, max_epochs=-1, env_steps_per_epoch=100):
    trainer = SimpleNamespace(
        should_stop=False, max_epochs=max_epochs, world_size=1, datamodule=SimpleNamespace(hparams={})
    )
    module = SimpleNamespace(env_steps=env_steps, env_steps_per_epoch=env_steps_per_epoch)
    return trainer, module


def test_stops_only_when_budget_is_reached():
    """Test that should_stop is set at epoch end once env_steps >= total_timesteps."""
    budget = EnvStepBudget(1000)
    trainer, module = _state(999)
    budget.on_train_epoch_end(trainer, module)
    assert not trainer.should_stop
    module.env_steps = 1000
    budget.on_train_epoch_end(trainer, module)
    assert trainer.should_stop


def test_spent_budget_stops_before_training():
    """Test that a run resumed with its budget spent stops at train start."""
    trainer, module = _state(5000)
    EnvStepBudget(1000).on_train_start(trainer, module)
    assert trainer.should_stop


def test_warns_when_max_epochs_cuts_the_budget():
    """Test that a Trainer max_epochs too small for the budget triggers a warning naming the fix."""
    trainer, module = _state(0, max_epochs=5)
    with pytest.warns(UserWarning, match="max_epochs=-1"):
        EnvStepBudget(1000).on_train_start(trainer, module)


def test_says_when_the_budget_ends_inside_an_epoch(caplog):
    """Test that a budget that is not a whole number of epochs logs the env steps the run will take (an epoch is
    not cut short), and that a whole number of epochs says nothing."""
    import logging

    trainer, module = _state(0, env_steps_per_epoch=300)
    with caplog.at_level(logging.INFO):
        EnvStepBudget(1000).on_train_start(trainer, module)
        assert "ends after 4 epochs, 1200 env steps" in caplog.text
        caplog.clear()
        EnvStepBudget(1200).on_train_start(trainer, module)
        assert caplog.text == ""
