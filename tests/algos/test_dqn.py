"""DQN: fits, target updates, epsilon schedule, truncation in the target, resume with the replay buffer, determinism."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rl_lightning import DQN
from rl_lightning.algos import dqn_loss
from tests.helpers import REPLAY_LEARNING_STARTS, REPLAY_STEPS, quiet_trainer, tiny_replay_data

STEPS, LEARNING_STARTS = REPLAY_STEPS, REPLAY_LEARNING_STARTS


def small_data(**kwargs):
    return tiny_replay_data(**{"env_id": "CartPole-v1", **kwargs})


def fit(tmp_path=None, max_epochs=2, seed=0, model_kwargs=None, data_kwargs=None, ckpt_path=None, callbacks=()):
    pl.seed_everything(seed)
    data = small_data(seed=seed, **(data_kwargs or {}))
    model = DQN(
        **{"hidden_sizes": [16, 16], "total_timesteps": 1000, "target_update_interval": 5, **(model_kwargs or {})}
    )
    trainer = quiet_trainer(tmp_path, callbacks, max_epochs=max_epochs)
    trainer.fit(model, data, ckpt_path=ckpt_path)
    return model, data, trainer


def _params_equal(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def test_two_epoch_fit_updates_and_logs_every_metric():
    """Test that a 2-epoch fit takes one gradient step per env step after learning_starts and logs its metrics."""
    model, data, trainer = fit(model_kwargs={"exploration_fraction": 0.5})
    assert data.env_steps == 2 * STEPS
    assert trainer.global_step == 2 * STEPS - LEARNING_STARTS  # after every env step past learning_starts
    metrics = trainer.callback_metrics
    for name in ("loss", "q_value", "td_error"):
        assert torch.isfinite(metrics[f"train/{name}"]), name
    # epsilon after 120 env steps of a 500-step decay from 1.0 to 0.05
    assert metrics["train/epsilon"].item() == pytest.approx(1.0 - 0.95 * 120 / 500)
    assert "eval/return_mean" in metrics and "eval_ood/return_mean" in metrics


class _TargetSpy(pl.Callback):
    """Records, before each gradient step, how many were taken and whether target == online."""

    def __init__(self):
        self.seen: list[tuple[int, bool]] = []

    def on_before_backward(self, trainer, pl_module, loss):
        self.seen.append((trainer.global_step, _params_equal(pl_module.target_net, pl_module.policy)))


def test_hard_target_update_copies_every_interval_gradient_steps():
    """Test that with tau=1 the target equals the online network after every 5th gradient step, and only then."""
    spy = _TargetSpy()
    fit(max_epochs=1, callbacks=[spy])
    assert len(spy.seen) == STEPS - LEARNING_STARTS
    for steps, equal in spy.seen:
        assert equal == (steps % 5 == 0), steps


def test_soft_target_update_is_polyak_averaging():
    """Test that update_targets sets target = (1 - tau) target + tau online, exactly."""
    model, _, _ = fit(max_epochs=1, model_kwargs={"tau": 0.25})
    with torch.no_grad():  # move the online network away from the target
        for p in model.policy.parameters():
            p.add_(1.0)
    online = [p.detach().clone() for p in model.policy.parameters()]
    before = [p.detach().clone() for p in model.target_net.parameters()]
    model.update_targets()
    for after, o, b in zip(model.target_net.parameters(), online, before, strict=True):
        torch.testing.assert_close(after, 0.75 * b + 0.25 * o)


def test_epsilon_decays_linearly_over_the_exploration_fraction():
    """Test the schedule's values and that explore takes random actions at that rate."""
    model, _, _ = fit(max_epochs=1, model_kwargs={"exploration_fraction": 0.2, "exploration_final_eps": 0.1})
    schedule = model.policy.epsilon  # 1.0 -> 0.1 over 0.2 * 1000 env steps
    assert (
        schedule(0) == 1.0
        and schedule(100) == pytest.approx(0.55)
        and schedule(200) == schedule(10**6) == pytest.approx(0.1)
    )
    obs = torch.zeros(4000, 4)
    greedy = model.policy.greedy(obs)
    torch.manual_seed(0)
    for env_steps, eps in ((0, 1.0), (100, 0.55), (500, 0.1)):
        off_greedy = (model.policy.explore(obs, env_steps) != greedy).float().mean().item()
        # a random action differs from the greedy one half the time (two actions)
        assert off_greedy == pytest.approx(eps / 2, abs=0.03), env_steps
    assert torch.equal(model.policy.act(obs)[0], greedy)


