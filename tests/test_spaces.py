"""Spaces in checkpoints: every stored kind round-trips, images stay small, the rest is refused with the fix."""

import json

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.spaces import space_from_dict, space_to_dict

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
