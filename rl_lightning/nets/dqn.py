"""Network of DQN: a Q-network over discrete actions that acts epsilon-greedily (a plain ``nn.Module``).

``QValueNetwork`` maps observations to one Q-value per action. ``explore`` is what the
replay stream calls (epsilon-greedy, epsilon from a linear schedule over env steps);
``act`` is what evaluation and ``predict`` call (greedy).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_lightning.envs.obs import Obs
from rl_lightning.nets.encoders import EncoderSettings, build_encoder
from rl_lightning.nets.mlp import mlp, weight_dtype


def check_discrete_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise a clear error for spaces DQN cannot handle (the encoder checks image and ``Dict`` keys)."""
    if not isinstance(observation_space, (gym.spaces.Box, gym.spaces.Dict)):
        raise TypeError(
            f"DQN needs a Box (vectors, images) or Dict observation space, got {observation_space}. Turn it into one "
            "with a gymnasium.ObservationWrapper (or env.wrappers=[gymnasium.wrappers.FlattenObservation])."
        )
    if not isinstance(action_space, gym.spaces.Discrete):
        raise TypeError(
            f"DQN picks one of finitely many actions and needs a Discrete action space, got {action_space}. "
            "For Box actions use SAC (or PPO); for MultiDiscrete and MultiBinary ones, PPO."
        )


@dataclasses.dataclass(frozen=True)
class LinearSchedule:
    """A value that moves linearly from ``start`` to ``end`` over ``duration`` env steps, then stays.

    The exploration schedule of DQN (Mnih et al., 2015; SB3's ``exploration_fraction`` and CleanRL's
    ``linear_schedule``), keyed on env steps over all ranks, so a resumed run continues it from the restored counter.
    """

    start: float
    end: float
    duration: float

    def __call__(self, env_steps: int) -> float:
        if self.duration <= 0:
            return self.end
        fraction = min(1.0, env_steps / self.duration)
        return self.start + fraction * (self.end - self.start)


class QValueNetwork(nn.Module):
    """``Q(s, .)``: observations to one value per action, acting epsilon-greedily.

    Vector observations go straight into an MLP (SB3's and CleanRL's ``dqn.py``). Images
    and ``Dict`` observations first go through an encoder (the Nature CNN for images,
    :class:`~rl_lightning.nets.encoders.MultiInputEncoder`), with the MLP on its features,
    as SB3's ``CnnPolicy`` and CleanRL's ``dqn_atari.py`` do (there ``hidden_sizes=[]``:
    one linear layer on the CNN's 512 features).

    Args:
        observation_space: A ``Box`` (vectors are flattened; images go through the encoder) or a ``Dict``.
        action_space: A ``Discrete`` space.
        hidden_sizes: Hidden widths (ReLU, as in SB3's and CleanRL's DQN).
        epsilon: Exploration rate as a function of env steps taken over all ranks.
        encoder: Settings of the default encoder (``None``: chosen from the space), or a module of one's own mapping raw
            observations to ``[B, features_dim]`` (see :func:`~rl_lightning.nets.encoders.build_encoder`).
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: Sequence[int] = (256, 256),
        epsilon: LinearSchedule = LinearSchedule(1.0, 0.05, 0),
        encoder: EncoderSettings | dict | nn.Module | None = None,
    ):
        super().__init__()
        check_discrete_spaces(observation_space, action_space)
        # No running normalization: DQN reads vectors raw (SB3, CleanRL), and scales uint8 images by 1/255.
        self.encoder = build_encoder(encoder, observation_space, normalize_obs=False)
        self.obs_dim = int(np.prod(observation_space.shape)) if self.encoder is None else int(self.encoder.features_dim)
        self.num_actions = int(action_space.n)
        self.net = mlp(self.obs_dim, hidden_sizes, self.num_actions, activation=nn.ReLU)
        self.epsilon = epsilon

    def forward(self, obs: Obs) -> torch.Tensor:
        """Q-values ``[B, num_actions]`` for raw observations (a tensor ``[B, ...]``, or a mapping for a ``Dict``)."""
        if self.encoder is not None:
            return self.net(self.encoder(obs))
        return self.net(obs.reshape(obs.shape[0], self.obs_dim).to(weight_dtype(self)))

    def greedy(self, obs: Obs) -> torch.Tensor:
        """The action of highest Q-value, ``[B]`` (int64)."""
        return self(obs).argmax(-1)

    def epsilon_greedy(self, obs: Obs, epsilon: float) -> torch.Tensor:
        """Uniform random actions with probability ``epsilon``, greedy ones otherwise (torch's RNG)."""
        greedy = self.greedy(obs)
        if epsilon <= 0:
            return greedy
        random = torch.randint(self.num_actions, greedy.shape, device=greedy.device)
        explore = torch.rand(greedy.shape, device=greedy.device) < epsilon
        return torch.where(explore, random, greedy)

    def explore(self, obs: Obs, env_steps: int) -> torch.Tensor:
        """Epsilon-greedy actions ``[B]`` at the schedule's epsilon for ``env_steps`` (collection)."""
        return self.epsilon_greedy(obs, self.epsilon(env_steps))

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> None:
        """No memory: ``None`` (the evaluation protocol's state, :mod:`rl_lightning.data.protocol`)."""
        return None

    def act(
        self,
        obs: Obs,
        state: None = None,
        episode_start: torch.Tensor | None = None,
        deterministic: bool = True,
        value: bool = False,
    ) -> tuple[torch.Tensor, None, None, None]:
        """Actions for evaluation and deployment: greedy, or epsilon-greedy at the final epsilon.

        Returns ``(action, None, None, None)``: off-policy evaluation uses no log-probability,
        value (``value`` is the protocol's and ignored) or state.
        """
        action = self.greedy(obs) if deterministic else self.epsilon_greedy(obs, self.epsilon.end)
        return action, None, None, None
