"""Observation helpers: one code path for arrays and dicts of arrays, dtypes that respect memory."""

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning.envs import obs as O

SPACE = gym.spaces.Dict(
    {"image": gym.spaces.Box(0, 255, (4, 4, 3), np.uint8), "state": gym.spaces.Box(-1, 1, (2,), np.float64)}
)


def test_storage_keeps_uint8_images_and_stores_floats_as_float32():
    buf = O.empty_obs(SPACE, (3, 2))
    assert buf["image"].dtype == np.uint8 and buf["image"].shape == (3, 2, 4, 4, 3)
    assert buf["state"].dtype == np.float32
    assert buf["image"].nbytes == 3 * 2 * 4 * 4 * 3  # one byte per pixel, not four
    assert O.empty_obs(gym.spaces.Box(-1, 1, (5,)), (2,)).dtype == np.float32


def test_write_and_select_follow_the_dict():
    SPACE.seed(0)
    batch = {k: np.stack([SPACE.sample()[k] for _ in range(3)]) for k in SPACE.spaces}
    buf = O.empty_obs(SPACE, (2, 3))
    O.write_obs(buf, 1, batch)
    np.testing.assert_array_equal(buf["image"][1], batch["image"])
    mask = np.array([True, False, True])
    zeros = O.map_obs(np.zeros_like, batch)
    picked = O.select_envs(mask, zeros, batch)
    assert not picked["image"][0].any() and (picked["image"][1] == batch["image"][1]).all()


def test_tensors_keep_integer_dtypes_and_batch_as_a_tensordict():
    batch = {"image": np.full((2, 4, 4, 3), 7, np.uint8), "state": np.ones((2, 2), np.float64)}
    plain = O.to_tensor(batch)
    assert isinstance(plain, dict) and plain["image"].dtype == torch.uint8 and plain["state"].dtype == torch.float32
    td = O.to_tensor(batch, batch_dims=1)
    assert isinstance(td, TensorDict) and td.batch_size == torch.Size([2])
    assert O.to_tensor(np.ones((2, 3), np.float64)).dtype == torch.float32
    assert O.leaves(td)[0].dtype == torch.uint8 and len(O.leaves(td)) == 2


def test_clip_floats_leaves_images_alone():
    clipped = O.clip_floats({"image": np.array([200], np.uint8), "state": np.array([5.0, -5.0])}, 1.0)
    assert clipped["image"][0] == 200 and clipped["state"].tolist() == [1.0, -1.0]
