"""Tests for evaluation episodes."""

import numpy as np
import pytest

from rl_lightning.data import episodes_per_env, evaluate, evaluation
from rl_lightning.envs import EnvGroup
from rl_lightning.faults import EnvFault
from tests.conftest import SCRIPTED_ID, SCRIPTED_SETS, ObsValuePolicy


def test_episode_quota_is_even():
    """Test that episodes are split evenly over envs."""
    assert episodes_per_env(10, 4) == [3, 3, 2, 2]
    assert episodes_per_env(2, 4) == [1, 1, 0, 0]


def test_evaluate_runs_exact_episode_count_per_set():
    """Test that evaluate returns exactly the requested episodes with the set's statistics."""
    for obj_set, length, success in (("train", 5, 0.0), ("test", 4, 1.0)):
        group = EnvGroup(SCRIPTED_ID, 3, obj_set=obj_set, obj_sets=SCRIPTED_SETS)
        stats = evaluate(ObsValuePolicy(), group, episodes=7)
        assert len(stats) == 7
        assert stats.lengths == [length] * 7
        assert stats.returns == [length * (length + 1) / 2] * 7
        assert np.all(np.array(stats.successes) == success)
        assert sorted(stats.envs) == [0, 0, 0, 1, 1, 2, 2]


def test_evaluate_is_reproducible():
    """Test that two evaluations with the same seed see the same CartPole episodes."""
    group = EnvGroup("CartPole-v1", 2, obj_set="test")

    class Random(ObsValuePolicy):
        def act(self, obs, state=None, episode_start=None, deterministic=False, value=True):
            action, log_prob, value, state = super().act(obs)
            return (obs[:, 2] > 0).long(), log_prob, value, state  # push toward the pole's lean

    first = evaluate(Random(), group, episodes=4, seed=11)
    second = evaluate(Random(), group, episodes=4, seed=11)
    assert first.returns == second.returns
    assert len(set(first.returns)) > 1  # the variations and seeds really differ


def test_a_sampling_evaluation_repeats_with_its_seed_and_leaves_the_runs_random_draws_alone(monkeypatch):
    """Test that evaluating with sampled actions (eval_deterministic=False) gives the same episodes for the same seed
    and leaves torch's global generator where it was (it drew from it: returns 19.5, 12.25, 22.75 from one model, and a
    run that evaluated trained other weights than one that did not)."""
    import gymnasium as gym
    import torch

    from rl_lightning.nets import ActorCritic

    torch.manual_seed(0)
    env = gym.make("CartPole-v1")
    policy = ActorCritic(env.observation_space, env.action_space, (16,))
    group = EnvGroup("CartPole-v1", 2, obj_set="test")
    state = torch.get_rng_state()
    # torch.manual_seed would seed every GPU's generator too, and only the policy's device is put back.
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda seed: pytest.fail("a GPU generator outside the fork"))
    runs = [evaluate(policy, group, episodes=6, deterministic=False, seed=seed).returns for seed in (3, 3, 4)]
    assert torch.equal(torch.get_rng_state(), state)
    assert runs[0] == runs[1] != runs[2]


def test_an_episode_that_never_ends_stops_evaluation_naming_the_time_limit(monkeypatch):
    """Test that evaluating an env without a time limit the policy reaches raises, rather than running for ever, and
    that a time limit for evaluation, longer than the check's steps, lets the same env evaluate."""
    monkeypatch.setattr(evaluation, "MAX_EVAL_EPISODE_STEPS", 25)
    endless = {"train": [{"attrs": {"episode_len": 10**9}}], "test": [{"attrs": {"episode_len": 10**9}}]}
    with pytest.raises(
        EnvFault,
        match=r"Scripted-v0 \(object set 'test'\): env 0 ended no episode in 25 steps.*"
        r"eval_max_episode_steps",
    ):
        evaluate(ObsValuePolicy(), EnvGroup(SCRIPTED_ID, 2, obj_set="test", obj_sets=endless), episodes=3)
    # A time limit longer than the check's steps is the user's choice: its episodes are waited for.
    limited = EnvGroup(SCRIPTED_ID, 2, obj_set="test", obj_sets=endless, max_episode_steps=30)
    assert evaluate(ObsValuePolicy(), limited, episodes=3).lengths == [30] * 3


def test_play_episode_films_the_reset_and_every_step_including_the_last(tmp_path):
    """Test that a filmed episode of n steps has n + 1 frames and the statistics of the episode."""
    from rl_lightning.data.evaluation import play_episode
    from rl_lightning.envs import make_env
    from rl_lightning.video import VideoWriter
    from tests.helpers import count_frames

    env = make_env(SCRIPTED_ID, "test", SCRIPTED_SETS)
    episode = play_episode(ObsValuePolicy(), env, seed=0)
    assert (episode.ret, episode.length, episode.success, episode.ended) == (10.0, 4, 1.0, True)

    env = make_env("Pendulum-v1", render_mode="rgb_array", max_episode_steps=30)
    with VideoWriter(tmp_path / "pendulum.mp4", fps=30) as video:
        episode = play_episode(_ConstantAction(1.0), env, seed=0, video=video)
    assert episode.length == 30 and episode.ended
    assert video.frames == count_frames(tmp_path / "pendulum.mp4") == 31


def test_play_episode_stops_at_max_frames(tmp_path):
    """Test that max_frames cuts a long episode's video and the episode with it."""
    from rl_lightning.data.evaluation import play_episode
    from rl_lightning.envs import make_env
    from rl_lightning.video import VideoWriter
    from tests.helpers import count_frames

    env = make_env("Pendulum-v1", render_mode="rgb_array")
    with VideoWriter(tmp_path / "cut.mp4", fps=30) as video:
        episode = play_episode(_ConstantAction(0.0), env, seed=0, video=video, max_frames=7)
    assert (episode.length, episode.ended) == (6, False)
    assert count_frames(tmp_path / "cut.mp4") == 7
    with VideoWriter(tmp_path / "one.mp4", fps=30) as video:
        episode = play_episode(_ConstantAction(0.0), env, seed=0, video=video, max_frames=1)
    assert (episode.length, video.frames) == (0, 1)  # the reset's frame only: no step taken


class _ConstantAction(ObsValuePolicy):
    """A continuous policy that always applies the same torque."""

    def __init__(self, torque: float):
        super().__init__()
        self.torque = torque

    def act(self, obs, state=None, episode_start=None, deterministic=False, value=True):
        import torch

        return torch.full((obs.shape[0], 1), self.torque), None, None, None


def test_an_evaluation_of_no_episodes_is_refused():
    """Test that a count of episodes below one is refused (it returned no episodes, silently)."""
    group = EnvGroup(SCRIPTED_ID, 2, obj_sets=SCRIPTED_SETS)
    with pytest.raises(ValueError, match="episodes must be a positive integer, got -3"):
        evaluate(ObsValuePolicy(), group, episodes=-3)
