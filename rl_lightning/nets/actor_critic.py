"""Actor-critic for discrete (Categorical) and continuous (diagonal Gaussian) actions.

A plain ``nn.Module``: usable without Lightning, e.g. after ``PPO.load_from_checkpoint``.
Observations are normalized by a :class:`RunningNormalizer` inside the module, so raw
observations go in everywhere (rollout, training, evaluation, deployment).

Vector observations (a ``Box`` of rank 1 or 2) are flattened into the actor's and the
critic's MLPs, as in CleanRL's ``ppo.py``. Images and ``Dict`` observations go through one
shared encoder (:class:`~rl_lightning.nets.encoders.MultiInputEncoder`, or a user's own),
whose features feed both heads, as in CleanRL's ``ppo_atari.py``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_lightning import fast
from rl_lightning.nets.encoders import EncoderSettings, MultiInputEncoder, needs_encoder
from rl_lightning.nets.mlp import mlp
from rl_lightning.nets.normalizer import RunningNormalizer

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def check_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise a clear error for spaces the actor-critic cannot handle (the encoder checks image and Dict keys)."""
    if not isinstance(observation_space, (gym.spaces.Box, gym.spaces.Dict)):
        raise TypeError(
            f"The actor-critic needs a Box or Dict observation space, got {observation_space}. Turn it into one with "
            "a gymnasium.ObservationWrapper (or gymnasium.wrappers.FlattenObservation)."
        )
    if isinstance(action_space, gym.spaces.Discrete):
        return
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return
    raise TypeError(f"The actor-critic supports Discrete or 1-D Box action spaces, got {action_space}.")


