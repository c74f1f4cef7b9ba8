"""Rollouts of a recurrent policy: the state reset at episode boundaries, kept at the start, sequence minibatches."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.data.collection import DataCounters
from rl_lightning.data.recurrent_rollout import RecurrentRolloutDataset, env_minibatch_plan
from rl_lightning.data.rollout import UpdatePlan
from rl_lightning.envs import EnvGroup
from rl_lightning.nets.recurrent import RecurrentActorCritic
from tests.conftest import SCRIPTED_ID, SCRIPTED_SETS


class StepsSinceStart(torch.nn.Module):
    """A stand-in recurrent policy whose state counts the steps since its last reset; records the state it acted with.

    V(obs, state) = 10 * state + obs, so a bootstrap value shows which state it was computed with.
    """

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.used: list[torch.Tensor] = []

    def initial_state(self, n, device=None):
        return torch.zeros(1, 1, n, 1)

    def _reset(self, state, episode_start):
        return state * (~episode_start).float().view(1, 1, -1, 1)

    def act(self, obs, state, episode_start, deterministic=False):
        state = self._reset(state, episode_start)
        self.used.append(state[0, 0, :, 0].clone())
        zeros = torch.zeros(obs.shape[0])
        return zeros.long(), zeros, self.value(obs, state, torch.zeros_like(episode_start)), state + 1

    def value(self, obs, state, episode_start):
        return 10 * self._reset(state, episode_start)[0, 0, :, 0] + obs[:, 0]

    def update_normalizer(self, obs):
        pass


def _dataset(policy, rollout_steps=8, num_envs=2, max_episode_steps=None, plan=None):
    envs = EnvGroup(SCRIPTED_ID, num_envs, obj_sets=SCRIPTED_SETS, max_episode_steps=max_episode_steps)
    plan = plan or UpdatePlan(gamma=0.5, gae_lambda=1e-6, update_epochs=2, num_minibatches=2)
    return RecurrentRolloutDataset(envs, policy, rollout_steps, plan, DataCounters(), torch.Generator(), reset_seed=0)


@pytest.mark.parametrize("limit, ends_at", [(None, 5), (3, 3)])  # terminated after 5 steps, or truncated after 3
def test_the_state_resets_exactly_where_an_episode_ended(limit, ends_at):
    """Test that the state a step acts with counts the steps since the episode began, in this rollout and the next,
    for terminated and truncated episodes alike, and that the rollout keeps the state it started from."""
    policy = StepsSinceStart()
    dataset = _dataset(policy, max_episode_steps=limit)
    first, (state0,) = dataset.collect()
    second, (state1,) = dataset.collect()
    used = torch.stack(policy.used)[:, 0].tolist()
    assert used == [float(t % ends_at) for t in range(16)]
    starts = torch.cat([first["episode_start"], second["episode_start"]])[:, 0].tolist()
    assert starts == [t % ends_at == 0 for t in range(16)]
    assert not state0.any()
    assert state1[0, 0, :, 0].tolist() == [8 % ends_at] * 2  # carried over, before its reset flag is applied


def test_a_truncated_episode_bootstraps_with_the_state_after_the_cut_step():
    """Test that V(final obs) of a time-limit cut uses the state after that step (10 * 3 + obs 3 = 33)."""
    plan = UpdatePlan(gamma=0.5, gae_lambda=1e-6, update_epochs=1, num_minibatches=1)
    batch, _ = _dataset(StepsSinceStart(), rollout_steps=4, num_envs=1, max_episode_steps=3, plan=plan).collect()
    # step 2 (obs 2, state 2, reward 3) is cut: advantage = r + gamma * V(final obs 3, state 3) - V(obs 2, state 2)
    assert batch["advantage"][2, 0].item() == pytest.approx(3 + 0.5 * 33 - 22, abs=1e-4)
    # step 1 is not: it bootstraps from the next step's value (obs 2, state 2)
    assert batch["advantage"][1, 0].item() == pytest.approx(2 + 0.5 * 22 - 11, abs=1e-4)


def test_sequence_minibatches_cover_every_env_and_so_every_step_once_per_epoch():
    """Test that each epoch's minibatches are a partition of the envs, drawn afresh every epoch."""
    plan = UpdatePlan(update_epochs=3, num_minibatches=4)
    rows = env_minibatch_plan(8, plan, torch.Generator().manual_seed(0))
    assert rows.shape == (12, 2)
    epochs = [sorted(rows[e * 4 : (e + 1) * 4].flatten().tolist()) for e in range(3)]
    assert epochs == [list(range(8))] * 3
    assert len({tuple(rows[e * 4 : (e + 1) * 4].flatten().tolist()) for e in range(3)}) > 1


