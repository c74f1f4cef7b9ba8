"""Spaces in checkpoints: every stored kind round-trips, images stay small, the rest is refused with the fix."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.envs.obs import map_obs
from rl_lightning.spaces import env_action, single_to_batch, space_from_dict, space_to_dict

DICT_SPACE = gym.spaces.Dict(
    {"image": gym.spaces.Box(0, 255, (4, 4, 3), np.uint8), "state": gym.spaces.Box(-1, 1, (2,), np.float64)}
)

SPACES = {
    "cartpole": gym.spaces.Box(
        np.array([-4.8, -np.inf, -0.42, -np.inf], np.float32), np.array([4.8, np.inf, 0.42, np.inf], np.float32)
    ),
    "atari frames": gym.spaces.Box(0, 255, (4, 84, 84), np.uint8),
    "rgb": gym.spaces.Box(0.0, 1.0, (64, 64, 3), np.float32),
    "discrete": gym.spaces.Discrete(5, start=-2),
    "multi-discrete": gym.spaces.MultiDiscrete([3, 4, 2], start=[0, 1, 0]),
    "multi-binary": gym.spaces.MultiBinary(6),
    "minigrid-like dict": gym.spaces.Dict(
        {"image": gym.spaces.Box(0, 255, (7, 7, 3), np.uint8), "direction": gym.spaces.Discrete(4)}
    ),
    "nested dict": gym.spaces.Dict(
        {
            "camera": gym.spaces.Box(0, 255, (3, 32, 32), np.uint8),
            "robot": gym.spaces.Dict({"q": gym.spaces.Box(-1, 1, (7,))}),
        }
    ),
}


@pytest.mark.parametrize("name", SPACES)
def test_round_trip_through_a_weights_only_checkpoint(name, tmp_path):
    space = SPACES[name]
    torch.save({"space": space_to_dict(space)}, tmp_path / "s.pt")
    loaded = torch.load(tmp_path / "s.pt", weights_only=True)["space"]
    rebuilt = space_from_dict(loaded)
    assert rebuilt == space
    assert type(rebuilt) is type(space)


def test_an_image_box_is_stored_by_its_shape_and_two_bounds():
    spec = space_to_dict(SPACES["atari frames"])
    assert spec["low"] == 0 and spec["high"] == 255 and spec["shape"] == [4, 84, 84]
    assert len(json.dumps(spec)) < 200  # not 28,224 bounds per side


def test_an_earlier_versions_box_without_shape_still_loads():
    old = {"type": "Box", "low": [0.0, -1.0], "high": [1.0, 1.0], "dtype": "float32"}
    assert space_from_dict(old) == gym.spaces.Box(np.array([0, -1], np.float32), np.array([1, 1], np.float32))


@pytest.mark.parametrize(
    "space", [gym.spaces.Tuple([gym.spaces.Discrete(2)]), gym.spaces.Text(5)], ids=["tuple", "text"]
)
def test_other_spaces_are_refused_naming_the_space_and_a_wrapper(space):
    with pytest.raises(TypeError, match=r"(?s)got (Tuple|Text).*gymnasium\.wrappers"):
        space_to_dict(space)


def test_env_action_clips_box_actions_and_shifts_indices_by_start():
    """Test the one mapping from a policy's actions to the env's (predict and the single-env evaluation): a Box's
    clipped to its bounds, Discrete and MultiDiscrete indices shifted by start, other spaces' unchanged."""
    box = gym.spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 2.0]))
    np.testing.assert_array_equal(env_action(box, np.array([[-3.0, 5.0], [0.5, 1.0]])), [[-1.0, 2.0], [0.5, 1.0]])
    np.testing.assert_array_equal(env_action(gym.spaces.Discrete(3, start=-1), np.array([0, 2])), [-1, 1])
    np.testing.assert_array_equal(env_action(gym.spaces.Discrete(3), np.array([0, 2])), [0, 2])
    multi = gym.spaces.MultiDiscrete([2, 3], start=[1, 5])
    np.testing.assert_array_equal(env_action(multi, np.array([[0, 2]])), [[1, 7]])
    np.testing.assert_array_equal(env_action(gym.spaces.MultiBinary(2), np.array([[1, 0]])), [[1, 0]])


def test_single_observations_become_batches_and_wrong_ones_are_refused():
    DICT_SPACE.seed(1)
    single = DICT_SPACE.sample()
    batch, was_single = single_to_batch(single, DICT_SPACE)
    assert was_single and batch["image"].shape == (1, 4, 4, 3)
    _, was_single = single_to_batch(map_obs(lambda x: x[None], single), DICT_SPACE)
    assert not was_single
    with pytest.raises(TypeError, match=r"Dict observations with keys \['image', 'state'\]; pass a dict"):
        single_to_batch(np.zeros(3), DICT_SPACE)
    with pytest.raises(ValueError, match=r"lacks the key\(s\) \['state'\]"):
        single_to_batch({"image": single["image"]}, DICT_SPACE)
    with pytest.raises(ValueError, match=r"reads 'image' observations of shape \(4, 4, 3\) .* got \(2, 3, 4, 4\)"):
        single_to_batch({"image": np.zeros((2, 3, 4, 4)), "state": np.zeros((2, 2))}, DICT_SPACE)


def test_box_observations_of_another_shape_are_refused_naming_both_shapes():
    """Test that a transposed single observation or a batch of the wrong shape is refused, not reshaped and acted on."""
    box = gym.spaces.Box(-1, 1, (3, 4), np.float32)
    assert single_to_batch(np.zeros((5, 3, 4)), box)[0].shape == (5, 3, 4)
    for bad, got in ((np.zeros((4, 3)), r"\(4, 3\)"), (np.zeros((5, 4, 3)), r"\(5, 4, 3\)"), (np.zeros(3), r"\(3,\)")):
        with pytest.raises(ValueError, match=r"reads observations of shape \(3, 4\) \(one\) or .* got " + got):
            single_to_batch(bad, box)
