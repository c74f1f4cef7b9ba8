"""The Q-network on image and Dict observations: the encoder under it, copied into the target network."""

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning import DQN
from rl_lightning.nets.dqn import QValueNetwork, check_discrete_spaces
from rl_lightning.nets.encoders import MultiInputEncoder

IMAGE = gym.spaces.Box(0, 255, (4, 36, 36), np.uint8)
DICT = gym.spaces.Dict({"image": IMAGE, "speed": gym.spaces.Box(-1, 1, (3,), np.float32)})
CNN = {"cnn_channels": [8, 8], "cnn_kernels": [4, 3], "cnn_strides": [2, 1], "cnn_features": 32}


def test_image_q_network_is_the_cnn_then_its_head_and_scales_uint8_inside():
    """Test that an image Box goes through the Nature-style CNN with the head on its features (hidden_sizes=[]:
    one linear layer, SB3's CnnPolicy), and that uint8 pixels give the values of their float /255 image."""
    net = QValueNetwork(IMAGE, gym.spaces.Discrete(6), hidden_sizes=[], encoder=CNN)
    assert isinstance(net.encoder, MultiInputEncoder) and net.obs_dim == 32
    assert [type(m).__name__ for m in net.net] == ["Linear"]
    pixels = torch.randint(0, 256, (5, 4, 36, 36), dtype=torch.uint8)
    q = net(pixels)
    assert q.shape == (5, 6)
    unscaled = QValueNetwork(IMAGE, gym.spaces.Discrete(6), [], encoder={**CNN, "normalize_images": False})
    unscaled.load_state_dict(net.state_dict())
    torch.testing.assert_close(unscaled(pixels.float() / 255.0), q)


def test_dict_q_network_reads_every_key():
    """Test that a Dict observation's image and vector keys both change the Q-values."""
    net = QValueNetwork(DICT, gym.spaces.Discrete(3), hidden_sizes=[16], encoder=CNN)
    obs = {"image": torch.randint(0, 256, (2, 4, 36, 36), dtype=torch.uint8), "speed": torch.zeros(2, 3)}
    base = net(obs)
    assert not torch.allclose(net({**obs, "speed": torch.ones(2, 3)}), base)
    assert not torch.allclose(net({**obs, "image": torch.zeros_like(obs["image"])}), base)


def test_target_network_copies_the_encoder_and_follows_it():
    """Test that the target network has its own encoder (a copy, no shared parameters) and that a hard target
    update copies the encoder's weights too."""
    model = DQN(encoder=CNN, hidden_sizes=[], tau=1.0)
    model.policy = model.build_policy(DICT, gym.spaces.Discrete(3))
    online, target = model.policy.encoder, model.target_net.encoder
    assert {id(p) for p in online.parameters()}.isdisjoint(id(p) for p in target.parameters())
    with torch.no_grad():
        for p in online.parameters():
            p.add_(1.0)
    assert not all(torch.equal(a, b) for a, b in zip(online.parameters(), target.parameters(), strict=True))
    model.update_targets()
    assert all(torch.equal(a, b) for a, b in zip(online.parameters(), target.parameters(), strict=True))


def test_own_encoder_by_callable_and_bad_encoder_argument():
    """Test that one's own encoder (a callable given the observation space) sits under the Q-network and is left
    out of the hyperparameters, and that an encoder argument of the wrong type is refused."""
    built = []

    def encoder(space):
        module = MultiInputEncoder(space, CNN, normalize_obs=False)
        built.append(module)
        return module

    model = DQN(encoder=encoder, hidden_sizes=[8])
    policy = model.build_policy(DICT, gym.spaces.Discrete(3))
    assert policy.encoder is built[0] and "encoder" not in model.hparams
    with pytest.raises(TypeError, match="encoder must be a mapping of encoder settings"):
        DQN(encoder=3)
    with pytest.raises(ValueError, match="Unknown encoder setting"):
        DQN(encoder={"cnn_layers": 3})


def test_dqn_refuses_each_other_action_space_naming_the_algorithm_that_takes_it():
    """Test that DQN's refusal of a space names an algorithm that takes that space (SAC takes no MultiDiscrete)."""
    box = gym.spaces.Box(-1, 1, (4,))
    with pytest.raises(TypeError, match=r"MultiDiscrete\(\[3 2\]\).*for MultiDiscrete and MultiBinary ones, PPO"):
        check_discrete_spaces(box, gym.spaces.MultiDiscrete([3, 2]))
    with pytest.raises(TypeError, match=r"Box\(.*For Box actions use SAC \(or PPO\)"):
        check_discrete_spaces(box, gym.spaces.Box(-1, 1, (2,)))
