"""Networks of SAC: a tanh-squashed Gaussian actor and twin Q-networks (plain ``nn.Module`` s).

The actor maps observations to the location and scale of a ``TanhNormal`` (torchrl's distribution, squashed into the
action bounds); the critics map ``(observation, action)`` to a Q-value. ``SquashedGaussianActor.explore`` and ``act``
are what the replay stream and the evaluation call, one plain forward pass per env step; ``rsample`` is what the loss
calls. ``QEnsemble`` holds the twin critics with their weights stacked, so both are evaluated by one batched matrix
product per layer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from tensordict.nn import NormalParamExtractor
from torch import nn
from torch.nn import functional as F

from rl_lightning.envs.obs import Obs
from rl_lightning.nets.encoders import EncoderSettings, build_encoder
from rl_lightning.nets.mlp import mlp, weight_dtype


def check_continuous_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise a clear error for spaces SAC cannot handle."""
    if not isinstance(observation_space, (gym.spaces.Box, gym.spaces.Dict)):
        raise TypeError(
            f"SAC needs a Box (vectors, images) or Dict observation space, got {observation_space}. Turn it into one "
            "with a gymnasium.ObservationWrapper (or env.wrappers=[gymnasium.wrappers.FlattenObservation])."
        )
    if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
        raise TypeError(f"SAC acts in a 1-D Box action space, got {action_space}. For discrete actions use DQN or PPO.")
    low, high = action_space.low, action_space.high
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
        raise ValueError(
            f"SAC squashes actions into the bounds, which must be finite with high > low in every dimension; got "
            f"{action_space}. Fix the env's action space (a fixed dimension: drop it with a gymnasium.ActionWrapper)."
        )


