"""Tests for EnvGroup: vector stepping, final observations and episode statistics."""

import multiprocessing
import sys
import time

import numpy as np
import pytest

from rl_lightning.envs import EnvGroup
from rl_lightning.faults import NumericalFault
from tests.conftest import SCRIPTED_ID, SCRIPTED_SETS


def test_episode_statistics_on_scripted_env():
    """Test that returns, lengths and success of completed episodes are exact."""
    group = EnvGroup(SCRIPTED_ID, 2, obj_sets=SCRIPTED_SETS)
    group.reset()
    for _ in range(10):
        group.step(np.zeros(2, dtype=np.int64))
    stats = group.pop_stats()
    # Episodes of 5 steps with rewards 1..5: return 15; two per env in 10 steps.
    assert stats.returns == [15.0] * 4
    assert stats.lengths == [5] * 4
    assert stats.successes == [0.0] * 4  # length 5 is odd: reported, not successful
    assert sorted(stats.envs) == [0, 0, 1, 1]
    assert len(group.pop_stats()) == 0


def test_truncation_keeps_final_observation():
    """Test that a truncated episode reports truncated and its true final observation."""
    group = EnvGroup(SCRIPTED_ID, 1, obj_sets=SCRIPTED_SETS, max_episode_steps=3)
    group.reset()
    for _ in range(2):
        step = group.step(np.zeros(1, dtype=np.int64))
        assert not step.truncated[0] and not step.final_obs
    step = group.step(np.zeros(1, dtype=np.int64))
    assert step.truncated[0] and not step.terminated[0]
    assert step.final_obs[0][0] == 3.0  # the state the time limit cut off
    assert step.obs[0][0] == 0.0  # same-step autoreset: the next episode's first state
    assert group.pop_stats().lengths == [3]


def test_test_set_is_applied_to_envs():
    """Test that a group on the test set runs the test variation (4-step, successful episodes)."""
    group = EnvGroup(SCRIPTED_ID, 1, obj_set="test", obj_sets=SCRIPTED_SETS)
    group.reset()
    for _ in range(4):
        group.step(np.zeros(1, dtype=np.int64))
    stats = group.pop_stats()
    assert stats.lengths == [4] and stats.successes == [1.0]


def test_async_vectorization_matches_sync():
    """Test that async vectorization gives the same observations as sync."""
    results = []
    for mode in ("sync", "async"):
        group = EnvGroup("CartPole-v1", 2, vectorization=mode, seed=3)
        obs = [group.reset()]
        for _ in range(5):
            obs.append(group.step(np.array([0, 1])).obs)
        group.close()
        results.append(np.stack(obs))
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_async_workers_are_forked_not_spawned_after_torchrl_import():
    """Test that async workers start forked (fast) although importing torchrl made "spawn" the default."""
    import torchrl  # noqa: F401  (sets the process-wide start method to spawn)

    assert multiprocessing.get_start_method() == "spawn"
    start = time.perf_counter()
    group = EnvGroup("CartPole-v1", 2, vectorization="async")
    group.reset(seed=0)
    seconds = time.perf_counter() - start
    kinds = {type(process).__name__ for process in group.envs.processes}
    group.close()
    assert kinds == {"ForkProcess"}
    # Spawned workers re-import torch, Lightning and torchrl: tens of seconds here.
    assert seconds < 5.0, seconds


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"env_id": "CartPol-v1"}, "Unknown environment id 'CartPol-v1'.*CartPole-v1"),
        ({"env_id": "CartPole-v1", "num_envs": 0}, "num_envs must be a positive integer"),
        ({"env_id": "CartPole-v1", "obj_set": "valid"}, "Unknown object set 'valid'"),
        ({"env_id": "CartPole-v1", "vectorization": "threads"}, "vectorization must be one of"),
    ],
)
def test_bad_input_rejected(kwargs, match):
    """Test that bad EnvGroup arguments raise before any env is built."""
    with pytest.raises(ValueError, match=match):
        EnvGroup(**kwargs)


PIXEL_GOAL = "tests.envs.pixel_goal:pixel_goal/PixelGoal-v0"
PIXEL_SETS = {"train": [{}], "test": [{}]}


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_dict_observations_come_as_a_dict_of_batched_arrays(vectorization):
    """Test that a Dict env gives one batched array per key, uint8 images as uint8, and dict final observations."""
    group = EnvGroup(PIXEL_GOAL, 3, obj_sets=PIXEL_SETS, vectorization=vectorization, max_episode_steps=2)
    try:
        obs = group.reset(seed=0)
        assert obs["image"].shape == (3, 5, 5, 1) and obs["image"].dtype == np.uint8
        assert obs["position"].shape == (3, 2)
        group.step(np.zeros(3, dtype=np.int64))
        step = group.step(np.zeros(3, dtype=np.int64))
        ended = np.flatnonzero(step.terminated | step.truncated)
        assert len(ended) == 3  # the time limit of 2 steps, if not the goal
        for i in ended:
            assert set(step.final_obs[i]) == {"image", "position"} and step.final_obs[i]["image"].shape == (5, 5, 1)
    finally:
        group.close()


def test_only_float_keys_are_checked_and_a_nan_names_its_key():
    """Test that the NaN check skips the uint8 image and names the float key that held the NaN."""
    group = EnvGroup(PIXEL_GOAL, 2, obj_sets={"train": [{"make_kwargs": {"nan_at": 2}}], "test": [{}]})
    assert group.checks._paths == [("position",)]  # the image costs nothing
    group.reset(seed=0)
    group.step(np.zeros(2, dtype=np.int64))
    with pytest.raises(NumericalFault, match=r"observation\['position'\] value nan at index \(1,\)"):
        for _ in range(3):
            group.step(np.zeros(2, dtype=np.int64))
    group.close()


def test_obs_bound_clips_the_float_keys_only():
    """Test that obs_bound in clip mode clips the float key and leaves the 0..255 image as it is."""
    sets = {"train": [{"make_kwargs": {"position_scale": 10.0}}], "test": [{}]}
    group = EnvGroup(PIXEL_GOAL, 4, obj_sets=sets, obs_bound=2.0, obs_bound_mode="clip")
    obs = group.reset(seed=0)
    assert obs["position"].max() <= 2.0 and obs["image"].max() == 255
    group.close()