def test_anneal_lr_decays_the_learning_rate_by_the_spent_budget():
    """Test that anneal_lr sets lr * (1 - env_steps / total_timesteps) before each gradient step, and logs it."""
    model, data, trainer = fit(model_kwargs={"anneal_lr": True, "lr": 1e-3})
    # The last gradient step came after the last env step (120 of 1000).
    assert model.optimizers().param_groups[0]["lr"] == pytest.approx(1e-3 * (1 - 120 / 1000))
    assert trainer.callback_metrics["train/lr"].item() == pytest.approx(1e-3 * (1 - 120 / 1000))
    constant, _, trainer = fit(model_kwargs={"lr": 1e-3})
    assert trainer.callback_metrics["train/lr"].item() == pytest.approx(1e-3)


def test_truncated_transitions_bootstrap_from_next_obs_terminated_do_not():
    """Test that the TD target depends on the stored next observation unless the transition terminated."""
    model, _, _ = fit(max_epochs=1)

    def loss(terminated: bool, next_obs: torch.Tensor) -> float:
        batch = TensorDict(
            {
                "obs": torch.zeros(8, 4),
                "action": torch.zeros(8, dtype=torch.long),
                "reward": torch.ones(8),
                "next_obs": next_obs,
                "terminated": torch.full((8,), terminated),
            },
            batch_size=[8],
        )
        return float(dqn_loss(model.policy, model.target_net, batch, gamma=0.99).loss)

    a, b = torch.zeros(8, 4), torch.full((8, 4), 3.0)
    assert loss(False, a) != pytest.approx(loss(False, b))
    assert loss(True, a) == pytest.approx(loss(True, b))


def test_same_seed_gives_identical_parameters():
    """Test that two fits with the same seed end with identical online and target networks."""
    first, _, _ = fit(seed=3)
    second, _, _ = fit(seed=3)
    for (name, p), (_, q) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        torch.testing.assert_close(p, q, msg=name)
    third, _, _ = fit(seed=4)
    assert not _params_equal(first.policy, third.policy)


def test_evaluation_does_not_change_what_is_learned():
    """Test that evaluating every epoch or every other epoch ends with identical weights (no shared RNG drawn)."""
    every, _, _ = fit(max_epochs=3, data_kwargs={"eval_interval": 1})
    other, _, _ = fit(max_epochs=3, data_kwargs={"eval_interval": 2})
    for (name, p), (_, q) in zip(every.state_dict().items(), other.state_dict().items(), strict=True):
        torch.testing.assert_close(p, q, msg=name)


class _ResumeSpy(pl.Callback):
    """Reads the restored state in on_fit_start (Lightning fetches the first batch before on_train_start)."""

    def on_fit_start(self, trainer, pl_module):
        data = trainer.datamodule
        self.buffer = data.buffer.storage[: len(data.buffer)].clone()
        self.target = [p.detach().clone() for p in pl_module.target_net.parameters()]
        self.env_steps = data.env_steps
        self.epsilon = pl_module.policy.epsilon(data.env_steps)
        self.global_step = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        # The loops' counters (global_step drives the target schedule) are restored after on_fit_start.
        if self.global_step is None:
            self.global_step = trainer.global_step


def test_resume_restores_replay_buffer_target_network_and_schedule(tmp_path):
    """Test that fit(ckpt_path=...) restores the buffer's contents, the target network, counters and epsilon."""
    kwargs = {
        "model_kwargs": {"save_interval": 1, "target_update_interval": 7},
        "data_kwargs": {"save_replay_buffer": True},
    }
    model, data, trainer = fit(tmp_path, max_epochs=2, **kwargs)
    saved_buffer = data.buffer.storage[: len(data.buffer)].clone()
    saved_target = [p.detach().clone() for p in model.target_net.parameters()]
    assert not _params_equal(model.target_net, model.policy)  # 81 steps: the target lags the online network
    spy = _ResumeSpy()
    fit(tmp_path, max_epochs=3, ckpt_path=os.path.join(tmp_path, "checkpoints", "last.ckpt"), callbacks=[spy], **kwargs)
    assert spy.env_steps == 2 * STEPS and len(spy.buffer) == 2 * STEPS
    assert spy.global_step == trainer.global_step
    assert spy.epsilon == pytest.approx(model.policy.epsilon(2 * STEPS))
    for key in ("obs", "action", "reward", "next_obs", "terminated"):
        torch.testing.assert_close(spy.buffer[key], saved_buffer[key])
    for restored, saved in zip(spy.target, saved_target, strict=True):
        torch.testing.assert_close(restored, saved)


def test_checkpoint_loads_without_envs_and_predicts_greedy_actions(tmp_path):
    """Test that load_from_checkpoint rebuilds the Q-network, that predict returns its argmax as env actions, and that
    calling the module gives the same actions (not the Q-values)."""
    model, _, _ = fit(tmp_path, max_epochs=1, model_kwargs={"save_interval": 1})
    loaded = DQN.load_from_checkpoint(os.path.join(tmp_path, "checkpoints", "last.ckpt"))
    obs = np.random.default_rng(0).normal(size=(100, 4)).astype(np.float32)
    expected = model.policy(torch.as_tensor(obs)).argmax(-1).numpy()
    np.testing.assert_array_equal(loaded.predict(obs), expected)
    assert loaded.predict(obs[0]) == expected[0]
    np.testing.assert_array_equal(loaded(torch.as_tensor(obs)).numpy(), expected)


