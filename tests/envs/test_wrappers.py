"""Wrappers named in a config: checked up front, applied to every env of a run, kept in checkpoints; and the
wrappers the library ships."""

import gymnasium as gym
import numpy as np
import pytest

from rl_lightning.envs import EnvGroup, make_env
from rl_lightning.envs.wrappers import KeepEntries, SuccessFromReward, apply_wrappers, check_wrappers

PIXEL_GOAL = "tests.envs.pixel_goal:pixel_goal/PixelGoal-v0"
ONE_SET = {"train": [{}], "test": [{}]}
STACK = "gymnasium.wrappers.FrameStackObservation"
FILTER = {"wrapper": "gymnasium.wrappers.FilterObservation", "filter_keys": ["image"]}


def test_specs_are_checked_and_kept_as_plain_values():
    assert check_wrappers(None) == []
    assert check_wrappers(["gymnasium.wrappers.FlattenObservation", FILTER]) == [
        "gymnasium.wrappers.FlattenObservation",
        FILTER,
    ]


@pytest.mark.parametrize(
    ("specs", "error", "match"),
    [
        ("gymnasium.wrappers.FlattenObservation", TypeError, "must be a list"),
        ([42], TypeError, r"an import path or a mapping with a 'wrapper' key"),
        (["nopkg.Wrapper"], ValueError, r"'nopkg.Wrapper' cannot be imported.*Install"),
        (["gymnasium.wrappers.NoSuchWrapper"], ValueError, r"'gymnasium.wrappers.NoSuchWrapper' is not a callable"),
        (
            [{"wrapper": "gymnasium.wrappers.FrameStackObservation", "stack": 4}],
            ValueError,
            r"does not take.*\['stack'\]",
        ),
    ],
)
def test_bad_specs_are_refused_naming_the_wrapper(specs, error, match):
    with pytest.raises(error, match=match):
        check_wrappers(specs)


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_an_env_group_applies_the_wrappers_in_every_process(vectorization):
    """Test that the group's envs (async workers too) see the wrapped observations."""
    group = EnvGroup(PIXEL_GOAL, 2, obj_sets=ONE_SET, vectorization=vectorization, wrappers=[FILTER])
    try:
        assert set(group.observation_space.spaces) == {"image"}
        assert set(group.reset(seed=0).keys()) == {"image"}
    finally:
        group.close()
    stacked = make_env(PIXEL_GOAL, "train", ONE_SET, wrappers=[FILTER, "gymnasium.wrappers.FlattenObservation"])
    assert stacked.observation_space.shape == (25,)


def test_success_from_reward_reports_success_at_the_end_of_episodes_only():
    env = apply_wrappers(gym.make("FrozenLake-v1", is_slippery=False), ["rl_lightning.envs.wrappers.SuccessFromReward"])
    assert isinstance(env, SuccessFromReward)
    env.reset(seed=0)
    infos = [env.step(a)[4] for a in (2, 2, 1, 1, 1)]  # right, right, down, down, down
    assert all("is_success" not in info for info in infos[:-1])
    _, reward, terminated, _, info = env.step(2)  # onto the goal
    assert reward == 1.0 and terminated and info["is_success"] is True
    env.reset(seed=0)
    env.step(1)  # down
    _, reward, terminated, _, info = env.step(2)  # right, into the hole at (1, 1)
    assert terminated and reward == 0.0 and info["is_success"] is False


def test_a_data_module_keeps_its_wrappers_in_its_settings():
    from rl_lightning import RolloutDataModule

    data = RolloutDataModule(env_id=PIXEL_GOAL, obj_sets=ONE_SET, wrappers=[FILTER])
    assert data.hparams.wrappers == [FILTER]
    assert set(data.env_spaces()[0].spaces) == {"image"}


