"""Tests of the fast path's switch: the environment variable, the version guard, and that off means off."""

import logging

import pytest
import torch
from gymnasium.vector import SyncVectorEnv

from rl_lightning import SAC, fast
from rl_lightning.fast import adam as fast_adam
from rl_lightning.fast import grads as fast_grads
from rl_lightning.fast import lightning as fast_lightning
from rl_lightning.fast import mlp_grad, numpy_actor, switch
from rl_lightning.fast import ppo as fast_ppo
from rl_lightning.fast import replay as fast_replay
from rl_lightning.fast.vector_env import SameStepSyncVectorEnv
from tests.helpers import quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data


@pytest.mark.parametrize(
    "value, on", [("0", False), ("off", False), ("False", False), ("1", True), ("", True), ("yes", True)]
)
def test_the_environment_variable_turns_the_fast_path_on_or_off(value, on, monkeypatch):
    """Test that RL_LIGHTNING_FAST's spellings of on and off are read as such."""
    monkeypatch.setenv(switch.ENV_VAR, value)
    assert switch._from_environment() is on


def test_a_value_that_is_neither_on_nor_off_is_refused_with_the_fix(monkeypatch):
    """Test that RL_LIGHTNING_FAST=maybe raises naming the variable, the value and both choices."""
    monkeypatch.setenv(switch.ENV_VAR, "maybe")
    with pytest.raises(ValueError, match=r"RL_LIGHTNING_FAST='maybe'.*RL_LIGHTNING_FAST=1.*RL_LIGHTNING_FAST=0"):
        switch._from_environment()


def test_set_enabled_takes_a_bool_and_disabled_restores_the_switch():
    """Test that set_enabled refuses a non-bool and that disabled() turns the switch off for its block only."""
    with pytest.raises(TypeError, match="True or False"):
        fast.set_enabled("0")
    with fast.disabled():
        assert not fast.enabled()
    assert fast.enabled()


def test_versions_outside_the_written_against_range_keep_the_shortcuts_off(caplog):
    """Test that the version guard admits the range's versions only, and says so at debug level."""
    low, high = switch.WRITTEN_AGAINST["torch"]
    assert switch.version_supported("torch", f"{low[0]}.{low[1]}.0+cpu")
    assert switch.version_supported("torch", f"{high[0]}.{high[1] - 1}.5")
    with caplog.at_level(logging.DEBUG, logger="rl_lightning.fast.switch"):
        assert not switch.version_supported("torch", f"{high[0]}.{high[1]}.0")
        assert not switch.version_supported("torch", "1.13.1")
    assert "torch 1.13.1 lies outside" in caplog.text
    assert switch.SUPPORTED == {"torch": True, "lightning": True, "gymnasium": True}  # this machine's versions


def _forbid(monkeypatch, target, name):
    def refuse(*args, **kwargs):
        raise AssertionError(f"{target.__name__}.{name} ran with the fast path off")

    monkeypatch.setattr(target, name, refuse)


def test_a_ppo_fit_with_the_switch_off_builds_plain_objects_and_takes_no_shortcut(monkeypatch):
    """Test that PPO with the fast path off trains on torch's Adam and gymnasium's SyncVectorEnv, no shortcut run."""
    _forbid(monkeypatch, fast_ppo._ActorCriticObjective, "apply")
    _forbid(monkeypatch, numpy_actor.NumpyMLP, "__call__")
    _forbid(monkeypatch, fast_lightning, "backward_without_engine")
    _forbid(monkeypatch, fast_lightning, "optimizer_step")
    _forbid(monkeypatch, fast_adam.FusedAdam, "_step_fused")
    _forbid(monkeypatch, fast_grads, "_one_group")
    with fast.disabled():
        model = tiny_ppo(total_timesteps=64)
        data = tiny_rollout_data(seed=3)
        trainer = quiet_trainer(max_epochs=-1, accelerator="cpu")
        trainer.fit(model, data)
    assert trainer.global_step == 8  # 2 epochs x 2 update epochs x 2 minibatches
    assert type(model.optimizers().optimizer) is torch.optim.Adam
    assert type(data.train_envs.envs) is SyncVectorEnv  # gymnasium's own, not SameStepSyncVectorEnv
    with fast.disabled():
        assert fast.sync_vector_env([]) is None
    assert isinstance(fast.sync_vector_env(data.train_envs.envs.env_fns), SameStepSyncVectorEnv)


def test_a_sac_fit_with_the_switch_off_takes_no_shortcut(monkeypatch):
    """Test that SAC with the fast path off runs its critics, replay and updates on the plain path only."""
    _forbid(monkeypatch, mlp_grad, "relu_mlp")
    _forbid(monkeypatch, mlp_grad, "min_over_nets")
    _forbid(monkeypatch, fast_replay, "_uniform")
    _forbid(monkeypatch, fast_grads, "_one_group")
    _forbid(monkeypatch, fast_lightning, "optimizer_step")
    with fast.disabled():
        model = SAC(total_timesteps=10_000)
        trainer = quiet_trainer(max_epochs=1, accelerator="cpu")
        trainer.fit(model, tiny_replay_data("Pendulum-v1"))
    assert trainer.global_step > 0
    assert type(model.optimizers().optimizer) is torch.optim.Adam
