"""Tests for the recurrent PPO benchmark's runner and its sb3-contrib adapter (the figures come from running it)."""

import numpy as np
import torch

import benchmarks.recurrent_ppo as bench


def test_every_contender_runs_the_same_budget_and_is_evaluated_on_the_train_set(tmp_path):
    """Test that one invocation runs ours, sb3-contrib's RecurrentPPO and the feed-forward control for the same
    env steps, and reports each one's final train-set return and env-steps/s."""
    report = bench.main(["--budget", "512", "--seeds", "1", "--json", str(tmp_path / "r.json")])
    assert list(report["runs"]) == ["rl_lightning_lstm", "sb3_contrib", "rl_lightning_feedforward"]
    for name, (run,) in report["runs"].items():
        assert run["env_steps"] == 512, name
        assert 1 <= run["train_return"] <= 500 and run["env_steps_per_second"] > 0, name
    assert (tmp_path / "r.json").exists()


class _RecordingModel:
    """Stands in for RecurrentPPO: records what predict got and returns a state that counts its calls."""

    def __init__(self):
        self.calls = []

    def predict(self, obs, state=None, episode_start=None, deterministic=False):
        self.calls.append((obs.copy(), state, episode_start.copy(), deterministic))
        count = 0 if state is None else state
        return np.zeros(len(obs), dtype=np.int64), count + 1


class _Halve:
    def normalize_obs(self, obs):
        return obs / 2


def test_the_sb3_adapter_normalizes_observations_and_passes_the_state_and_episode_starts():
    """Test that evaluate's calls reach RecurrentPPO.predict with normalized observations, the state predict last
    returned, and which envs begin an episode."""
    model = _RecordingModel()
    policy = bench.SB3RecurrentPolicy(model, _Halve())
    assert policy.initial_state(2) is None
    obs = torch.tensor([[2.0, 4.0], [6.0, 8.0]])
    action, _, _, state = policy.act(obs, None, torch.tensor([True, True]))
    action, _, _, state = policy.act(obs, state, torch.tensor([False, True]))
    assert action.tolist() == [0, 0] and state == 2
    (obs0, state0, starts0, det0), (_, state1, starts1, _) = model.calls
    np.testing.assert_array_equal(obs0, [[1.0, 2.0], [3.0, 4.0]])
    assert state0 is None and state1 == 1 and det0 is True
    assert starts0.tolist() == [True, True] and starts1.tolist() == [False, True]