def test_play_rebuilds_a_checkpoints_wrapped_envs(tmp_path, capsys):
    """Test that a checkpoint keeps the run's wrappers: play acts on the same (image-only) observations, and export
    names them in the file's contract (its observations are the wrapped env's)."""
    import lightning.pytorch as pl

    from rl_lightning import PPO, RolloutDataModule
    from rl_lightning.launch import export, play
    from tests.helpers import quiet_trainer

    pl.seed_everything(0)
    data = RolloutDataModule(
        env_id=PIXEL_GOAL, obj_sets=ONE_SET, wrappers=[FILTER], num_envs=2, rollout_steps=16, eval_episodes=1
    )
    encoder = {"cnn_channels": [4], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 8}
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(PPO(encoder=encoder, update_epochs=1, num_minibatches=2), data)
    path = str(tmp_path / "wrapped.ckpt")
    trainer.save_checkpoint(path)
    episodes = play.main([path, "--episodes", "2"])
    assert len(episodes) == 2 and all(1 <= e.length <= 20 for e in episodes)
    assert "object set 'train'" in capsys.readouterr().out
    contract = export.main([path, "--format", "torchscript", "--out", str(tmp_path / "policy.pt")])
    assert contract["wrappers"] == [FILTER] and [i["name"] for i in contract["inputs"]] == ["image"]


def test_episode_statistics_report_the_score_recorded_before_reward_shaping():
    """Test that RecordEpisodeStatistics placed before ClipReward makes the group report the env's own score."""
    record = "gymnasium.wrappers.RecordEpisodeStatistics"
    clip = {"wrapper": "gymnasium.wrappers.ClipReward", "min_reward": -0.001, "max_reward": 0.001}
    stats = {}
    for name, wrappers in {"plain": [], "recorded then clipped": [record, clip], "clipped": [clip]}.items():
        group = EnvGroup(PIXEL_GOAL, 2, obj_sets=ONE_SET, wrappers=wrappers)
        group.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(200):
            group.step(rng.integers(0, 4, 2))
        stats[name] = group.pop_stats().returns
        group.close()
    assert len(stats["plain"]) > 5
    np.testing.assert_allclose(stats["recorded then clipped"], stats["plain"], rtol=1e-6)
    assert max(abs(r) for r in stats["clipped"]) < 0.1  # without the record: the clipped rewards


def test_fire_reset_presses_fire_and_refuses_games_without_it():
    from rl_lightning.envs.wrappers import FireReset

    gym.register_envs(__import__("ale_py"))
    env = FireReset(gym.make("ALE/Breakout-v5", frameskip=1))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (210, 160, 3)
    env.close()
    with pytest.raises(ValueError, match=r"action 1 is FIRE.*MsPacman.*Leave the wrapper out"):
        FireReset(gym.make("ALE/MsPacman-v5"))
    with pytest.raises(ValueError, match="no action meanings"):
        FireReset(gym.make("CartPole-v1"))


@pytest.mark.parametrize("algo", ["SAC", "DQN"])
def test_off_policy_algorithms_refuse_tuple_observations_naming_the_way_out(algo):
    import rl_lightning

    action = gym.spaces.Box(-1, 1, (2,)) if algo == "SAC" else gym.spaces.Discrete(2)
    obs = gym.spaces.Tuple([gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)])
    with pytest.raises(TypeError, match=r"needs a Box \(vectors, images\) or Dict.*FlattenObservation"):
        getattr(rl_lightning, algo)().build_policy(obs, action)


def test_cartpole_without_velocities_keeps_position_and_angle():
    """Test that indices [0, 2] give CartPole's position and angle, with their bounds, step after step."""
    full, masked = gym.make("CartPole-v1"), KeepEntries(gym.make("CartPole-v1"), [0, 2])
    obs_full, _ = full.reset(seed=3)
    obs, _ = masked.reset(seed=3)
    assert masked.observation_space.shape == (2,)
    np.testing.assert_array_equal(masked.observation_space.high, full.observation_space.high[[0, 2]])
    np.testing.assert_array_equal(obs, obs_full[[0, 2]])
    for _ in range(5):
        obs_full, *_ = full.step(1)
        obs, *_ = masked.step(1)
        np.testing.assert_array_equal(obs, obs_full[[0, 2]])


@pytest.mark.parametrize("indices", [[4], [], [-1]])
def test_out_of_range_indices_are_refused_with_the_valid_range(indices):
    """Test that an index outside 0..3 (or none) names the valid range."""
    with pytest.raises(ValueError, match=r"0\.\.3"):
        KeepEntries(gym.make("CartPole-v1"), indices)
