"""Actor-critic for discrete (Categorical), multi-discrete, multi-binary and continuous (diagonal Gaussian) actions.

A plain ``nn.Module``: usable without Lightning, e.g. after ``PPO.load_from_checkpoint``.
Observations are normalized by a :class:`RunningNormalizer` inside the module, so raw
observations go in everywhere (rollout, training, evaluation, deployment).

Vector observations (a ``Box`` of rank 1 or 2) are flattened into the actor's and the critic's MLPs, as in CleanRL's
``ppo.py``. Images and ``Dict`` observations go through one shared encoder
(:class:`~rl_lightning.nets.encoders.MultiInputEncoder`, or a user's own), whose features feed both heads, as in
CleanRL's ``ppo_atari.py``; with observation groups (``EncoderSettings.actor_keys`` / ``critic_keys``) the critic has an
encoder of its own over its keys, which may be privileged (an asymmetric actor-critic, Pinto et al. 2017).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_lightning.envs.obs import Obs, leaves
from rl_lightning.nets.encoders import EncoderSettings, build_encoder
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
    action_kind(action_space)


def action_kind(action_space: gym.Space) -> str:
    """The distribution an action space gets: ``Discrete`` a Categorical, ``MultiDiscrete`` independent
    Categoricals, ``MultiBinary`` independent Bernoullis, a 1-D ``Box`` a diagonal Gaussian.

    Raises:
        TypeError: For any other action space, naming it and what is supported.
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return "categorical"
    if isinstance(action_space, gym.spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        return "multi_categorical"
    if isinstance(action_space, gym.spaces.MultiBinary) and np.ndim(action_space.n) == 0:
        return "bernoulli"
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        if not np.issubdtype(action_space.dtype, np.floating):  # a Gaussian's samples would reach it as floats
            raise TypeError(f"An integer Box action space ({action_space}) has no distribution here: give the env "
                            "a MultiDiscrete space (nvec = high - low + 1, start = low) for its actions.")  # fmt: skip
        return "gaussian"
    raise TypeError(
        f"The actor-critic supports Discrete, 1-D MultiDiscrete, 1-D MultiBinary and 1-D Box action spaces, got "
        f"{action_space}. Map it onto one of them with a gymnasium.ActionWrapper (a Tuple of Discretes: one "
        "MultiDiscrete)."
    )


def _check_head(name: str, net: nn.Module | None, width: int, out: int) -> None:
    """Raise a ``ValueError`` unless ``net`` (a user's ``actor`` or ``critic``; ``None``: the default) maps a batch
    ``[B, width]`` to ``[B, out]``, naming the widths expected and what it did."""
    if net is None:
        return
    if not isinstance(net, nn.Module):
        raise TypeError(f"{name} must be a torch.nn.Module (or None for the default network), got {net!r}.")
    like = next(net.parameters(), torch.empty(0))  # on its device, in its dtype
    try:
        with torch.no_grad():
            shape = tuple(net(torch.zeros(2, width, dtype=like.dtype, device=like.device)).shape)
    except Exception as err:
        shape = f"an error ({type(err).__name__}: {err})"
    if shape != (2, out) and not (out == 1 and shape == (2,)):  # a critic's values may come as [B]
        raise ValueError(f"The {name} network must map [B, {width}] inputs (normalized observations or encoder "
                         f"features) to [B, {out}]; on [2, {width}] it gave {shape}.")  # fmt: skip


class ActorCritic(nn.Module):
    """Policy and value networks over a shared observation normalizer.

    Args:
        observation_space: A ``Box`` (vectors are flattened; images go through the encoder)
            or a ``Dict`` of images and vectors (through the encoder).
        action_space: ``Discrete`` (Categorical policy), 1-D ``MultiDiscrete`` (one Categorical per entry), 1-D
            ``MultiBinary`` (one Bernoulli per entry) or a 1-D ``Box`` (Gaussian policy with a state-independent log
            standard deviation, as in CleanRL's ``ppo_continuous_action.py``).
        hidden_sizes: Hidden widths of the default MLPs.
        actor: Optional network mapping normalized observations ``[B, obs_dim]`` to logits
            ``[B, n]`` or means ``[B, act_dim]``; replaces the default MLP.
        critic: Optional network mapping normalized observations to values ``[B, 1]``.
        normalize_obs: Keep running observation statistics and normalize with them (the
            vector part only, where an encoder reads the observations).
        init_log_std: Initial log standard deviation (continuous actions).
        encoder: For image and ``Dict`` observations: the settings of the default
            :class:`~rl_lightning.nets.encoders.MultiInputEncoder` (``None``: chosen from the space), or a module of
            one's own that maps raw observations to features ``[B, features_dim]`` and has a ``features_dim`` attribute
            (used for any observation space). Settings with observation groups (``actor_keys``, ``critic_keys`` naming
            other keys) give the critic an encoder of its own (``critic_encoder``) over its keys, privileged ones
            included; the actor's encoder and heads never read them.
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
        privileged = not callable(encoder) and EncoderSettings.of(encoder).privileged_critic
        self.encoder = build_encoder(encoder, observation_space, normalize_obs)
        #: The critic's own encoder (observation groups: the critic reads keys the actor does not), else ``None``.
        self.critic_encoder = build_encoder(encoder, observation_space, normalize_obs, "critic") if privileged else None
        self.obs_dim = int(np.prod(observation_space.shape)) if self.encoder is None else int(self.encoder.features_dim)
        self.critic_dim = self.obs_dim if self.critic_encoder is None else int(self.critic_encoder.features_dim)
        self.action_kind = action_kind(action_space)
        self.discrete = self.action_kind == "categorical"  # one Categorical
        #: Categories per action entry (``multi_categorical``), as a tuple for ``split``.
        self.nvec = tuple(int(n) for n in action_space.nvec) if self.action_kind == "multi_categorical" else ()
        if self.action_kind in ("categorical", "bernoulli"):
            act_dim = int(action_space.n)
        elif self.nvec:
            act_dim = sum(self.nvec)  # the logits of every entry, side by side
        else:
            act_dim = int(action_space.shape[0])
        own_normalizer = normalize_obs and self.encoder is None  # an encoder normalizes its own vector part
        self.normalizer = RunningNormalizer((self.obs_dim,)) if own_normalizer else nn.Identity()
        self.actor = actor if actor is not None else mlp(self.obs_dim, hidden_sizes, act_dim, out_gain=0.01)
        self.critic = critic if critic is not None else mlp(self.critic_dim, hidden_sizes, 1, out_gain=1.0)
        for name, net, width, out in (("actor", actor, self.obs_dim, act_dim), ("critic", critic, self.critic_dim, 1)):
            _check_head(name, net, width, out)  # a user's network: its widths checked now, not by a failing rollout
        gaussian = self.action_kind == "gaussian"
        self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std))) if gaussian else None
        self.normalize_obs = own_normalizer
        # A parameter whose dtype is the networks' (in a list, so it is not registered twice).
        # Casts and copies write the same Parameter objects (``.to()``, ActorCopy,
        # ``load_state_dict``), so its dtype stays current; deepcopy keeps the aliasing.
        self._dtype_ref = [next(self.parameters())]

    def critic_features(self, obs: Obs, features: torch.Tensor | None = None) -> torch.Tensor:
        """The critic's input ``[B, critic_dim]``: the actor's ``features`` (computed if not given), or, with a
        privileged critic, its own encoder's."""
        if self.critic_encoder is None:
            return self.features(obs) if features is None else features
        x = self.critic_encoder(obs)
        dtype = self._dtype_ref[0].dtype
        return x if x.dtype == dtype else x.to(dtype)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The actor's input ``[B, obs_dim]``: raw observations flattened and normalized, or encoded."""
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
        """Actions drawn from the distribution the actor's output ``out`` parameterizes.

        ``[B]`` (Categorical), ``[B, n]`` int64 (MultiDiscrete, MultiBinary) or ``[B, act_dim]`` (Gaussian).
        """
        if self.discrete or self.nvec:
            # Gumbel-max: argmax(logits + Gumbel noise) is a sample of Categorical(logits)
            # (Gumbel, 1954; Maddison et al., 2014), cheaper than torch.multinomial on softmax.
            noisy = out.float() - torch.empty_like(out, dtype=torch.float32).exponential_().log()
            return noisy.argmax(-1) if self.discrete else self._per_entry_argmax(noisy)
        if self.action_kind == "bernoulli":
            return (torch.rand_like(out, dtype=torch.float32) < torch.sigmoid(out.float())).long()
        return torch.normal(out, self.log_std.exp().expand_as(out))

    def _per_entry_argmax(self, out: torch.Tensor) -> torch.Tensor:
        """The argmax of each entry's logits (``multi_categorical``), ``[B, n]``."""
        return torch.stack([part.argmax(-1) for part in out.split(self.nvec, -1)], -1)

    def _mode(self, out: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            return out.argmax(-1)
        if self.nvec:
            return self._per_entry_argmax(out)
        return (out > 0).long() if self.action_kind == "bernoulli" else out  # bernoulli: p > 0.5

    @staticmethod
    def _categorical(logits: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        log_p = torch.log_softmax(logits, -1)
        log_prob = log_p.gather(-1, action.long().unsqueeze(-1)).squeeze(-1)
        # Clamped like Categorical.logits (for the entropy only, so the policy gradient
        # does not pass through the clamp), so a probability of 0 gives entropy 0, not nan.
        log_p = log_p.clamp(min=torch.finfo(logits.dtype).min)
        return log_prob, -(log_p.exp() * log_p).sum(-1)

    def _log_prob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``action`` and the entropy, per row, of the distribution ``out`` parameterizes.

        Independent entries (MultiDiscrete, MultiBinary): the sums over the entries, the log-probability and entropy of
        the product distribution (as SB3's ``MultiCategoricalDistribution`` and ``BernoulliDistribution`` sum them).
        """
        if self.discrete:
            return self._categorical(out, action)
        if self.nvec:
            terms = [self._categorical(part, action[:, i]) for i, part in enumerate(out.split(self.nvec, -1))]
            return sum(t[0] for t in terms), sum(t[1] for t in terms)
        if self.action_kind == "bernoulli":
            # log p(a) = -BCE(logits, a); H = p softplus(-l) + (1 - p) softplus(l), p = sigmoid(l).
            log_prob = -nn.functional.binary_cross_entropy_with_logits(out, action.to(out.dtype), reduction="none")
            p = torch.sigmoid(out)
            entropy = p * nn.functional.softplus(-out) + (1 - p) * nn.functional.softplus(out)
            return log_prob.sum(-1), entropy.sum(-1)
        log_std = self.log_std.expand_as(out)
        log_prob = (-((action - out) ** 2) / (2 * (2 * log_std).exp()) - log_std - _HALF_LOG_2PI).sum(-1)
        return log_prob, (0.5 + _HALF_LOG_2PI + log_std).sum(-1)

    def forward(self, obs: Obs) -> torch.Tensor:
        """Deterministic actions (argmax or mean) for raw observations ``[B, *obs_shape]`` (a recurrent policy's from
        its initial state)."""
        starts = torch.ones(len(leaves(obs)[0]), dtype=torch.bool, device=next(self.parameters()).device)  # a dict, too
        return self.act(obs, None, starts, deterministic=True, value=False)[0]

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> None:
        """A feed-forward policy has no memory: ``None`` (the protocol's state, :mod:`rl_lightning.data.protocol`)."""
        return None

    def act(
        self,
        obs: Obs,
        state: None = None,
        episode_start: torch.Tensor | None = None,
        deterministic: bool = False,
        value: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, None]:
        """Choose actions for raw observations ``[B, *obs_shape]``.

        Args:
            value: Run the critic too (rollouts); evaluation and ``predict`` pass ``False``, so they
                need only the actor's observation keys.

        Returns:
            ``(action, log_prob, value, None)`` with shapes ``[B]`` or ``[B, act_dim]``, ``[B]``, ``[B]``
            (``value`` ``None`` where not asked for). Continuous actions are not clipped: the
            log-probability refers to the sample, and the env group clips to the action bounds.
        """
        x = self.features(obs)
        action, log_prob = self._action_and_log_prob(self.actor(x), deterministic)
        return action, log_prob, self.critic(self.critic_features(obs, x)).squeeze(-1) if value else None, None

    def _action_and_log_prob(self, out: torch.Tensor, deterministic: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """An action for each row of the actor's output ``out`` and its log-probability: what acting needs of the
        distribution (no entropy), once per env step."""
        if self.discrete:  # one log-softmax gives the sample (Gumbel-max on it, as on the logits) and its log-prob
            log_p = torch.log_softmax(out.float(), -1)
            noisy = log_p if deterministic else log_p - torch.empty_like(log_p).exponential_().log()
            action = noisy.argmax(-1)
            return action, log_p.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        action = self._mode(out) if deterministic else self.sample(out)
        return action, self._log_prob_entropy(out, action)[0]

    def value(self, obs: Obs, state: None = None, episode_start: torch.Tensor | None = None) -> torch.Tensor:
        """State values ``[B]`` of raw observations ``[B, *obs_shape]``."""
        return self.critic(self.critic_features(obs)).squeeze(-1)

    def evaluate_actions(
        self, obs: Obs, action: torch.Tensor, episode_start: torch.Tensor | None = None, state: None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probability, entropy and value of a rollout's actions, for the PPO loss.

        Args:
            obs: ``[L, B, *obs_shape]``: ``B`` sequences of ``L`` steps (a feed-forward policy reads
                each step on its own, so PPO hands it sequences of one step).
            action: ``[L, B, ...]``, the actions taken.
            episode_start, state: Unused (the recurrent policy's sequence inputs).

        Returns:
            ``(log_prob, entropy, value)``, each ``[L, B]``.
        """
        L, B = action.shape[:2]
        obs = obs.flatten(0, 1)
        x = self.features(obs)
        log_prob, entropy = self._log_prob_entropy(self.actor(x), action.flatten(0, 1))
        value = self.critic(self.critic_features(obs, x)).squeeze(-1)
        return log_prob.view(L, B), entropy.view(L, B), value.view(L, B)

    def update_normalizer(self, obs: Obs) -> None:
        """Merge raw observations ``[..., *obs_shape]`` into the normalizer's statistics (PPO calls it after each
        update phase, so acting and learning on a rollout see the same normalization)."""
        if self.encoder is not None:
            for encoder in (self.encoder, self.critic_encoder):
                update = getattr(encoder, "update_normalizer", None)  # a user's encoder may keep none
                if update is not None:
                    update(obs)
        elif isinstance(self.normalizer, RunningNormalizer):
            self.normalizer.update(obs.reshape(-1, self.obs_dim))