class ActorCritic(nn.Module):
    """Policy and value networks over a shared observation normalizer.

    Args:
        observation_space: A ``Box`` (vectors are flattened; images go through the encoder)
            or a ``Dict`` of images and vectors (through the encoder).
        action_space: ``Discrete`` (Categorical policy) or a 1-D ``Box`` (Gaussian policy
            with a state-independent log standard deviation, as in CleanRL's
            ``ppo_continuous_action.py``).
        hidden_sizes: Hidden widths of the default MLPs.
        actor: Optional network mapping normalized observations ``[B, obs_dim]`` to logits
            ``[B, n]`` or means ``[B, act_dim]``; replaces the default MLP.
        critic: Optional network mapping normalized observations to values ``[B, 1]``.
        normalize_obs: Keep running observation statistics and normalize with them (the
            vector part only, where an encoder reads the observations).
        init_log_std: Initial log standard deviation (continuous actions).
        encoder: For image and ``Dict`` observations: the settings of the default
            :class:`MultiInputEncoder` (``None``: chosen from the space), or a module of one's
            own that maps raw observations to features ``[B, features_dim]`` and has a
            ``features_dim`` attribute (used for any observation space).
    """

    def __init__(
        self,
        observation_space: gym.spaces.Box,
        action_space: gym.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        actor: nn.Module | None = None,
        critic: nn.Module | None = None,
        normalize_obs: bool = True,
        init_log_std: float = 0.0,
        encoder: EncoderSettings | dict | nn.Module | None = None,
    ):
        super().__init__()
        check_spaces(observation_space, action_space)
        if not isinstance(encoder, nn.Module) and needs_encoder(observation_space):
            encoder = MultiInputEncoder(observation_space, encoder, normalize_obs)
        self.encoder = encoder if isinstance(encoder, nn.Module) else None
        if self.encoder is not None:
            self.obs_dim = int(self.encoder.features_dim)  # the heads' input width
        else:
            self.obs_dim = int(np.prod(observation_space.shape))
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        act_dim = int(action_space.n) if self.discrete else int(action_space.shape[0])
        own_normalizer = normalize_obs and self.encoder is None  # an encoder normalizes its own vector part
        self.normalizer = RunningNormalizer((self.obs_dim,)) if own_normalizer else nn.Identity()
        self.actor = actor if actor is not None else mlp(self.obs_dim, hidden_sizes, act_dim, out_gain=0.01)
        self.critic = critic if critic is not None else mlp(self.obs_dim, hidden_sizes, 1, out_gain=1.0)
        self.log_std = None if self.discrete else nn.Parameter(torch.full((act_dim,), float(init_log_std)))
        self.normalize_obs = own_normalizer
        # A parameter whose dtype is the networks' (in a list, so it is not registered twice).
        # Casts and copies write the same Parameter objects (``.to()``, ActorCopy,
        # ``load_state_dict``), so its dtype stays current; deepcopy keeps the aliasing.
        self._dtype_ref = [next(self.parameters())]

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The heads' input ``[B, obs_dim]``: raw observations flattened and normalized, or encoded."""
        if self.encoder is not None:
            x = self.encoder(obs)
            dtype = self._dtype_ref[0].dtype
            return x if x.dtype == dtype else x.to(dtype)
        # Normalized in float32 (the statistics stay float32 in every copy), then in the
        # weights' dtype: float32, or bf16/fp16 in a reduced-precision acting copy. Written
        # to skip no-op calls: this runs once per env step.
        x = obs.reshape(obs.shape[0], self.obs_dim)
        if x.dtype != torch.float32:
            x = x.float()
        if self.normalize_obs:
            x = self.normalizer(x)
        dtype = self._dtype_ref[0].dtype
        return x if dtype == torch.float32 else x.to(dtype)

    # The distributions are written out on tensors rather than built as torch.distributions
    # objects: constructing Categorical/Normal (argument broadcasting, logits normalization)
    # costs more than the 64x64 networks themselves on CPU. Same formulas as
    # torch.distributions (tests/nets/test_actor_critic.py compares them).
    def sample(self, out: torch.Tensor) -> torch.Tensor:
        """Actions drawn from the distribution the actor's output ``out`` parameterizes."""
        if self.discrete:
            # Gumbel-max: argmax(logits + Gumbel noise) is a sample of Categorical(logits)
            # (Gumbel, 1954; Maddison et al., 2014), cheaper than torch.multinomial on softmax.
            return (out.float() - torch.empty_like(out, dtype=torch.float32).exponential_().log()).argmax(-1)
        return torch.normal(out, self.log_std.exp().expand_as(out))

    def _mode(self, out: torch.Tensor) -> torch.Tensor:
        return out.argmax(-1) if self.discrete else out

    def _log_prob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``action`` and the entropy, per row, of the distribution ``out`` parameterizes."""
        if self.discrete:
            log_p = torch.log_softmax(out, -1)
            log_prob = log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
            # Clamped like Categorical.logits (for the entropy only, so the policy gradient
            # does not pass through the clamp), so a probability of 0 gives entropy 0, not nan.
            log_p = log_p.clamp(min=torch.finfo(out.dtype).min)
            return log_prob, -(log_p.exp() * log_p).sum(-1)
        log_std = self.log_std.expand_as(out)
        log_prob = (-((action - out) ** 2) / (2 * (2 * log_std).exp()) - log_std - _HALF_LOG_2PI).sum(-1)
        return log_prob, (0.5 + _HALF_LOG_2PI + log_std).sum(-1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (argmax or mean) for raw observations ``[B, *obs_shape]``."""
        return self._mode(self.actor(self.features(obs)))

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Choose actions for raw observations.

        Args:
            obs: Raw observations, shape ``[B, *obs_shape]``.
            deterministic: Take the mode (argmax / mean) instead of sampling.

        Returns:
            ``(action, log_prob, value)`` with shapes ``[B]`` or ``[B, act_dim]``, ``[B]``, ``[B]``.
            Continuous actions are not clipped: the log-probability refers to the sample,
            and the env side clips to the action bounds.
        """
        x = self.features(obs)
        out = self.actor(x)
        action = self._mode(out) if deterministic else self.sample(out)
        return action, self._log_prob_entropy(out, action)[0], self.critic(x).squeeze(-1)

    def explore(self, obs: torch.Tensor, env_steps: int = 0) -> torch.Tensor:
        """Sampled actions only: what a rollout needs per env step.

        Log-probabilities and values are computed for the whole rollout at once afterwards
        (:meth:`evaluate_actions`), which saves the critic and the log-probability on every
        step. ``env_steps`` is unused (the exploration protocol's schedule argument). The fast
        path runs the default actor in numpy here (:func:`rl_lightning.fast.explore`: the same
        function and the same draws from torch's generator).
        """
        action = fast.explore(self, obs) if self.encoder is None else None
        return action if action is not None else self.sample(self.actor(self.features(obs)))

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values ``[B]`` of raw observations ``[B, *obs_shape]``."""
        return self.critic(self.features(obs)).squeeze(-1)

    def evaluate_actions(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probability, entropy and value of given actions, for the PPO loss.

        Returns:
            ``(log_prob, entropy, value)``, each of shape ``[B]``.
        """
        x = self.features(obs)
        log_prob, entropy = self._log_prob_entropy(self.actor(x), action)
        return log_prob, entropy, self.critic(x).squeeze(-1)

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Merge raw observations ``[B, *obs_shape]`` into the normalizer's statistics."""
        if self.encoder is not None:
            update = getattr(self.encoder, "update_normalizer", None)  # a user's encoder may keep none
            if update is not None:
                update(obs)
        elif isinstance(self.normalizer, RunningNormalizer):
            self.normalizer.update(obs.reshape(-1, self.obs_dim))
