"""The small protocols through which the data layer reaches a policy (never an algorithm class)."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch


@runtime_checkable
class RolloutPolicy(Protocol):
    """What rollouts and evaluation need from a policy (``ActorCritic``, ``RecurrentActorCritic``, an
    ``ActorCopy`` of one; SAC's and DQN's networks for evaluation).

    ``state`` is the policy's memory as one tensor with the env batch first, ``[B, ...]``, or
    ``None`` for a feed-forward policy; ``episode_start`` (``[B]`` bools) marks the envs whose
    episode begins with this observation, where the policy starts from its initial state.
    """

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor | None:
        """The state an episode starts from, ``[batch_size, ...]`` (``None``: no memory)."""

    def act(
        self,
        obs: Any,
        state: torch.Tensor | None,
        episode_start: torch.Tensor,
        deterministic: bool = False,
        value: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """``(action, log_prob, value, next_state)`` for raw observations ``[B, ...]``; ``value=False`` (evaluation,
        ``predict``): the critic need not run, so only the actor's observation keys are read."""

    def value(self, obs: Any, state: torch.Tensor | None, episode_start: torch.Tensor) -> torch.Tensor:
        """State values ``[B]`` of raw observations (the bootstrap values)."""

    def parameters(self):
        """The policy's parameters (their device is where observations are sent)."""


@runtime_checkable
class ExplorationPolicy(Protocol):
    """What replay collection needs from an off-policy algorithm's policy."""

    def explore(self, obs: Any, env_steps: int) -> torch.Tensor:
        """Exploration actions (sampled, or epsilon-greedy) for raw observations ``[B, ...]``; ``env_steps``
        (taken so far over all ranks) drives schedules such as DQN's epsilon."""

    def parameters(self):
        """The policy's parameters (their device is where observations are sent)."""
