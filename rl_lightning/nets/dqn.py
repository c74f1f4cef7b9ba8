"""Network of DQN: a Q-network over discrete actions that acts epsilon-greedily (a plain ``nn.Module``).

``QValueNetwork`` maps observations to one Q-value per action. ``explore`` is what the
replay stream calls (epsilon-greedy, epsilon from a linear schedule over env steps);
``act`` is what evaluation and ``predict`` call (greedy). The loss (torchrl's ``DQNLoss``)
wraps the same module, so its updates reach the acting network.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from rl_lightning.nets.mlp import mlp, weight_dtype


def check_discrete_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise a clear error for spaces DQN cannot handle."""
    if not isinstance(observation_space, gym.spaces.Box) or len(observation_space.shape) != 1:
        raise TypeError(
            f"DQN needs a 1-D Box observation space, got {observation_space}. Image and Dict observations are "
            "PPO's so far (algo=ppo); or flatten them: env.wrappers=[gymnasium.wrappers.FlattenObservation]."
        )
    if not isinstance(action_space, gym.spaces.Discrete):
        raise TypeError(
            f"DQN picks one of finitely many actions and needs a Discrete action space, got {action_space}. "
            "For continuous actions use SAC (or PPO)."
        )


@dataclasses.dataclass(frozen=True)
class LinearSchedule:
    """A value that moves linearly from ``start`` to ``end`` over ``duration`` env steps, then stays.

    The exploration schedule of DQN (Mnih et al., 2015; SB3's ``exploration_fraction`` and
    CleanRL's ``linear_schedule``), keyed on env steps over all ranks, so a resumed run
    continues it from the restored counter.
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
    """``Q(s, .)``: an MLP from observations to one value per action, acting epsilon-greedily.

    Args:
        observation_space: A 1-D ``Box``.
        action_space: A ``Discrete`` space.
        hidden_sizes: Hidden widths (ReLU, as in SB3's and CleanRL's DQN).
        epsilon: Exploration rate as a function of env steps taken over all ranks.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: Sequence[int] = (256, 256),
        epsilon: LinearSchedule = LinearSchedule(1.0, 0.05, 0),
    ):
        super().__init__()
        check_discrete_spaces(observation_space, action_space)
        self.obs_dim, self.num_actions = observation_space.shape[0], int(action_space.n)
        self.net = mlp(self.obs_dim, hidden_sizes, self.num_actions, activation=nn.ReLU)
        self.epsilon = epsilon

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values ``[B, num_actions]`` for observations ``[B, obs_dim]`` (in the weights' dtype)."""
        return self.net(obs.to(weight_dtype(self)))

    def greedy(self, obs: torch.Tensor) -> torch.Tensor:
        """The action of highest Q-value, ``[B]`` (int64)."""
        return self(obs).argmax(-1)

    def epsilon_greedy(self, obs: torch.Tensor, epsilon: float) -> torch.Tensor:
        """Uniform random actions with probability ``epsilon``, greedy ones otherwise (torch's RNG)."""
        greedy = self.greedy(obs)
        if epsilon <= 0:
            return greedy
        random = torch.randint(self.num_actions, greedy.shape, device=greedy.device)
        explore = torch.rand(greedy.shape, device=greedy.device) < epsilon
        return torch.where(explore, random, greedy)

    def explore(self, obs: torch.Tensor, env_steps: int) -> torch.Tensor:
        """Epsilon-greedy actions ``[B]`` at the schedule's epsilon for ``env_steps`` (collection)."""
        return self.epsilon_greedy(obs, self.epsilon(env_steps))

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> tuple[torch.Tensor, None, None]:
        """Actions for evaluation and deployment: greedy, or epsilon-greedy at the final epsilon.

        Returns ``(action, None, None)``: the evaluation protocol's log-prob and value slots
        are not used by off-policy evaluation.
        """
        action = self.greedy(obs) if deterministic else self.epsilon_greedy(obs, self.epsilon.end)
        return action, None, None
