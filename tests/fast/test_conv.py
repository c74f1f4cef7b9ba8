"""``channels_last`` lays out only large CPU batches of gradient steps; the encoder keeps the plain path's results."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning import fast
from rl_lightning.fast.conv import MIN_BATCH, channels_last
from rl_lightning.nets.encoders import MultiInputEncoder


def test_lays_out_a_gradient_steps_batch_channels_last():
    images = torch.rand(MIN_BATCH, 4, 12, 12)
    out = channels_last(images)
    assert out is not None and out.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(out, images)


@pytest.mark.parametrize(
    "why, images",
    [
        ("small batch", torch.rand(MIN_BATCH - 1, 4, 12, 12)),
        ("not 4-D", torch.rand(MIN_BATCH, 4, 12)),
        ("already channels-last", torch.rand(MIN_BATCH, 12, 12, 4).permute(0, 3, 1, 2)),
    ],
)
def test_leaves_the_plain_layout(why, images):
    assert channels_last(images) is None, why


def test_leaves_the_plain_layout_without_gradients_or_switched_off():
    images = torch.rand(MIN_BATCH, 4, 12, 12)
    with torch.no_grad():
        assert channels_last(images) is None
    with fast.disabled():
        assert channels_last(images) is None


def test_leaves_the_plain_layout_while_tracing():
    traced = torch.jit.trace(
        lambda x: torch.zeros(()) if channels_last(x) is None else torch.ones(()), torch.rand(MIN_BATCH, 4, 12, 12)
    )
    assert float(traced(torch.rand(MIN_BATCH, 4, 12, 12))) == 0.0


def _features_and_grads(encoder: MultiInputEncoder, obs) -> tuple[torch.Tensor, list[torch.Tensor]]:
    encoder.zero_grad(set_to_none=True)
    features = encoder(obs)
    (features * torch.linspace(-1, 1, features.shape[-1])).sum().backward()
    return features.detach(), [p.grad.clone() for p in encoder.parameters()]


@pytest.mark.parametrize("dict_obs", [False, True])
def test_encoder_matches_the_plain_path(dict_obs):
    image = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
    space = gym.spaces.Dict({"rgb": image, "state": gym.spaces.Box(-1, 1, (3,))}) if dict_obs else image
    torch.manual_seed(0)
    encoder = MultiInputEncoder(space)
    pixels = torch.randint(0, 256, (2 * MIN_BATCH, *image.shape), dtype=torch.uint8)
    obs = {"rgb": pixels, "state": torch.rand(2 * MIN_BATCH, 3)} if dict_obs else pixels
    layouts = []
    hook = encoder.cnns[0].register_forward_pre_hook(
        lambda _, args: layouts.append(args[0].is_contiguous(memory_format=torch.channels_last))
    )
    fast_features, fast_grads = _features_and_grads(encoder, obs)
    with fast.disabled():
        plain_features, plain_grads = _features_and_grads(encoder, obs)
    hook.remove()
    assert layouts == [True, False]  # the shortcut ran, then the plain path
    torch.testing.assert_close(fast_features, plain_features, rtol=1e-5, atol=1e-5)
    for fast_grad, plain_grad in zip(fast_grads, plain_grads, strict=True):
        assert fast_grad.is_contiguous()  # the optimizer's state keeps the parameters' layout
        torch.testing.assert_close(fast_grad, plain_grad, rtol=1e-4, atol=1e-5)
