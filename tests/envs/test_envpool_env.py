"""EnvPool behind the tensor path's interface: CartPole's dynamics, same-step restarts, refusals, PPO and SAC fits."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.envs import EnvGroup
from rl_lightning.envs.envpool_env import EnvPoolVectorEnv, check_envpool_task, envpool_task
from tests.conftest import SCRIPTED_ID
from tests.helpers import fit_and_test, tiny_ppo, tiny_replay_data, tiny_rollout_data

PLAIN = {"train": [{}], "test": [{}]}


def test_steps_follow_gymnasium_cartpole_and_ended_envs_restart_within_the_step():
    """Test that every non-final step is gymnasium CartPole's from the previous obs, that ended envs return their
    true last obs as final_obs and a fresh start as obs in the same step, and that no step is a reset step."""
    env = EnvPoolVectorEnv("CartPole-v1", 3, seed=0, max_episode_steps=4)
    reference = gym.make("CartPole-v1").unwrapped
    reference.reset(seed=0)
    obs, _ = env.reset()
    rng = np.random.default_rng(0)
    for t in range(12):
        action = torch.as_tensor(rng.integers(0, 2, 3))
        next_obs, reward, terminated, truncated, info = env.step(action)
        assert reward.tolist() == [1.0] * 3  # never EnvPool's reward-0 reset step
        done = (terminated | truncated).numpy()
        assert info["_final_obs"].tolist() == done.tolist()
        assert done.tolist() == [(t + 1) % 4 == 0] * 3 or terminated.any()
        for i in range(3):
            reference.state = obs[i].double().numpy()
            expected, *_ = reference.step(int(action[i]))
            np.testing.assert_allclose(info["final_obs"][i].numpy(), expected, atol=1e-5)
            if done[i]:  # a fresh start: CartPole's starts lie within +-0.05
                assert next_obs[i].abs().max() <= 0.05
                assert not torch.equal(next_obs[i], info["final_obs"][i])
            else:
                assert torch.equal(next_obs[i], info["final_obs"][i])
        obs = next_obs
    env.close()


def test_reset_with_another_seed_rebuilds_the_pool_and_repeats_its_starts():
    """Test that reset(seed) gives the starts of that seed, the same on every call, and another seed others."""
    env = EnvPoolVectorEnv("CartPole-v1", 2, seed=0)
    first, _ = env.reset(seed=5)
    again, _ = env.reset(seed=6)
    back, _ = env.reset(seed=5)
    assert torch.equal(first, EnvPoolVectorEnv("CartPole-v1", 2, seed=5).reset()[0])
    assert not torch.equal(first, again) and torch.equal(EnvPoolVectorEnv("CartPole-v1", 2, seed=6).reset()[0], again)
    assert back.shape == (2, 4)


def test_unknown_tasks_and_varied_parameters_are_refused_with_the_fix():
    """Test that an id EnvPool lacks names close ids and the fix, and object-set attrs name the plain sets."""
    with pytest.raises(ValueError, match="EnvPool has no task 'CartPole-v9'.*CartPole-v1.*env.backend=gymnasium"):
        check_envpool_task("CartPole-v9")
    with pytest.raises(ValueError, match=f"no task '{SCRIPTED_ID}'"):  # a gymnasium id EnvPool does not ship
        tiny_rollout_data(env_id=SCRIPTED_ID, backend="envpool")
    with pytest.raises(ValueError, match=r"per-env parameters\. It has none.*obj_sets: \{train: \[\{\}\]"):
        EnvGroup("CartPole-v1", 2, backend="envpool")  # the shipped sets vary the pole
    with pytest.raises(ValueError, match="env.wrappers"):
        tiny_rollout_data(backend="envpool", wrappers=["gymnasium.wrappers.RecordEpisodeStatistics"])


def test_ppo_trains_and_evaluates_on_the_envpool_backend():
    """Test that Trainer.fit runs PPO on EnvPool's CartPole through the one rollout loop and tests both object sets."""
    data = tiny_rollout_data(backend="envpool", num_envs=8, obj_sets=PLAIN, eval_episodes=4)
    metrics = fit_and_test(tiny_ppo(total_timesteps=8 * 16 * 3), data)
    assert data.env_steps == 8 * 16 * 3
    assert metrics["eval/return_mean"] >= 1 and metrics["eval_ood/return_mean"] >= 1


