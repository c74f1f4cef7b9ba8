"""SAC: fits, target updates, truncation in the target, resume with the replay buffer, determinism."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import PPO, SAC, RolloutDataModule
from rl_lightning.data.replay import to_torchrl_batch
from tests.helpers import REPLAY_LEARNING_STARTS, REPLAY_STEPS, quiet_trainer, tiny_replay_data

STEPS, LEARNING_STARTS = REPLAY_STEPS, REPLAY_LEARNING_STARTS


def small_data(**kwargs):
    return tiny_replay_data(**{"env": "Pendulum-v1", **kwargs})


def fit(tmp_path=None, max_epochs=2, seed=0, model_kwargs=None, data_kwargs=None, ckpt_path=None, callbacks=()):
    pl.seed_everything(seed)
    data = small_data(seed=seed, **(data_kwargs or {}))
    model = SAC(**{"hidden_sizes": [16, 16], "total_timesteps": 10_000, **(model_kwargs or {})})
    trainer = quiet_trainer(tmp_path, callbacks, max_epochs=max_epochs)
    trainer.fit(model, data, ckpt_path=ckpt_path)
    return model, data, trainer


def test_two_epoch_fit_updates_and_logs_every_metric():
    """Test that a 2-epoch fit takes its env steps, one update per env step after learning_starts, and logs."""
    model, data, trainer = fit()
    assert data.env_steps == 2 * STEPS
    metrics = trainer.callback_metrics
    for name in ("loss_actor", "loss_qvalue", "loss_alpha", "alpha", "entropy"):
        assert torch.isfinite(metrics[f"train/{name}"]), name
    assert "eval/return_mean" in metrics and "eval_ood/return_mean" in metrics
    assert metrics["train/alpha"] < 1.0  # the temperature moved from its initial value
    # One gradient step after each env step from learning_starts on, three optimizer steps each.
    assert trainer.global_step == 3 * (2 * STEPS - LEARNING_STARTS + 1)


def test_target_critics_move_by_polyak_averaging():
    """Test that update_targets sets target = (1 - tau) target + tau online, exactly."""
    model, _, _ = fit(max_epochs=1, model_kwargs={"tau": 0.25})
    loss = model.loss_module
    online = loss.qvalue_network_params.clone().detach()
    with torch.no_grad():  # move the online critics away from the targets
        loss.qvalue_network_params.apply_(lambda p: p.add_(1.0))
    online = loss.qvalue_network_params.clone().detach()
    before = loss.target_qvalue_network_params.clone().detach()
    model.update_targets()
    after = loss.target_qvalue_network_params
    for key, value in after.items(True, True):
        torch.testing.assert_close(value, 0.75 * before[key] + 0.25 * online[key])


def _q_loss(model, terminated: bool, next_obs: torch.Tensor) -> float:
    batch_size = next_obs.shape[0]
    from tensordict import TensorDict

    batch = TensorDict(
        {
            "obs": torch.zeros(batch_size, 3),
            "action": torch.zeros(batch_size, 1),
            "reward": torch.ones(batch_size),
            "next_obs": next_obs,
            "terminated": torch.full((batch_size,), terminated),
        },
        batch_size=[batch_size],
    )
    torch.manual_seed(0)  # the same sampled next actions for every call
    return float(model.loss_module(to_torchrl_batch(batch))["loss_qvalue"])


def test_truncated_transitions_bootstrap_from_next_obs_terminated_do_not():
    """Test that the critic target depends on the stored next observation unless the transition terminated."""
    model, _, _ = fit(max_epochs=1)
    a, b = torch.zeros(8, 3), torch.ones(8, 3)
    # Truncation (terminated=False): the target bootstraps, so the next observation matters.
    assert _q_loss(model, False, a) != pytest.approx(_q_loss(model, False, b))
    # Termination: the target is the reward alone, whatever the next observation.
    assert _q_loss(model, True, a) == pytest.approx(_q_loss(model, True, b))


def test_same_seed_gives_identical_parameters():
    """Test that two fits with the same seed end with identical actor and critic parameters."""
    first, _, _ = fit(seed=3)
    second, _, _ = fit(seed=3)
    for (name, p), (_, q) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        torch.testing.assert_close(p, q, msg=name)


class _ResumeSpy(pl.Callback):
    """Reads the restored state in on_fit_start (Lightning fetches the first batch before on_train_start)."""

    def on_fit_start(self, trainer, pl_module):
        data = trainer.datamodule
        self.buffer = data.buffer.storage[: len(data.buffer)].clone()
        self.log_alpha = pl_module.loss_module.log_alpha.detach().clone()
        self.targets = pl_module.loss_module.target_qvalue_network_params.clone().detach()
        self.env_steps = data.env_steps


def test_resume_restores_replay_buffer_temperature_and_targets(tmp_path):
    """Test that fit(ckpt_path=...) with save_replay_buffer restores the buffer's contents, alpha and target critics."""
    model, data, _ = fit(
        tmp_path, max_epochs=2, model_kwargs={"save_interval": 1}, data_kwargs={"save_replay_buffer": True}
    )
    saved_buffer = data.buffer.storage[: len(data.buffer)].clone()
    saved_alpha = model.loss_module.log_alpha.detach().clone()
    saved_targets = model.loss_module.target_qvalue_network_params.clone().detach()
    spy = _ResumeSpy()
    last = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    fit(
        tmp_path,
        max_epochs=3,
        model_kwargs={"save_interval": 1},
        data_kwargs={"save_replay_buffer": True},
        ckpt_path=last,
        callbacks=[spy],
    )
    assert spy.env_steps == 2 * STEPS and len(spy.buffer) == 2 * STEPS
    for key in ("obs", "action", "reward", "next_obs", "terminated"):
        torch.testing.assert_close(spy.buffer[key], saved_buffer[key])
    torch.testing.assert_close(spy.log_alpha, saved_alpha)
    for key, value in saved_targets.items(True, True):
        torch.testing.assert_close(spy.targets[key], value)


def test_algorithm_and_data_module_must_match():
    """Test that SAC on rollout data, or PPO on replay data, fails at setup naming the data module to use."""
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(TypeError, match="SAC learns from a ReplayDataModule"):
        trainer.fit(SAC(), RolloutDataModule(env="Pendulum-v1", eval_episodes=1))
    with pytest.raises(TypeError, match="PPO learns from a RolloutDataModule"):
        trainer.fit(PPO(), small_data())


def test_sac_refuses_discrete_actions():
    """Test that SAC on a discrete-action env says to use another algorithm."""
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(TypeError, match="1-D Box action space"):
        trainer.fit(SAC(), small_data(env="CartPole-v1"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"tau": 0}, "tau"), ({"gamma": 1.5}, "gamma"), ({"actor_lr": -1}, "actor_lr"), ({"hidden_sizes": 64}, "hidden")],
)
def test_impossible_hyperparameters_are_refused(kwargs, match):
    """Test that impossible SAC hyperparameters raise a ValueError naming them."""
    with pytest.raises(ValueError, match=match):
        SAC(**kwargs)
