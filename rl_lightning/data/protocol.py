"""The small protocol through which the data layer reaches a policy."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    from rl_lightning.data.rollout import UpdatePlan


@runtime_checkable
class RolloutPolicy(Protocol):
    """What rollouts and evaluation need from a policy (e.g. ``ActorCritic``).

    A rollout calls ``explore`` once per env step and ``evaluate_actions`` once for the whole
    rollout, or, where the policy's ``evaluates_per_step`` is true (optional; a shared image
    encoder), ``act`` once per env step; evaluation calls ``act``.
    """

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return ``(action, log_prob, value)`` for raw observations ``[B, *obs_shape]``."""

    def explore(self, obs: torch.Tensor, env_steps: int) -> torch.Tensor:
        """Return sampled actions for raw observations ``[B, *obs_shape]``."""

    def evaluate_actions(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return ``(log_prob, entropy, value)``, each ``[B]``, of given actions."""

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """Return state values ``[B]`` for raw observations."""

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Merge raw observations into the policy's observation statistics."""

    def parameters(self):
        """The policy's parameters (their device is where observations are sent)."""


@runtime_checkable
class ExplorationPolicy(Protocol):
    """What replay-backed collection needs from an off-policy algorithm's policy.

    An acting copy (``ActorCopy``) also has ``maybe_sync()``, which the replay stream calls
    (and times as ``sync``) before each act.
    """

    def explore(self, obs: torch.Tensor, env_steps: int) -> torch.Tensor:
        """Return exploration actions (sampled, or epsilon-greedy) for raw observations ``[B, *obs_shape]``.

        ``env_steps`` (taken so far over all ranks) drives exploration schedules such as DQN's epsilon.
        """

    def parameters(self):
        """The policy's parameters (their device is where observations are sent)."""


@runtime_checkable
class FaultPolicy(Protocol):
    """What the data streams read from the algorithm that trains on them: its answer to a NaN or inf.

    ``on_nonfinite`` is ``"stop"`` or ``"skip"`` (:class:`~rl_lightning.algos.RLModule` has it).
    """

    on_nonfinite: str


@runtime_checkable
class OnPolicyLearner(Protocol):
    """What the rollout stream reads from the on-policy algorithm that trains on it: its update plan.

    ``update_plan`` (an :class:`~rl_lightning.data.rollout.UpdatePlan`: ``gamma``,
    ``gae_lambda``, ``update_epochs``, ``num_minibatches``) says how a rollout's advantages
    are computed and how it is cut into minibatches (:class:`~rl_lightning.algos.PPO` has it).
    """

    update_plan: UpdatePlan
