"""The multi-input encoder: keys routed to the CNN or the vector part, bad spaces refused before any step."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from rl_lightning.nets.encoders import EncoderSettings, MultiInputEncoder, NatureCNN, needs_encoder, route_keys

IMAGE = gym.spaces.Box(0, 255, (7, 7, 3), np.uint8)
MINIGRID = gym.spaces.Dict({"image": IMAGE, "direction": gym.spaces.Discrete(4)})
ROBOT = gym.spaces.Dict(
    {
        "rgb": gym.spaces.Box(0, 255, (3, 40, 40), np.uint8),
        "state": gym.spaces.Box(-np.inf, np.inf, (5,), np.float32),
        "gripper": gym.spaces.MultiBinary(2),
        "mode": gym.spaces.MultiDiscrete([2, 3], start=[1, 0]),
    }
)
SMALL_CNN = {"cnn_kernels": [2, 2, 2], "cnn_strides": [1, 1, 1], "cnn_channels": [4, 8, 8], "cnn_features": 16}


def sample_batch(space, n=5, seed=0):
    space.seed(seed)
    samples = [space.sample() for _ in range(n)]
    if isinstance(space, gym.spaces.Dict):
        return {key: torch.as_tensor(np.stack([s[key] for s in samples])) for key in space.spaces}
    return torch.as_tensor(np.stack(samples))


def test_the_nature_cnn_has_mnih_et_als_layer_sizes_on_atari_frames():
    enc = MultiInputEncoder(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))
    convs = [m for m in enc.modules() if isinstance(m, nn.Conv2d)]
    assert [(c.in_channels, c.out_channels, c.kernel_size, c.stride) for c in convs] == [
        (4, 32, (8, 8), (4, 4)),
        (32, 64, (4, 4), (2, 2)),
        (64, 64, (3, 3), (1, 1)),
    ]
    linear = next(m for m in enc.modules() if isinstance(m, nn.Linear))
    assert (linear.in_features, linear.out_features) == (64 * 7 * 7, 512)
    assert enc(sample_batch(enc_space := gym.spaces.Box(0, 255, (4, 84, 84), np.uint8))).shape == (5, 512)
    assert needs_encoder(enc_space) and not needs_encoder(gym.spaces.Box(-1, 1, (4,)))


def test_default_routes_follow_the_space():
    images, vectors = route_keys(ROBOT, EncoderSettings())
    assert [(i.key, i.channels_first, i.uint8) for i in images] == [("rgb", True, True)]
    assert [(v.key, v.kind, v.width) for v in vectors] == [
        ("gripper", "binary", 2),
        ("mode", "onehot", 5),
        ("state", "box", 5),
    ]
    enc = MultiInputEncoder(ROBOT)
    assert enc.features_dim == 512 + 5 + 2 + 5
    assert enc(sample_batch(ROBOT)).shape == (5, enc.features_dim)


def test_named_keys_route_exactly_those_and_leave_the_rest_unused():
    enc = MultiInputEncoder(ROBOT, {"cnn_keys": ["rgb"], "mlp_keys": ["state"], **SMALL_CNN})
    assert [i.key for i in enc.images] == ["rgb"] and [v.key for v in enc.vectors] == ["state"]
    obs = sample_batch(ROBOT)
    del obs["gripper"], obs["mode"]  # never read
    assert enc(obs).shape == (5, 16 + 5)


def test_channels_last_images_equal_their_channels_first_transpose():
    torch.manual_seed(0)
    last = MultiInputEncoder(gym.spaces.Box(0, 255, (40, 40, 3), np.uint8))
    first = MultiInputEncoder(gym.spaces.Box(0, 255, (3, 40, 40), np.uint8))
    first.load_state_dict(last.state_dict())
    x = torch.randint(0, 256, (2, 40, 40, 3), dtype=torch.uint8)
    torch.testing.assert_close(last(x), first(x.permute(0, 3, 1, 2)))


def test_uint8_pixels_are_scaled_by_1_over_255_inside_the_network():
    enc = MultiInputEncoder(gym.spaces.Box(0, 255, (3, 40, 40), np.uint8))
    x = torch.randint(0, 256, (2, 3, 40, 40), dtype=torch.uint8)
    torch.testing.assert_close(enc(x), enc.cnns[0](x.float() / 255.0))
    floats = MultiInputEncoder(gym.spaces.Box(0.0, 1.0, (3, 40, 40), np.float32))
    floats.load_state_dict(enc.state_dict())
    torch.testing.assert_close(floats(x.float() / 255.0), enc(x))


def test_images_of_integer_codes_can_skip_the_1_over_255_scaling():
    """Test that normalize_images=False feeds uint8 codes (MiniGrid's 0-10) to the CNN as they are."""
    enc = MultiInputEncoder(gym.spaces.Box(0, 255, (3, 40, 40), np.uint8), {"normalize_images": False})
    x = torch.randint(0, 11, (2, 3, 40, 40), dtype=torch.uint8)
    torch.testing.assert_close(enc(x), enc.cnns[0](x.float()))


def test_discrete_keys_become_one_hots_counted_from_their_start():
    enc = MultiInputEncoder(ROBOT, {"mlp_keys": ["mode"]})
    mode = torch.tensor([[1, 0], [2, 2]])
    expected = torch.tensor([[1.0, 0, 1, 0, 0], [0, 1, 0, 0, 1]])
    torch.testing.assert_close(enc({"mode": mode}), expected)


def test_normalization_applies_to_box_vector_keys_only():
    enc = MultiInputEncoder(ROBOT, {"mlp_keys": ["state", "gripper"]})
    obs = sample_batch(ROBOT, n=64)
    before = enc(obs)
    obs["state"] = obs["state"].clamp(-5, 5) * 3 + 7
    enc.update_normalizer(obs)
    assert enc.normalizer.mean.shape == (5,)
    after = enc(obs)
    assert after[:, :5].mean().abs() < 0.1  # normalized by the merged statistics
    torch.testing.assert_close(after[:, 5:], before[:, 5:])  # the binary key untouched
    assert MultiInputEncoder(ROBOT, normalize_obs=False).normalizer is None


@pytest.mark.parametrize(
    ("space", "settings", "message"),
    [
        (MINIGRID, {}, r"'image' is an image of 7x7 pixels, too small.*cnn_kernels=\[2,2,2\]"),
        (MINIGRID, {"cnn_keys": ["rgb"]}, r"cnn_keys names \['rgb'\].*keys are \['direction', 'image'\]"),
        (MINIGRID, {"cnn_keys": ["direction"]}, r"cnn_keys names 'direction'.*not an image.*mlp_keys"),
        (MINIGRID, {"cnn_keys": ["image"], "mlp_keys": ["image"]}, r"\['image'\] are in both"),
        (
            gym.spaces.Dict({"image": IMAGE, "mission": gym.spaces.Text(10)}),
            {},
            r"'mission' is a Text space.*FilterObservation.*cnn_keys=\[\.\.\.\]",
        ),
        (
            gym.spaces.Dict({"gray": gym.spaces.Box(0, 255, (84, 84), np.uint8)}),
            {},
            r"'gray' is a uint8 array.*grayscale_newaxis",
        ),
        (gym.spaces.Box(0, 255, (4, 84, 84, 3), np.uint8), {}, r"'obs' has rank 4"),
        (
            gym.spaces.Dict({"robot": gym.spaces.Dict({"q": gym.spaces.Box(-1, 1, (3,))})}),
            {},
            r"'robot' is itself a Dict",
        ),
        (gym.spaces.Box(0, 255, (3, 40, 3), np.uint8), {}, r"channel axis cannot be told.*channels_first=true"),
        (gym.spaces.Tuple([IMAGE]), {}, r"Box \(vectors, images\) or a Dict.*ObservationWrapper"),
    ],
    ids=[
        "too-small",
        "missing-key",
        "vector-as-image",
        "two-routes",
        "text",
        "rank-2-uint8",
        "rank-4",
        "nested",
        "ambiguous",
        "tuple",
    ],
)
def test_bad_spaces_and_settings_are_refused_naming_the_key_and_the_fix(space, settings, message):
    with pytest.raises((ValueError, TypeError), match=message):
        MultiInputEncoder(space, settings)


def test_the_settings_that_fix_the_refusals_work():
    enc = MultiInputEncoder(MINIGRID, SMALL_CNN)
    assert enc(sample_batch(MINIGRID)).shape == (5, 16 + 4)
    amb = gym.spaces.Box(0, 255, (8, 40, 8), np.uint8)
    assert MultiInputEncoder(amb, {"channels_first": False, **SMALL_CNN}).images[0].chw == (8, 8, 40)
    assert MultiInputEncoder(amb, {"channels_first": True, **SMALL_CNN}).images[0].chw == (8, 40, 8)
    gray = gym.spaces.Dict({"gray": gym.spaces.Box(0, 255, (84, 84), np.uint8)})
    assert MultiInputEncoder(gray, {"mlp_keys": ["gray"]}).features_dim == 84 * 84


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"cnn_kernels": [8, 4]}, "same, non-zero length"),
        ({"cnn_strides": [4, 0, 1]}, "positive integers"),
        ({"cnn_keys": "rgb"}, "must be a list"),
        ({"cnn_featres": 8}, r"Unknown encoder setting\(s\) \['cnn_featres'\]"),
        ({"normalize_images": "no"}, "normalize_images must be true or false"),
    ],
)
def test_impossible_settings_are_refused(settings, message):
    with pytest.raises((ValueError, TypeError), match=message):
        EncoderSettings.of(settings)


def test_a_nature_cnn_image_input_can_be_built_directly():
    images, _ = route_keys(ROBOT, EncoderSettings())
    cnn = NatureCNN(images[0], EncoderSettings())
    assert cnn(torch.zeros(1, 3, 40, 40)).shape == (1, 512)
