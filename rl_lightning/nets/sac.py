"""Networks of SAC: a tanh-squashed Gaussian actor and twin Q-networks (plain ``nn.Module`` s).

The actor maps observations to the location and scale of a ``TanhNormal`` (torchrl's
distribution, squashed into the action bounds); the critics map ``(observation, action)``
to a Q-value. ``SquashedGaussianActor.explore`` and ``act`` are what the replay stream and
the evaluation call, one plain forward pass per env step. The critics live in the loss
(torchrl's ``SACLoss`` stacks their parameters for a vectorized forward).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from tensordict.nn import NormalParamExtractor
from torch import nn

from rl_lightning.nets.mlp import mlp, weight_dtype

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.modules import TanhNormal


def check_continuous_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise a clear error for spaces SAC cannot handle."""
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        raise TypeError(f"SAC needs a 1-D Box observation space, got {observation_space}.")
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise TypeError(f"SAC acts in a 1-D Box action space, got {action_space}. For discrete actions use PPO.")
    if not (np.isfinite(action_space.low).all() and np.isfinite(action_space.high).all()):
        raise ValueError(f"SAC squashes actions into the bounds, which must be finite; got {action_space}.")


class QNetwork(nn.Module):
    """``Q(s, a)``: an MLP over the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int]):
        super().__init__()
        self.net = mlp(obs_dim + act_dim, hidden_sizes, 1, activation=nn.ReLU)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, 1]`` for observations ``[B, obs_dim]`` and actions ``[B, act_dim]``."""
        return self.net(torch.cat([obs, action], dim=-1))


class SquashedGaussianActor(nn.Module):
    """SAC's policy: a Gaussian squashed by tanh into the action bounds.

    Args:
        observation_space: A 1-D ``Box``.
        action_space: A 1-D ``Box`` with finite bounds (actions are squashed into them).
        hidden_sizes: Hidden widths (ReLU, as in the SAC paper).
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, hidden_sizes: Sequence[int] = (256, 256)):
        super().__init__()
        check_continuous_spaces(observation_space, action_space)
        obs_dim, act_dim = observation_space.shape[0], action_space.shape[0]
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.net = nn.Sequential(mlp(obs_dim, hidden_sizes, 2 * act_dim, activation=nn.ReLU), NormalParamExtractor())
        self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def _loc_scale(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # In the weights' dtype (bf16 in a reduced-precision acting copy), out in float32.
        loc, scale = self.net(obs.to(weight_dtype(self)))
        return loc.float(), scale.float()

    def distribution(self, obs: torch.Tensor) -> TanhNormal:
        """The policy's action distribution for observations ``[B, obs_dim]``."""
        loc, scale = self._loc_scale(obs)
        return TanhNormal(loc, scale, low=self.low, high=self.high)

    def explore(self, obs: torch.Tensor, env_steps: int = 0) -> torch.Tensor:
        """Sampled actions ``[B, act_dim]`` within the bounds (exploration while collecting; no schedule)."""
        return self.distribution(obs).sample()

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> tuple[torch.Tensor, None, None]:
        """Actions for evaluation and deployment: the squashed mean, or a sample.

        Returns ``(action, None, None)``: the evaluation protocol's log-prob and value slots
        are not used by off-policy evaluation.
        """
        if not deterministic:
            return self.explore(obs), None, None
        loc, _ = self._loc_scale(obs)
        return self.low + (torch.tanh(loc) + 1) * (self.high - self.low) / 2, None, None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic actions for observations ``[B, obs_dim]``."""
        return self.act(obs)[0]