def test_dqn_refuses_continuous_actions():
    """Test that DQN on a continuous-action env says to use another algorithm."""
    trainer = pl.Trainer(max_epochs=1, logger=False, enable_progress_bar=False, enable_model_summary=False)
    with pytest.raises(TypeError, match="Discrete action space.*use SAC"):
        trainer.fit(DQN(), small_data(env_id="Pendulum-v1"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tau": 0}, "tau"),
        ({"gamma": 1.5}, "gamma"),
        ({"lr": -1}, "lr"),
        ({"target_update_interval": 0}, "target_update_interval"),
        ({"exploration_final_eps": 2}, "exploration_final_eps"),
        ({"loss_function": "l1"}, "loss_function"),
        ({"hidden_sizes": [0]}, "hidden"),
    ],
)
def test_impossible_hyperparameters_are_refused(kwargs, match):
    """Test that impossible DQN hyperparameters raise a ValueError naming them."""
    with pytest.raises(ValueError, match=match):
        DQN(**kwargs)


@pytest.mark.parametrize("setting", [{"accumulate_grad_batches": 2}, {"gradient_clip_val": 1.0}])
def test_trainer_accumulation_and_clipping_are_refused(setting):
    """Test that Trainer(accumulate_grad_batches=2) or Trainer(gradient_clip_val=...) stops DQN (which takes a
    chunk's gradient steps by hand) at start, naming the Trainer setting."""
    pl.seed_everything(0)
    trainer = quiet_trainer(max_epochs=1, **setting)
    with pytest.raises(Exception, match=next(iter(setting))):
        trainer.fit(DQN(hidden_sizes=[16, 16], total_timesteps=1000), small_data())


PIXEL_SETS = {"train": [{"seeds": [0, 1000]}], "test": [{"seeds": [1000, 2000]}]}
SMALL_CNN = {"cnn_channels": [4], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 8}


@pytest.mark.parametrize("optimize_memory_usage", [False, True])
def test_dqn_on_dict_images_resumes_its_uint8_replay_buffer_and_predicts_dicts(optimize_memory_usage, tmp_path):
    """Test that DQN fits a Dict task with a uint8 image through the encoder, that a resume restores the image
    replay buffer (uint8, per key) and the target network, encoder included, and that the loaded checkpoint
    predicts from a dict of arrays."""
    from tests.envs.pixel_goal import ENV_ID

    data_kwargs = {
        "env_id": f"tests.envs.pixel_goal:{ENV_ID}", "obj_sets": PIXEL_SETS, "save_replay_buffer": True,
        "optimize_memory_usage": optimize_memory_usage, "num_envs": 2,
    }  # fmt: skip
    kwargs = {"model_kwargs": {"save_interval": 1, "encoder": SMALL_CNN}, "data_kwargs": data_kwargs}
    model, data, trainer = fit(tmp_path, max_epochs=2, **kwargs)
    assert model.policy.encoder is not None and model.target_net.encoder is not model.policy.encoder
    stored = data.buffer.storage[:]["obs"]
    assert stored["image"].dtype == torch.uint8 and stored["position"].dtype == torch.float32
    assert ("next_obs" in data.buffer.storage[:].keys()) != optimize_memory_usage
    saved_target = [p.detach().clone() for p in model.target_net.encoder.parameters()]
    spy = _ResumeSpy()
    ckpt = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    fit(tmp_path, max_epochs=3, ckpt_path=ckpt, callbacks=[spy], **kwargs)
    torch.testing.assert_close(spy.buffer["obs"]["image"], stored["image"][: len(spy.buffer)])
    assert spy.buffer["obs"]["image"].dtype == torch.uint8
    restored_target = spy.target[: len(saved_target)]
    for restored, saved in zip(restored_target, saved_target, strict=True):
        torch.testing.assert_close(restored, saved)
    loaded = DQN.load_from_checkpoint(ckpt)
    rng = np.random.default_rng(0)
    obs = {
        "image": rng.integers(0, 256, (6, 5, 5, 1), dtype=np.uint8),
        "position": rng.random((6, 2), dtype=np.float32),
    }
    expected = model.policy({k: torch.as_tensor(v) for k, v in obs.items()}).argmax(-1).numpy()
    np.testing.assert_array_equal(loaded.predict(obs), expected)
    data.close()


def test_dqn_refuses_critic_keys_it_has_no_critic_for():
    """Test that observation groups' critic_keys are refused by DQN (its Q-network is its only network), naming the
    fix, before any env is made."""
    with pytest.raises(ValueError, match="no separate critic.*Drop critic_keys"):
        DQN(encoder={"actor_keys": ["image"], "critic_keys": ["image", "state"]})
