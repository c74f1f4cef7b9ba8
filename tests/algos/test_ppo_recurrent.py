"""Recurrent PPO (PPO(recurrent=True)): sequence minibatches, a first-epoch ratio of 1, evaluation with state."""

from __future__ import annotations

import pytest
import torch

from rl_lightning.algos import ppo as ppo_module
from rl_lightning.nets.recurrent import RecurrentActorCritic
from tests.helpers import fit_and_test, tiny_ppo, tiny_rollout_data


@pytest.mark.parametrize(
    "cell, shared_core, bptt_length", [("lstm", True, None), ("gru", False, None), ("lstm", False, 8)]
)
def test_recurrent_ppo_fits_replays_whole_sequences_and_tests_both_sets(cell, shared_core, bptt_length, monkeypatch):
    """Test that Trainer.fit collects with the state, that the update's first minibatch recomputes the rollout's
    log-probabilities (ratio 1: approx_kl and clip fraction 0) on minibatches of whole sequences (env sequences, or
    with truncated BPTT the 8-step pieces of them), and that the final test evaluates both object sets with the
    state carried."""
    seen, shapes, states = [], [], []
    real_loss, real_evaluate = ppo_module.ppo_loss, RecurrentActorCritic.evaluate_actions

    def loss_spy(*args, **coefs):
        terms = real_loss(*args, **coefs)
        seen.append((float(terms.approx_kl), float(terms.clip_fraction)))
        return terms

    def evaluate_spy(self, obs, action, episode_start, state):
        shapes.append(tuple(episode_start.shape))
        states.append(state)
        return real_evaluate(self, obs, action, episode_start, state)

    monkeypatch.setattr(ppo_module, "ppo_loss", loss_spy)
    monkeypatch.setattr(RecurrentActorCritic, "evaluate_actions", evaluate_spy)
    model = tiny_ppo(recurrent=True, cell=cell, shared_core=shared_core, recurrent_size=16, hidden_sizes=[16],
                     bptt_length=bptt_length, total_timesteps=4 * 16 * 3)  # fmt: skip
    data = tiny_rollout_data(num_envs=4)
    metrics = fit_and_test(model, data)
    assert isinstance(model.policy, RecurrentActorCritic) and model.policy.cell == cell
    assert len(seen) == 3 * 2 * 2  # 3 rollouts x 2 epochs x 2 minibatches
    first_kl, first_clip = seen[0]
    assert abs(first_kl) < 1e-6 and first_clip == 0.0
    length = bptt_length or 16
    sequences = 4 * 16 // length  # 4 envs x 16 steps, cut into pieces or whole
    assert shapes == [(length, sequences // 2)] * 12  # two minibatches of whole sequences per epoch
    assert all(state.shape == (sequences // 2, 2 if cell == "lstm" else 1, 1 if shared_core else 2, 16)
               for state in states)  # fmt: skip
    assert metrics["eval/return_mean"] >= 1 and "eval_ood/return_mean" in metrics


def test_recurrent_settings_are_checked_when_the_algorithm_is_built():
    """Test that an unknown cell, a bad width, custom heads and sequence-splitting minibatches are refused."""
    with pytest.raises(ValueError, match="cell must be one of"):
        tiny_ppo(recurrent=True, cell="rnn")
    with pytest.raises(ValueError, match="recurrent_size"):
        tiny_ppo(recurrent=True, recurrent_size=0)
    with pytest.raises(ValueError, match="custom actor or critic"):
        tiny_ppo(recurrent=True, actor=torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match="this policy has none. Set recurrent=true"):
        tiny_ppo(bptt_length=8)
    from tests.helpers import quiet_trainer

    with pytest.raises(ValueError, match="num_minibatches=2 does not divide the rollout's sequences of .* = 3;"):
        quiet_trainer(max_epochs=1).fit(tiny_ppo(recurrent=True), tiny_rollout_data(num_envs=3, rollout_steps=4))
    with pytest.raises(ValueError, match="bptt_length=3 does not divide rollout_steps=4"):
        quiet_trainer(max_epochs=1).fit(tiny_ppo(recurrent=True, bptt_length=3), tiny_rollout_data(rollout_steps=4))


def test_recurrent_ppo_collects_from_a_batched_env_through_the_same_loop():
    """Test that a recurrent policy trains on the torch backend (the one rollout loop carries its state there too)."""
    data = tiny_rollout_data(backend="torch", num_envs=8)
    model = tiny_ppo(recurrent=True, recurrent_size=8, hidden_sizes=[8], total_timesteps=8 * 16 * 2)
    metrics = fit_and_test(model, data)
    assert data.env_steps == 8 * 16 * 2 and metrics["eval/return_mean"] >= 1


def test_predict_takes_and_returns_the_state_and_refuses_a_wrong_one():
    """Test that predict carries the state as acting does (starts from zeros, zeroes where an episode starts),
    that calling the module (or its policy) acts as predict does from the initial state, and that a wrong state, or a
    state for a feed-forward policy, is refused naming the fix."""
    import numpy as np

    model = tiny_ppo(recurrent=True, recurrent_size=8, hidden_sizes=[8], total_timesteps=4 * 16)
    fit_and_test(model, tiny_rollout_data(num_envs=4))
    obs = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    action, state = model.predict(obs)
    assert action.shape == (3,) and state.shape == (3, 2, 1, 8) and np.abs(state).sum() > 0
    with torch.no_grad():
        for module in (model, model.policy):
            np.testing.assert_array_equal(module(torch.as_tensor(obs)).numpy(), action)
    _, again = model.predict(obs, state=np.zeros_like(state))  # zeros = the initial state
    np.testing.assert_array_equal(again, state)
    _, after = model.predict(obs, state=state)
    assert not np.allclose(after, state)
    _, restarted = model.predict(obs, state=after, episode_start=[True, False, True])
    np.testing.assert_array_equal(restarted[[0, 2]], state[[0, 2]])
    assert not np.allclose(restarted[1], state[1])
    single, one_state = model.predict(obs[0])
    assert np.ndim(single) == 0 and one_state.shape == (1, 2, 1, 8)
    with pytest.raises(ValueError, match=r"expected \(3, 2, 1, 8\)"):
        model.predict(obs, state=state[:2])
    with pytest.raises(ValueError, match="one per observation"):
        model.predict(obs, state=state, episode_start=[True])
    feed_forward = tiny_ppo(total_timesteps=2 * 16)
    fit_and_test(feed_forward, tiny_rollout_data())
    with pytest.raises(TypeError, match="has no recurrent state"):
        feed_forward.predict(obs, state=state)


def test_an_acting_copy_of_a_recurrent_policy_is_refused_with_the_fix():
    """Test that ActorSync with a recurrent policy stops before any step, naming the callback to drop."""
    from rl_lightning.callbacks import ActorSync
    from tests.helpers import quiet_trainer

    data = tiny_rollout_data(num_envs=4)
    with pytest.raises(ValueError, match="Drop the ActorSync callback"):
        quiet_trainer(callbacks=[ActorSync(device="cpu")], max_epochs=1).fit(tiny_ppo(recurrent=True), data)
    assert data.env_steps == 0