def test_sac_collects_from_envpool_pendulum_into_its_replay_buffer():
    """Test that SAC's replay stream steps EnvPool's Pendulum and stores every transition with its action bounds."""
    from rl_lightning import SAC
    from tests.helpers import quiet_trainer

    data = tiny_replay_data("Pendulum-v1", backend="envpool", num_envs=4, utd_ratio=0.25, obj_sets=PLAIN)
    trainer = quiet_trainer(max_epochs=-1)
    trainer.fit(SAC(total_timesteps=120), data)
    assert data.env_steps == 120 and len(data.buffer) == 120
    actions = data.buffer.storage[:120]["action"]
    assert actions.min() >= -2 and actions.max() <= 2 and actions.std() > 0.1
    assert trainer.global_step == (120 - 40) // 4  # one after each batched step past learning_starts


def test_importing_envpool_leaves_the_environment_as_it_was(monkeypatch):
    """Test that building an EnvPool env does not leave MPLBACKEND set (envpool sets it at import, and a Jupyter
    kernel started later would inherit it and draw no inline figures)."""
    import importlib
    import os
    import sys

    monkeypatch.delenv("MPLBACKEND", raising=False)
    for name in [m for m in sys.modules if m == "envpool" or m.startswith("envpool.")]:
        monkeypatch.delitem(sys.modules, name)  # a fresh import, as in a new process
    importlib.invalidate_caches()
    EnvPoolVectorEnv("CartPole-v1", 2).close()
    assert "MPLBACKEND" not in os.environ


def test_a_task_that_reports_success_gives_success_rates_on_the_envpool_backend():
    """Test that EnvPool's per-env ``success`` (or ``is_success``) info reaches the episode statistics: an ended
    episode's final step (success_rate) and any of its steps (success_once). CartPole reports none, so the pool's
    step is wrapped to report CartPole's pole angle leaning right as success, as a task of its own would."""
    group = EnvGroup("CartPole-v1", 4, backend="envpool", obj_sets={"train": [{}]}, obj_set="train", seed=0)
    group.reset()  # a seeded reset builds the pool anew: wrap the one that steps
    pool = group.env._pool
    step = pool.step

    def reporting_step(actions, env_ids):
        obs, reward, terminated, truncated, info = step(actions, env_ids)
        return obs, reward, terminated, truncated, {**info, "success": obs[:, 2] > 0}

    pool.step = reporting_step
    for _ in range(200):
        group.step(torch.randint(0, 2, (4,)))
    stats = group.pop_stats()
    assert len(stats) > 4
    assert set(stats.successes) <= {0.0, 1.0} and set(stats.successes_once) <= {0.0, 1.0}
    assert all(once >= end for once, end in zip(stats.successes_once, stats.successes, strict=True))
    assert 0 < sum(stats.successes) < len(stats) and sum(stats.successes_once) > sum(stats.successes)


def test_a_seeded_reset_repeats_its_episodes():
    """Test that reset(seed=s) starts the same episodes each time, also with the pool's current seed (evaluation
    resets its envs with their own seed before every evaluation, and compares like with like)."""
    group = EnvGroup("CartPole-v1", 2, backend="envpool", obj_sets={"train": [{}]}, seed=7)
    first = group.reset(seed=7).clone()
    for _ in range(3):
        group.step(torch.zeros(2, dtype=torch.long))
    assert torch.equal(group.reset(seed=7), first)
    group.close()


def test_an_atari_id_as_gymnasium_needs_it_is_envpools_game():
    """Test that ``ale_py:ALE/Breakout-v5``, the spelling the id check asks for (it imports ale_py, which registers
    the ALE ids), names EnvPool's ``Breakout-v5``: every spelling was refused by one check or the other."""
    assert envpool_task("ale_py:ALE/Breakout-v5") == envpool_task("ALE/Breakout-v5") == "Breakout-v5"
    check_envpool_task("ale_py:ALE/Breakout-v5")
    assert envpool_task("HalfCheetah-v5") == "HalfCheetah-v5"