#: ``log(sqrt(2 pi))``, the Gaussian log-density's constant.
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _squash(u: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    # tanh clamped to 1 - 1e-6 in float32, as torchrl's safe tanh, then affine into the bounds.
    lim = 1.0 - torch.finfo(u.dtype).resolution
    return (high + low) / 2 + (high - low) / 2 * torch.tanh(u).clamp(-lim, lim)


def squashed_gaussian_sample(
    loc: torch.Tensor, scale: torch.Tensor, noise: torch.Tensor, low: torch.Tensor, high: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """A reparameterized sample of a tanh-squashed Gaussian in ``[low, high]`` and its log-probability.

    Written on tensors, it computes what torchrl's ``TanhNormal(loc, scale, low=low, high=high).rsample_and_log_prob()``
    does for the same noise draw (``u = loc + scale * noise``, squashed; the Gaussian log-density of ``u`` minus the
    tanh and affine log-Jacobians; ``tests/algos/test_sac_loss.py`` checks values and gradients) without building
    distribution and transform objects on every call (measured by ``python -m benchmarks.sac_loss``;
    ``docs/algos/sac.md``).

    Args:
        loc: Gaussian location ``[B, act_dim]``.
        scale: Gaussian scale ``[B, act_dim]`` (positive).
        noise: Standard normal draws ``[B, act_dim]``.
        low: Lower action bounds ``[act_dim]``.
        high: Upper action bounds ``[act_dim]``.

    Returns:
        The action ``[B, act_dim]`` and its log-probability ``[B]``.
    """
    u = loc + scale * noise
    # log N(u; loc, scale), with (u - loc) / scale = noise; log(1 - tanh(u)^2) in the stable
    # form 2 (log 2 - u - softplus(-2u)) of torch's TanhTransform; log of the affine scale.
    log_prob = (
        -0.5 * noise.square() - scale.log() - _LOG_SQRT_2PI - 2.0 * (math.log(2.0) - u - F.softplus(-2.0 * u))
    ).sum(-1) - ((high - low) / 2).log().sum()
    return _squash(u, low, high), log_prob


class QNetwork(nn.Module):
    """``Q(s, a)``: an MLP over the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int]):
        super().__init__()
        self.net = mlp(obs_dim + act_dim, hidden_sizes, 1, activation=nn.ReLU)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, 1]`` for observations ``[B, obs_dim]`` and actions ``[B, act_dim]``."""
        return self.net(torch.cat([obs, action], dim=-1))


class StackedLinear(nn.Module):
    """``num_nets`` linear layers of equal shape, weights ``[num_nets, out, in]``, biases ``[num_nets, out]``."""

    def __init__(self, layers: Sequence[nn.Linear]):
        super().__init__()
        self.weight = nn.Parameter(torch.stack([layer.weight.detach() for layer in layers]))
        self.bias = nn.Parameter(torch.stack([layer.bias.detach() for layer in layers]))

    def forward(self, x: torch.Tensor, detach_params: bool = False) -> torch.Tensor:
        """``x @ W_i^T + b_i`` for inputs ``[num_nets, B, in]``: outputs ``[num_nets, B, out]``."""
        weight, bias = (self.weight.detach(), self.bias.detach()) if detach_params else (self.weight, self.bias)
        return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


class QEnsemble(nn.Module):
    """``num_nets`` Q-networks of equal shape, weights stacked: ``Q_i(s, a)`` for all ``i`` at once.

    Each layer is one batched matrix product over the stacked weights (``nn.Linear``'s layout, as torchrl's ``SACLoss``
    stacks its critics), so the twin critics cost one call per layer instead of a call per network, and no ``vmap``
    (``python -m benchmarks.sac_loss`` compares the three; ``docs/algos/sac.md``). Initialized from ``num_nets``
    independently initialized :class:`QNetwork` s.

    Images and ``Dict`` observations go through the critics' own ``encoder`` first (one, shared by the twin critics,
    separate from the actor's: SB3's SAC with ``share_features_extractor=False``); the critics' loss trains it.

    Args:
        obs_dim: Observation width (the encoder's ``features_dim`` where there is one).
        act_dim: Action width.
        hidden_sizes: Hidden widths (ReLU between layers).
        num_nets: Number of critics.
        encoder: Maps raw observations to features ``[B, obs_dim]``; ``None``: vectors go in as they are.
    """

    def __init__(
        self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int], num_nets: int = 2,
        encoder: nn.Module | None = None,
    ):  # fmt: skip
        super().__init__()
        nets = [QNetwork(obs_dim, act_dim, hidden_sizes) for _ in range(num_nets)]
        linears = [[m for m in net.net if isinstance(m, nn.Linear)] for net in nets]
        self.layers = nn.ModuleList(StackedLinear([net[i] for net in linears]) for i in range(len(linears[0])))
        self.num_nets = num_nets
        self.encoder = encoder

    def forward(
        self, obs: Obs, action: torch.Tensor, detach_params: bool = False, encoded: bool = False
    ) -> torch.Tensor:
        """Q-values ``[num_nets, B]`` for observations ``[B, obs_dim]`` and actions ``[B, act_dim]``.

        Args:
            obs: Observations ``[B, obs_dim]`` (raw images or a mapping where there is an encoder).
            action: Actions ``[B, act_dim]``.
            detach_params: Use detached weights, so gradients reach the inputs only (SAC's
                actor loss, where the critics are held fixed).
            encoded: ``obs`` are the encoder's features already.
        """
        if self.encoder is not None and not encoded:
            obs = self.encoder(obs)
        x = torch.cat([obs, action], dim=-1).expand(self.num_nets, -1, -1)  # [num_nets, B, obs_dim + act_dim], one copy
        *hidden, last = self.layers
        for layer in hidden:
            x = torch.relu(layer(x, detach_params))
        return last(x, detach_params).squeeze(-1)

    def min_q(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        """``min_i Q_i(s, a)`` ``[B]`` with the critics held fixed: gradients reach the inputs only.

        SAC's actor loss differentiates through the action, never into the critics.
        """
        if self.encoder is not None:
            with torch.no_grad():  # the critics, their encoder included, are held fixed
                obs = self.encoder(obs)
        return self(obs, action, detach_params=True, encoded=True).min(0).values


class SquashedGaussianActor(nn.Module):
    """SAC's policy: a Gaussian squashed by tanh into the action bounds.

    Args:
        observation_space: A ``Box`` (vectors are flattened; images go through the encoder) or a ``Dict``.
        action_space: A 1-D ``Box`` with finite bounds (actions are squashed into them).
        hidden_sizes: Hidden widths (ReLU, as in the SAC paper).
        encoder: For image and ``Dict`` observations: settings of the default
            :class:`~rl_lightning.nets.encoders.MultiInputEncoder` (``None``: chosen from the
            space) or one's own module (:func:`~rl_lightning.nets.encoders.build_encoder`). The
            actor's own: the critics have theirs (:class:`QEnsemble`).
    """

    def __init__(
        self, observation_space: gym.Space, action_space: gym.Space, hidden_sizes: Sequence[int] = (256, 256),
        encoder: EncoderSettings | dict | nn.Module | None = None,
    ):  # fmt: skip
        super().__init__()
        check_continuous_spaces(observation_space, action_space)
        self.encoder = build_encoder(encoder, observation_space, normalize_obs=False)
        obs_dim = int(np.prod(observation_space.shape)) if self.encoder is None else int(self.encoder.features_dim)
        act_dim = action_space.shape[0]
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.net = nn.Sequential(mlp(obs_dim, hidden_sizes, 2 * act_dim, activation=nn.ReLU), NormalParamExtractor())
        self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def _loc_scale(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        # In the weights' dtype (bf16 in a reduced-precision acting copy), out in float32.
        flat = self.encoder is None
        x = obs.reshape(obs.shape[0], self.obs_dim).to(weight_dtype(self)) if flat else self.encoder(obs)
        loc, scale = self.net(x)
        return loc.float(), scale.float()

    def rsample(self, obs: Obs) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterized actions ``[B, act_dim]`` and their log-probabilities ``[B]`` (the loss's draws).

        The noise is one ``normal_`` draw of ``[B, act_dim]``, the draw torchrl's
        ``TanhNormal.rsample`` makes, so both consume the random stream alike.
        """
        loc, scale = self._loc_scale(obs)
        return squashed_gaussian_sample(loc, scale, torch.empty_like(loc).normal_(), self.low, self.high)

    def explore(self, obs: Obs, env_steps: int = 0) -> torch.Tensor:
        """Sampled actions ``[B, act_dim]`` within the bounds (exploration while collecting; no schedule)."""
        # The squashed sample on tensors, the same draw as TanhNormal(loc, scale).sample()
        # (torch.normal(loc, scale), then tanh into the bounds): building torchrl's TanhNormal
        # costs more than the actor's forward pass (docs/algos/sac.md).
        loc, scale = self._loc_scale(obs)
        return _squash(torch.normal(loc, scale), self.low, self.high)

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> None:
        """No memory: ``None`` (the evaluation protocol's state, :mod:`rl_lightning.data.protocol`)."""
        return None

    def act(
        self, obs: Obs, state: None = None, episode_start: torch.Tensor | None = None, deterministic: bool = True,
        value: bool = False,
    ) -> tuple[torch.Tensor, None, None, None]:  # fmt: skip
        """Actions for evaluation and deployment: the squashed mean, or a sample.

        Returns ``(action, None, None, None)``: off-policy evaluation uses no log-probability,
        value (``value`` is the protocol's and ignored) or state.
        """
        action = _squash(self._loc_scale(obs)[0], self.low, self.high) if deterministic else self.explore(obs)
        return action, None, None, None

    def forward(self, obs: Obs) -> torch.Tensor:
        """Deterministic actions for observations ``[B, obs_dim]``."""
        return self.act(obs)[0]