def test_a_real_recurrent_policy_rollout_replays_to_its_own_log_probs():
    """Test that replaying a collected rollout from its initial state gives the rollout's log-probs and values."""
    envs_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    torch.manual_seed(0)
    policy = RecurrentActorCritic(envs_space, gym.spaces.Discrete(2), hidden_sizes=(8,), recurrent_size=8)
    dataset = _dataset(policy, rollout_steps=12, max_episode_steps=4)
    dataset.collect()  # a second rollout starts from a carried, non-zero state
    batch, (state0,) = dataset.collect()
    assert state0.abs().sum() > 0
    with torch.no_grad():
        lp, _, v = policy.evaluate_sequences(batch["obs"], batch["action"], batch["episode_start"], state0)
    torch.testing.assert_close(lp, batch["log_prob"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v, batch["value"], atol=1e-5, rtol=1e-5)


def test_num_minibatches_must_divide_num_envs():
    """Test that a plan whose minibatches would split an env's sequence is refused, naming the fix."""
    with pytest.raises(ValueError, match="num_minibatches=3 does not divide num_envs=2"):
        _dataset(StepsSinceStart(), plan=UpdatePlan(num_minibatches=3))


def test_truncated_bptt_cuts_each_env_into_sequences_that_start_from_the_state_the_rollout_acted_with():
    """Test that bptt_length=4 turns a [8, 2] rollout into [4, 4] sequences (env n's steps 4c..4c+3 are sequence
    2c + n), each with the state the rollout had before its first step, and that the minibatches cover every
    sequence, so every step, once per epoch."""
    policy = StepsSinceStart()  # the state counts the steps since the episode began; episodes end after 5
    plan = UpdatePlan(gamma=0.5, gae_lambda=1e-6, update_epochs=3, num_minibatches=2, bptt_length=4)
    batch = next(iter(_dataset(policy, plan=plan)))
    rollout, state = batch["rollout"], batch["initial_state"]
    assert rollout.batch_size == (4, 4) and state.shape == (1, 1, 4, 1)
    assert state[0, 0, :, 0].tolist() == [0, 0, 4, 4]  # before step 0, and before step 4 (not yet reset)
    used = torch.stack(policy.used)  # [8 steps, 2 envs]: the state each step acted with
    for c in range(2):
        for n in range(2):
            assert rollout["obs"][:, 2 * c + n, 0].tolist() == [float((4 * c + t) % 5) for t in range(4)]
            assert rollout["episode_start"][:, 2 * c + n].tolist() == [(4 * c + t) % 5 == 0 for t in range(4)]
            assert used[4 * c : 4 * c + 4, n].tolist() == [float((4 * c + t) % 5) for t in range(4)]
    minibatches = batch["minibatches"]
    assert minibatches.shape == (6, 2)
    assert [sorted(minibatches[2 * e : 2 * e + 2].flatten().tolist()) for e in range(3)] == [[0, 1, 2, 3]] * 3


def test_truncated_bptt_sequences_replay_to_the_rollouts_own_log_probs():
    """Test that a real recurrent policy, replaying each bptt_length sequence from its stored state, recomputes
    the rollout's log-probs and values (the first epoch's ratio is 1)."""
    torch.manual_seed(0)
    space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    policy = RecurrentActorCritic(space, gym.spaces.Discrete(2), hidden_sizes=(8,), recurrent_size=8)
    plan = UpdatePlan(update_epochs=1, num_minibatches=2, bptt_length=3)
    dataset = _dataset(policy, rollout_steps=12, max_episode_steps=4, plan=plan)
    batch = next(iter(dataset))
    rollout, state = batch["rollout"], batch["initial_state"]
    assert rollout.batch_size == (3, 8) and state[:, :, 2:].abs().sum() > 0
    with torch.no_grad():
        lp, _, v = policy.evaluate_sequences(rollout["obs"], rollout["action"], rollout["episode_start"], state)
    torch.testing.assert_close(lp, rollout["log_prob"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(v, rollout["value"], atol=1e-5, rtol=1e-5)


def test_a_bptt_length_that_does_not_split_the_rollout_evenly_is_refused():
    """Test that bptt_length must divide rollout_steps, and num_minibatches the number of sequences."""
    with pytest.raises(ValueError, match="bptt_length=3 does not divide rollout_steps=8"):
        _dataset(StepsSinceStart(), plan=UpdatePlan(num_minibatches=2, bptt_length=3))
    with pytest.raises(ValueError, match="num_minibatches=3 does not divide the 8 sequences"):
        _dataset(StepsSinceStart(), plan=UpdatePlan(num_minibatches=3, bptt_length=2))
    with pytest.raises(ValueError, match="bptt_length must be a positive integer"):
        UpdatePlan(bptt_length=0)
