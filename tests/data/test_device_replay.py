"""The tensor path's off-policy stream: transitions stored on the env's device with their true final observations."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.data import DataCounters, make_replay_buffer
from rl_lightning.data.device_replay import DeviceReplayDataset
from rl_lightning.envs.tensor_group import TensorEnvGroup
from tests.helpers import count_envs, quiet_trainer, tiny_replay_data


class ZeroExplorer(torch.nn.Module):
    """Action 0 for every env; counts its calls."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.calls = 0

    def explore(self, obs, env_steps):
        self.calls += 1
        return torch.zeros(obs.shape[0], dtype=torch.long, device=obs.device)


def _dataset(envs: TensorEnvGroup, steps_per_epoch: int, learning_starts: int = 0, utd_ratio: float = 1.0):
    buffer = make_replay_buffer(100, 4, device="auto")
    return DeviceReplayDataset(
        envs, ZeroExplorer(), buffer, steps_per_epoch, learning_starts, utd_ratio, DataCounters(), reset_seed=0
    )


@pytest.mark.parametrize("terminate_at", [0, 2])
def test_stored_next_obs_is_the_final_observation_and_only_termination_stops_bootstrapping(terminate_at):
    """Test that an ended episode's transition stores the obs it reached (not the restart), terminated only when
    the env terminated (a time-limit cut stays bootstrappable)."""
    dataset = _dataset(count_envs(2, terminate_at), steps_per_epoch=8)
    list(dataset)
    rows = dataset.buffer.storage[:8]  # 4 batched steps of 2 envs, in step order
    obs, next_obs = rows["obs"][::2, 0].tolist(), rows["next_obs"][::2, 0].tolist()
    if terminate_at == 0:  # episodes of 3 steps, cut by the time limit
        assert obs == [0, 1, 2, 0] and next_obs == [1, 2, 3, 1]
        assert not rows["terminated"].any()
    else:  # terminal at obs 2
        assert obs == [0, 1, 0, 1] and next_obs == [1, 2, 1, 2]
        assert rows["terminated"][::2].tolist() == [False, True, False, True]
    assert rows["reward"].tolist() == [1.0] * 8


def test_steps_and_gradient_batches_follow_the_utd_ratio_with_one_step_per_batch_of_envs():
    """Test that utd_ratio = 1 / num_envs yields one sampled batch per batched step after learning starts."""
    dataset = _dataset(count_envs(4), steps_per_epoch=40, learning_starts=8, utd_ratio=0.25)
    assert len(dataset) == 10  # a chunk (one Lightning batch) per batched step
    batches = [batch for chunk in dataset for batch in chunk]
    assert dataset.counters.env_steps == 40 and len(dataset.buffer) == 40
    assert len(batches) == (40 - 8) // 4  # after each batched step past learning_starts
    assert dataset.policy.calls == (40 - 8) // 4  # random actions before learning_starts
    assert all(b.batch_size == torch.Size([4]) and b["obs"].device == dataset.envs.device for b in batches)


def test_random_actions_are_uniform_within_the_bounds_and_seeded():
    """Test that the warm-up actions lie in the Box, cover it, and repeat with the same action seed."""
    envs = TensorEnvGroup("Pendulum-v1", 256, seed=0)
    buffer = make_replay_buffer(10, 2, device="auto")

    def draws(seed):
        data = DeviceReplayDataset(envs, ZeroExplorer(), buffer, 256, 10**6, 1.0, DataCounters(), 0, action_seed=seed)
        return data.random_action()

    first, again, other = draws(3), draws(3), draws(4)
    assert first.shape == (256, 1) and first.min() >= -2 and first.max() <= 2
    assert first.min() < -1.5 and first.max() > 1.5
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_sac_fits_on_the_torch_backend_with_its_buffer_on_the_env_device():
    """Test that Trainer.fit runs SAC on batched Pendulum through the device stream and takes the scheduled steps."""
    from rl_lightning import SAC

    data = tiny_replay_data("Pendulum-v1", backend="torch", num_envs=4, utd_ratio=0.25)
    trainer = quiet_trainer(max_epochs=-1)
    trainer.fit(SAC(total_timesteps=120), data)
    assert isinstance(data._train_dataset, DeviceReplayDataset)
    assert data.env_steps == 120 and len(data.buffer) == 120
    assert trainer.global_step == (120 - 40) // 4  # a gradient step after each batched step past 40
    assert data.buffer.storage._storage["obs"].device == data.train_envs.device


def test_dqn_fits_on_the_torch_backend_with_discrete_actions_stored_as_indices():
    """Test that DQN's epsilon-greedy collection from batched CartPole stores int64 action indices 0 and 1."""
    from rl_lightning import DQN

    data = tiny_replay_data("CartPole-v1", backend="torch", num_envs=4, utd_ratio=0.25)
    trainer = quiet_trainer(max_epochs=-1)
    trainer.fit(DQN(total_timesteps=120), data)
    actions = data.buffer.storage[:120]["action"]
    assert actions.dtype == torch.int64 and set(actions.tolist()) == {0, 1}
    assert trainer.global_step == (120 - 40) // 4  # a gradient step after each batched step past 40


@pytest.mark.parametrize(
    "kwargs, key",
    [({"storage": "memmap"}, "storage"), ({"prioritized": True}, "prioritized"),
     ({"optimize_memory_usage": True}, "optimize_memory_usage")],
)  # fmt: skip
def test_torch_backend_refuses_replay_settings_it_has_not(kwargs, key):
    """Test that memmap, prioritized and compact replay on the torch backend are refused, naming the key and fix."""
    with pytest.raises(ValueError, match=f"data.{key}=.*env.backend=gymnasium"):
        tiny_replay_data("Pendulum-v1", backend="torch", **kwargs)
