"""The batched torch envs equal gymnasium's CartPole-v1 and Pendulum-v1 step for step, and batch like a VectorEnv."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.envs.batched import DYNAMICS, TorchVectorEnv

N = 6
#: Per-env parameters, a different value in every env (CartPole: the object sets' lengths and masses).
CARTPOLE_PARAMS = {
    "length": torch.linspace(0.25, 1.0, N),
    "masspole": torch.linspace(0.05, 0.2, N),
    "masscart": torch.linspace(1.0, 5.0, N),
}
PENDULUM_PARAMS = {"m": torch.linspace(0.9, 1.6, N), "l": torch.linspace(0.9, 1.4, N), "g": torch.linspace(10, 14, N)}


def _gym_envs(env_id: str, params: dict[str, torch.Tensor]) -> list[gym.Env]:
    envs = []
    for i in range(N):
        env = gym.make(env_id).unwrapped
        for name, values in params.items():
            setattr(env, name, float(values[i]))
        if env_id == "CartPole-v1":  # derived in CartPoleEnv's constructor (ObjectSetWrapper._apply refreshes them)
            env.total_mass = env.masspole + env.masscart
            env.polemass_length = env.masspole * env.length
        env.reset(seed=i)
        envs.append(env)
    return envs


@pytest.mark.parametrize(
    "env_id, params, dtype, atol",
    [
        ("CartPole-v1", CARTPOLE_PARAMS, torch.float64, 1e-6),
        ("CartPole-v1", CARTPOLE_PARAMS, torch.float32, 1e-4),
        ("Pendulum-v1", PENDULUM_PARAMS, torch.float64, 1e-5),
        ("Pendulum-v1", PENDULUM_PARAMS, torch.float32, 1e-3),
    ],
)
def test_steps_equal_gymnasium_from_the_same_states_and_actions(env_id, params, dtype, atol):
    """Test that from gymnasium's states and actions each step gives gymnasium's observation, reward, termination."""
    envs = _gym_envs(env_id, params)
    batch = TorchVectorEnv(env_id, N, dtype=dtype, max_episode_steps=10**6, seed=0, **params)
    rng = np.random.default_rng(0)
    terminations = 0
    for _ in range(150):
        batch.state = torch.tensor(np.stack([e.state for e in envs]), dtype=dtype)
        actions = np.stack([e.action_space.sample() for e in envs])
        _, reward, terminated, truncated, info = batch.step(torch.as_tensor(actions))
        expected = [env.step(a) for env, a in zip(envs, actions, strict=True)]
        # the observation the step reached (an ended env's restart observation is the one returned)
        np.testing.assert_allclose(info["final_obs"].numpy(), np.stack([e[0] for e in expected]), atol=atol, rtol=0)
        np.testing.assert_allclose(reward.numpy(), [e[1] for e in expected], atol=atol * 10, rtol=1e-5)
        assert terminated.tolist() == [e[2] for e in expected]
        assert not truncated.any()
        for env, result in zip(envs, expected, strict=True):
            if result[2]:
                terminations += 1
                env.reset(seed=int(rng.integers(10**6)))
    assert terminations > 0 or env_id == "Pendulum-v1"  # CartPole's random actions end episodes


@pytest.mark.parametrize("env_id, limit", [("CartPole-v1", 500), ("Pendulum-v1", 200)])
def test_time_limit_and_same_step_autoreset(env_id, limit):
    """Test that episodes truncate at the id's limit and restart in the same step, the last observation in the info."""
    batch = TorchVectorEnv(env_id, N, seed=0)
    assert batch.max_episode_steps == limit
    batch.reset(seed=0)
    ended = torch.zeros(N, dtype=torch.bool)
    for step in range(limit):
        batch.elapsed[0] = limit - 1 if step == 0 else batch.elapsed[0]  # env 0 reaches the limit now
        action = torch.as_tensor(batch.action_space.sample()) * 0
        obs, _, terminated, truncated, info = batch.step(action)
        done = terminated | truncated
        assert torch.equal(info["_final_obs"], done)
        if step == 0:
            assert truncated[0] and done[0]
            assert batch.elapsed[0] == 0
        # a restarted env's observation is a fresh start; the others' is the stepped one
        assert torch.equal(obs[~done], info["final_obs"][~done])
        assert not torch.equal(obs[done], info["final_obs"][done]) or not done.any()
        assert (batch.elapsed[done] == 0).all() and (batch.elapsed[~done] > 0).all()
        ended |= done
    assert ended.all()  # every env ended within the limit (terminated or truncated)


