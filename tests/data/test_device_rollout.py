"""The tensor path's rollout stays on the device, bootstraps truncated episodes, and trains PPO through Trainer.fit."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.data.collection import DataCounters
from rl_lightning.data.device_rollout import DeviceRolloutDataset
from rl_lightning.data.rollout import UpdatePlan
from rl_lightning.envs.tensor_group import TensorEnvGroup
from rl_lightning.nets import ActorCritic
from tests.helpers import count_envs, fit_and_test, tiny_ppo, tiny_rollout_data


def _dataset(envs: TensorEnvGroup, policy, rollout_steps: int, plan: UpdatePlan | None = None):
    plan = plan or UpdatePlan(update_epochs=1, num_minibatches=1)
    return DeviceRolloutDataset(envs, policy, rollout_steps, plan, DataCounters(), torch.Generator(), reset_seed=0)


def _host_reads(rollout_steps: int, monkeypatch) -> list[str]:
    envs = TensorEnvGroup("CartPole-v1", 16, seed=0, max_episode_steps=5)  # episodes end within every rollout
    policy = ActorCritic(envs.observation_space, envs.action_space)
    dataset = _dataset(envs, policy, rollout_steps)
    dataset.collect()  # the first reset out of the count
    reads = []
    with monkeypatch.context() as patch:
        for name in ("__bool__", "item", "tolist", "numpy", "cpu", "__float__", "__int__", "__index__"):
            original = getattr(torch.Tensor, name)

            def counted(self, *args, _name=name, _original=original, **kwargs):
                reads.append(_name)
                return _original(self, *args, **kwargs)

            patch.setattr(torch.Tensor, name, counted)
        dataset.collect()
    return reads


def test_host_reads_per_rollout_are_a_constant(monkeypatch):
    """Test that a rollout of 32 steps reads as many values back to the host as one of 8 (none per step)."""
    short, long = _host_reads(8, monkeypatch), _host_reads(32, monkeypatch)
    assert sorted(short) == sorted(long)
    assert len(long) < 16


class CountPolicy(torch.nn.Module):
    """Action 0; V(obs) = 10 * obs."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def value(self, obs):
        return 10 * obs[:, 0]

    def act(self, obs, deterministic=False):
        zeros = torch.zeros(obs.shape[0])
        return zeros.long(), zeros, self.value(obs)

    def update_normalizer(self, obs):
        pass


@pytest.mark.parametrize("terminate_at, bootstrap", [(0, 30.0), (3, 0.0)])
def test_truncated_steps_bootstrap_from_the_final_observation(terminate_at, bootstrap):
    """Test that a time-limit step's advantage uses V(final obs) = 30 and a terminal step's uses none."""
    envs = count_envs(2, terminate_at)
    plan = UpdatePlan(gamma=0.5, gae_lambda=1e-6, update_epochs=1, num_minibatches=1)  # ~0: one-step advantages
    batch = _dataset(envs, CountPolicy(), 6, plan).collect().reshape(6, 2)
    # obs 0, 1, 2 then the episode ends at obs 3 (the time limit, or termination) and restarts at 0
    assert batch["obs"][:, 0, 0].tolist() == [0, 1, 2, 0, 1, 2]
    end = 1 + 0.5 * bootstrap - 20.0  # r + gamma V(s') - V(s) at obs 2
    assert batch["advantage"][:, 0].tolist() == pytest.approx([1 + 5 - 0, 1 + 10 - 10, end] * 2, abs=1e-4)


def test_ppo_trains_and_evaluates_on_the_torch_backend():
    """Test that Trainer.fit runs PPO on the batched CartPole, on the device path, and tests both object sets."""
    data = tiny_rollout_data(backend="torch", num_envs=64, eval_episodes=4)
    metrics = fit_and_test(tiny_ppo(total_timesteps=64 * 16 * 3), data)
    assert isinstance(data._train_dataset, DeviceRolloutDataset)
    assert data.env_steps == 64 * 16 * 3
    assert metrics["eval/return_mean"] >= 1 and metrics["eval_ood/return_mean"] >= 1
    assert data.last_collection.episodes.lengths and data.last_collection.episodes.returns == [
        float(n) for n in data.last_collection.episodes.lengths
    ]


def test_torch_backend_refusals():
    """Test that the torch backend refuses an id without batched dynamics, wrappers and obs_bound."""
    with pytest.raises(ValueError, match="none of 'Acrobot-v1'"):
        tiny_rollout_data(env_id="Acrobot-v1", backend="torch")
    with pytest.raises(ValueError, match="env.wrappers"):
        tiny_rollout_data(backend="torch", wrappers=["gymnasium.wrappers.RecordEpisodeStatistics"])
    with pytest.raises(ValueError, match="obs_bound"):
        tiny_rollout_data(backend="torch", obs_bound=10.0)
    with pytest.raises(ValueError, match="backend must be one of"):
        tiny_rollout_data(backend="jax")


def test_phase_clock_waits_for_a_cuda_device_only_when_asked(monkeypatch):
    """Test that the rollout's clock synchronizes a CUDA device only with synchronize_timing, and never the CPU."""
    import time

    from rl_lightning.data.device_rollout import _clock

    waits = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: waits.append(device))
    assert _clock(torch.device("cpu"), True) is time.perf_counter
    assert _clock(torch.device("cuda"), False) is time.perf_counter
    clock = _clock(torch.device("cuda"), True)
    assert clock() <= clock() and waits == [torch.device("cuda")] * 2


def test_a_synchronized_phase_timer_switches_the_tensor_rollout_to_synchronized_timing():
    """Test that PhaseTimer(synchronize=True) turns on the device rollout's synchronized clock when training starts."""
    from rl_lightning.callbacks.timing import PhaseTimer
    from tests.helpers import quiet_trainer

    data = tiny_rollout_data(backend="torch", num_envs=8, rollout_steps=8)
    timer = PhaseTimer(print_summary=False, synchronize=True)
    quiet_trainer(callbacks=[timer], max_epochs=1).fit(tiny_ppo(total_timesteps=64), data)
    assert data._train_dataset.synchronize_timing is True
    assert timer.totals["env"] > 0 and timer.totals["optimization"] > 0
