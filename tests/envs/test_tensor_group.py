"""``TensorEnvGroup`` draws object-set variations per episode as per-env parameters, counts episodes on the device."""

from __future__ import annotations

import math
import types

import pytest
import torch

from rl_lightning.envs import SHIPPED_OBJ_SETS, TorchVectorEnv
from rl_lightning.envs.tensor_group import TensorEnvGroup
from rl_lightning.faults import NumericalFault


def test_each_episode_runs_one_shipped_variation():
    """Test that every env's parameters are one variation's, kept through its episode and drawn anew after it."""
    group = TensorEnvGroup("CartPole-v1", 64, obj_set="train", seed=0)
    group.reset()
    variations = SHIPPED_OBJ_SETS["CartPole-v1"]["train"]
    lengths = sorted(v["attrs"]["length"] for v in variations)
    seen, redrawn = set(), 0
    for _ in range(200):
        before = group.env.params["length"].clone()
        step = group.step(torch.randint(0, 2, (64,)))
        after = group.env.params["length"]
        # a running episode keeps its variation; an ended one may draw another
        assert torch.equal(before[~step.done], after[~step.done])
        redrawn += int((before[step.done] != after[step.done]).sum())
        for variation in group.variation.tolist():
            seen.add(variation)
        masspole = [variations[v]["attrs"]["masspole"] for v in group.variation.tolist()]
        assert torch.allclose(group.env.params["masspole"], torch.tensor(masspole))
    assert seen == {0, 1, 2} and redrawn > 0
    assert sorted(set(group.env.params["length"].tolist())) == pytest.approx(lengths)


def test_test_set_parameters_and_defaults():
    """Test that a variation silent on a parameter runs the env's default (heavy_cart keeps length 0.5)."""
    group = TensorEnvGroup("CartPole-v1", 256, obj_set="test", seed=1)
    group.reset()
    heavy = group.env.params["masscart"] == 5.0
    assert heavy.any() and (~heavy).any()
    assert torch.equal(group.env.params["length"][heavy], torch.full((int(heavy.sum()),), 0.5))


def test_episode_statistics_read_once():
    """Test that pop_stats reports each ended episode once, its return the sum of its rewards (CartPole: its length)."""
    group = TensorEnvGroup("CartPole-v1", 8, seed=0)
    group.reset()
    ends = 0
    for _ in range(100):
        ends += int(group.step(torch.zeros(8, dtype=torch.int64)).done.sum())
    stats = group.pop_stats()
    assert len(stats) == ends > 0
    assert stats.returns == [float(n) for n in stats.lengths]
    assert all(math.isnan(s) for s in stats.successes)
    assert len(group.pop_stats()) == 0


def test_pendulum_returns_are_the_sum_of_rewards():
    """Test that a truncated Pendulum episode's return is the sum of its 200 rewards."""
    group = TensorEnvGroup("Pendulum-v1", 3, seed=0)
    group.reset()
    total = torch.zeros(3, dtype=torch.float64)
    for _ in range(200):
        step = group.step(torch.zeros(3, 1))
        total += step.reward
    stats = group.pop_stats()
    assert stats.lengths == [200] * 3 and step.truncated.all()
    assert stats.returns == pytest.approx(total.tolist())


def test_non_finite_values_stop_the_run():
    """Test that a NaN observation is counted on the device and raised by pop_stats, naming the env."""
    group = TensorEnvGroup("Pendulum-v1", 4, obj_sets={"train": [{"attrs": {"g": float("nan")}}], "test": [{}]}, seed=0)
    group.reset()
    group.step(torch.zeros(4, 1))
    with pytest.raises(NumericalFault, match="batched Pendulum-v1 .* 4 non-finite"):
        group.pop_stats()


def _wrong_env(num_envs: int, device: str):
    def make(env_id, n, dev, seed, limit):
        env = TorchVectorEnv(env_id, num_envs, seed=seed)
        return env if device == "cpu" else types.SimpleNamespace(num_envs=num_envs, device=torch.device(device))

    return make


def test_bad_settings_name_the_fix():
    """Test that unknown parameters, make_kwargs, other tasks, sizes, devices and skip are refused before a step."""
    with pytest.raises(ValueError, match=r"sets \['polelength'\].*has \['force_mag'"):
        TensorEnvGroup("CartPole-v1", 2, obj_sets={"train": [{"attrs": {"polelength": 1.0}}], "test": [{}]})
    with pytest.raises(ValueError, match="make_kwargs .* attrs"):
        TensorEnvGroup("CartPole-v1", 2, obj_sets={"train": [{"make_kwargs": {"sutton_barto_reward": True}}]})
    with pytest.raises(ValueError, match="names env_id 'Acrobot-v1'"):
        TensorEnvGroup("CartPole-v1", 2, obj_sets={"train": [{"env_id": "Acrobot-v1"}]})
    with pytest.raises(ValueError, match="holds 3 envs, but num_envs=2"):
        TensorEnvGroup("CartPole-v1", 2, make_env=_wrong_env(3, "cpu"))
    with pytest.raises(ValueError, match="lives on cuda:0, but the policy trains on cpu"):
        TensorEnvGroup("CartPole-v1", 2, make_env=_wrong_env(2, "cuda:0"))
    with pytest.raises(ValueError, match="parameters are numbers"):
        TensorEnvGroup("CartPole-v1", 2, obj_sets={"train": [{"attrs": {"length": "long"}}]})
    group = TensorEnvGroup("CartPole-v1", 2)
    with pytest.raises(ValueError, match="on_nonfinite='skip'.*cannot skip"):
        group.on_nonfinite = "skip"
    group.on_nonfinite = "stop"