def test_start_states_follow_gymnasium_bounds():
    """Test that restarts draw CartPole's states from [-0.05, 0.05) and Pendulum's from [-pi, pi) x [-1, 1)."""
    cart = TorchVectorEnv("CartPole-v1", 4096, seed=0)
    assert cart.state.abs().max() <= 0.05 and cart.state.std(0).min() > 0.02
    pendulum = TorchVectorEnv("Pendulum-v1", 4096, seed=0)
    assert pendulum.state[:, 0].abs().max() <= np.pi and pendulum.state[:, 0].abs().max() > 3.0
    assert pendulum.state[:, 1].abs().max() <= 1.0


def test_seeded_batches_repeat_and_differ_by_seed():
    """Test that a seed fixes the trajectory of a batch (restarts included) and another seed changes it."""

    def run(seed):
        batch = TorchVectorEnv("CartPole-v1", 8)
        obs, _ = batch.reset(seed=seed)
        out = [obs]
        generator = torch.Generator().manual_seed(1)
        for _ in range(60):
            out.append(batch.step(torch.randint(0, 2, (8,), generator=generator))[0])
        return torch.stack(out)

    assert torch.equal(run(3), run(3))
    assert not torch.equal(run(3), run(4))


def test_reset_of_some_envs_and_their_params():
    """Test that reset(options=...) restarts only the chosen envs and writes their parameters."""
    batch = TorchVectorEnv("CartPole-v1", 4, seed=0)
    batch.reset(seed=0)
    for _ in range(5):
        batch.step(torch.ones(4, dtype=torch.int64))
    kept = batch.state.clone()
    batch.reset(options={"env_ids": torch.tensor([1, 3]), "params": {"length": torch.tensor([0.4, 0.6])}})
    assert torch.equal(batch.state[[0, 2]], kept[[0, 2]]) and not torch.equal(batch.state[[1, 3]], kept[[1, 3]])
    assert batch.elapsed.tolist() == [5, 0, 5, 0]
    assert batch.params["length"].tolist() == pytest.approx([0.5, 0.4, 0.5, 0.6])


def test_spaces_are_gymnasiums():
    """Test that the single spaces equal gymnasium's and the batched ones stack num_envs of them."""
    for env_id in DYNAMICS:
        batch = TorchVectorEnv(env_id, 3)
        reference = gym.make(env_id)
        assert batch.single_observation_space == reference.observation_space
        assert batch.single_action_space == reference.action_space
        assert batch.observation_space.shape == (3, *reference.observation_space.shape)


def test_bad_input_names_the_problem():
    """Test that unknown ids, parameters, options, devices and batch sizes are refused with the fix."""
    with pytest.raises(ValueError, match="no batched torch version of 'Acrobot-v1'.*CartPole-v1"):
        TorchVectorEnv("Acrobot-v1", 2)
    with pytest.raises(ValueError, match=r"no parameter \['polelength'\].*length"):
        TorchVectorEnv("CartPole-v1", 2, polelength=1.0)
    batch = TorchVectorEnv("CartPole-v1", 2)
    with pytest.raises(ValueError, match="Unknown reset option"):
        batch.reset(options={"seeds": [1, 2]})
    with pytest.raises(ValueError, match="on meta but this batched env lives on cpu"):
        batch.step(torch.zeros(2, dtype=torch.int64, device="meta"))
    with pytest.raises(ValueError, match="actions for 3 envs; this batch has 2"):
        batch.step(torch.zeros(3, dtype=torch.int64))
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="num_envs must be a positive integer"):
            TorchVectorEnv("CartPole-v1", bad)
    with pytest.raises(TypeError, match="dtype"):
        TorchVectorEnv("CartPole-v1", 2, dtype=torch.int32)


@pytest.mark.parametrize("env_id", sorted(DYNAMICS))
def test_step_reads_nothing_back_to_the_host(env_id, monkeypatch):
    """Test that a step (restarts included) never turns a tensor into a host value: no bool, item, list, numpy, cpu."""
    batch = TorchVectorEnv(env_id, 16, seed=0, max_episode_steps=3)
    actions = torch.as_tensor(batch.action_space.sample())
    reads = []
    for name in ("__bool__", "item", "tolist", "numpy", "cpu", "__float__", "__int__", "__index__"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(
            torch.Tensor,
            name,
            lambda self, *a, _name=name, _original=original, **k: reads.append(_name) or _original(self, *a, **k),
        )
    for _ in range(7):  # two time limits: every env restarts twice
        batch.step(actions)
    monkeypatch.undo()
    assert reads == []
    assert batch.elapsed.tolist() == [1] * 16
