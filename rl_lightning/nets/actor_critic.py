"""Actor-critic for discrete (Categorical) and continuous (diagonal Gaussian) actions.

A plain ``nn.Module``: usable without Lightning, e.g. after ``PPO.load_from_checkpoint``.
Observations are normalized by a :class:`RunningNormalizer` inside the module, so raw
observations go in everywhere (rollout, training, evaluation, deployment).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rl_lightning.nets.mlp import mlp
from rl_lightning.nets.mlp_grad import has_call_hooks, has_own_hooks
from rl_lightning.nets.normalizer import RunningNormalizer
from rl_lightning.nets.numpy_mlp import NumpyMLP

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def check_spaces(observation_space: gym.Space, action_space: gym.Space) -> None:
    """Raise a clear error for spaces the actor-critic cannot handle."""
    if not isinstance(observation_space, gym.spaces.Box):
        raise TypeError(
            f"The actor-critic needs a Box observation space, got {observation_space}. Flatten "
            "dict or tuple observations with gymnasium.wrappers.FlattenObservation."
        )
    if isinstance(action_space, gym.spaces.Discrete):
        return
    if isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1:
        return
    raise TypeError(f"The actor-critic supports Discrete or 1-D Box action spaces, got {action_space}.")


class ActorCritic(nn.Module):
    """Policy and value networks over a shared observation normalizer.

    Args:
        observation_space: A ``Box`` space; observations are flattened.
        action_space: ``Discrete`` (Categorical policy) or a 1-D ``Box`` (Gaussian policy
            with a state-independent log standard deviation, as in CleanRL's
            ``ppo_continuous_action.py``).
        hidden_sizes: Hidden widths of the default MLPs.
        actor: Optional network mapping normalized observations ``[B, obs_dim]`` to logits
            ``[B, n]`` or means ``[B, act_dim]``; replaces the default MLP.
        critic: Optional network mapping normalized observations to values ``[B, 1]``.
        normalize_obs: Keep running observation statistics and normalize with them.
        init_log_std: Initial log standard deviation (continuous actions).
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
    ):
        super().__init__()
        check_spaces(observation_space, action_space)
        self.obs_dim = int(np.prod(observation_space.shape))
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        act_dim = int(action_space.n) if self.discrete else int(action_space.shape[0])
        self.normalizer = RunningNormalizer((self.obs_dim,)) if normalize_obs else nn.Identity()
        self.actor = actor if actor is not None else mlp(self.obs_dim, hidden_sizes, act_dim, out_gain=0.01)
        self.critic = critic if critic is not None else mlp(self.obs_dim, hidden_sizes, 1, out_gain=1.0)
        self.log_std = None if self.discrete else nn.Parameter(torch.full((act_dim,), float(init_log_std)))
        self.normalize_obs = normalize_obs
        # A parameter whose dtype is the networks' (in a list, so it is not registered twice).
        # Casts and copies write the same Parameter objects (``.to()``, ActorCopy,
        # ``load_state_dict``), so its dtype stays current; deepcopy keeps the aliasing.
        self._dtype_ref = [next(self.parameters())]
        #: The actor's forward in numpy, and the noise buffer, for :meth:`explore` (``nets/numpy_mlp.py``).
        self._numpy_actor: NumpyMLP | None = None
        self._noise_buffer: torch.Tensor | None = None

    def _features(self, obs: torch.Tensor) -> torch.Tensor:
        # Normalized in float32 (the statistics stay float32 in every copy), then in the
        # weights' dtype: float32, or bf16/fp16 in a reduced-precision acting copy. Written
        # to skip no-op calls: this runs once per env step (0.038 -> 0.015 ms without a
        # normalizer, 1 CPU thread).
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
    def _sample(self, out: torch.Tensor) -> torch.Tensor:
        if self.discrete:
            # Gumbel-max: argmax(logits + Gumbel noise) is a sample of Categorical(logits)
            # (Gumbel, 1954; Maddison et al., 2014), 0.012 ms against 0.030 ms for
            # torch.multinomial on softmax for 4 envs (1 CPU thread).
            return (out.float() - torch.empty_like(out, dtype=torch.float32).exponential_().log()).argmax(-1)
        return torch.normal(out, self.log_std.exp().expand_as(out))

    def _mode(self, out: torch.Tensor) -> torch.Tensor:
        return out.argmax(-1) if self.discrete else out

    def _log_prob_entropy(self, out: torch.Tensor, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probability of ``action`` and the entropy, per row, of the distribution ``out`` parameterizes."""
        log_prob, entropy, _ = self._log_prob_entropy_grads(out, action)
        return log_prob, entropy

    def _log_prob_entropy_grads(
        self, out: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, Callable[[torch.Tensor, float], tuple[torch.Tensor, torch.Tensor | None]]]:
        """:meth:`_log_prob_entropy`, and its gradient written out for a loss differentiated by hand.

        Returns:
            ``(log_prob, entropy, grads)``: ``grads(log_prob_grad, entropy_grad)`` maps the
            loss's gradient with respect to each row's log-probability (``[B]``) and to each
            row's entropy (one number for every row) to its gradient with respect to ``out``
            and, for continuous actions, to ``log_std`` (``None`` for discrete ones). The
            formulas are the derivatives autograd takes through the log-probability and
            entropy (``tests/algos/test_ppo_loss.py`` compares); calling ``grads`` is optional.
        """
        if self.discrete:
            log_p = torch.log_softmax(out, -1)
            index = action.long().unsqueeze(-1)
            log_prob = log_p.gather(-1, index).squeeze(-1)
            # Clamped like Categorical.logits (for the entropy only, so the policy gradient
            # does not pass through the clamp), so a probability of 0 gives entropy 0, not nan.
            log_p = log_p.clamp(min=torch.finfo(out.dtype).min)
            p = log_p.exp()
            entropy = -(p * log_p).sum(-1)

            def grads(log_prob_grad: torch.Tensor, entropy_grad: float) -> tuple[torch.Tensor, None]:
                # log_softmax's backward: d log p_a / d out_k = [k = a] - p_k, and
                # d entropy / d out_k = -p_k (log p_k + entropy).
                grad = -p * (log_prob_grad.unsqueeze(-1) + entropy_grad * (log_p + entropy.unsqueeze(-1)))
                return grad.scatter_add_(-1, index, log_prob_grad.unsqueeze(-1)), None

            return log_prob, entropy, grads
        log_std = self.log_std.expand_as(out)
        diff = action - out
        twice_var = 2 * (2 * log_std).exp()
        log_prob = (-(diff**2) / twice_var - log_std - _HALF_LOG_2PI).sum(-1)
        entropy = (0.5 + _HALF_LOG_2PI + log_std).sum(-1)

        def grads(log_prob_grad: torch.Tensor, entropy_grad: float) -> tuple[torch.Tensor, torch.Tensor]:
            # d log_prob / d mean = (a - mean) / var; d log_prob / d log_std = (a - mean)^2 / var - 1;
            # d entropy / d log_std = 1 on every row.
            scaled = diff * (2 / twice_var) * log_prob_grad.unsqueeze(-1)
            log_std_grad = (scaled * diff).sum(0) - log_prob_grad.sum() + entropy_grad * out.shape[0]
            return scaled, log_std_grad

        return log_prob, entropy, grads

    def tanh_layers(self) -> tuple[list[torch.Tensor], list[torch.Tensor]] | None:
        """The actor's and the critic's tensors ``(weight 0, bias 0, weight 1, ...)``, when both are default networks.

        Default means what :func:`~rl_lightning.nets.mlp.mlp` builds with its default
        activation: an ``nn.Sequential`` of ``nn.Linear`` (with bias) and ``nn.Tanh``,
        alternating, first and last ``nn.Linear``; and no hook, the modules' own or a global
        one, that would see their calls. A loss that differentiates the networks by hand
        (PPO's, :func:`~rl_lightning.algos.ppo_loss.minibatch_loss`) may then compute them in
        their place; ``None`` otherwise, and it calls them.
        """
        if has_call_hooks(()):  # a global hook
            return None
        layers: tuple[list[torch.Tensor], list[torch.Tensor]] = ([], [])
        # One pass per network, plain loops and attribute reads: this runs on every minibatch.
        for net, tensors in zip((self._modules["actor"], self._modules["critic"]), layers, strict=True):
            if type(net) is not nn.Sequential or has_own_hooks(net):
                return None
            expected = nn.Linear
            for module in net._modules.values():
                if type(module) is not expected or has_own_hooks(module):
                    return None
                if expected is nn.Linear:
                    params = module._parameters
                    if params["bias"] is None:
                        return None
                    tensors += (params["weight"], params["bias"])
                expected = nn.Tanh if expected is nn.Linear else nn.Linear
            if expected is nn.Linear:  # empty, or a Tanh last
                return None
        return layers

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action (argmax or mean) for raw observations ``[B, *obs_shape]``."""
        return self._mode(self.actor(self._features(obs)))

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
        x = self._features(obs)
        out = self.actor(x)
        action = self._mode(out) if deterministic else self._sample(out)
        return action, self._log_prob_entropy(out, action)[0], self.critic(x).squeeze(-1)

    def explore(self, obs: torch.Tensor, env_steps: int = 0) -> torch.Tensor:
        """Sampled actions only: what a rollout needs per env step.

        Log-probabilities and values are computed for the whole rollout at once afterwards
        (:meth:`evaluate_actions`), which saves the critic and the log-probability on every
        step (``benchmarks/run.py`` measures the rollout). ``env_steps`` is unused (the
        exploration protocol's schedule argument).

        Without gradients, on CPU float32 and the default actor, the forward pass and the
        discrete sample run in numpy (:class:`~rl_lightning.nets.numpy_mlp.NumpyMLP`): the
        same function, and the same draws from torch's generator, as the torch path below,
        at a fraction of its dispatch cost per env step.
        """
        out = None if torch.is_grad_enabled() else self._numpy_actor_out(obs)
        if out is None:
            return self._sample(self.actor(self._features(obs)))
        if not self.discrete:
            return self._sample(torch.from_numpy(out))
        # _sample's Gumbel-max, on the same exponential draw from torch's generator.
        noise = self._exponential_noise(out.shape)
        out -= np.log(noise, out=noise)
        return torch.from_numpy(out.argmax(-1))

    def _numpy_actor_out(self, obs: torch.Tensor) -> np.ndarray | None:
        """``self.actor(self._features(obs))`` computed in numpy, or ``None`` where only torch's forward applies."""
        if type(obs) is not torch.Tensor or not obs.is_cpu or obs.dtype != torch.float32 or obs.requires_grad:
            return None
        actor = self._modules["actor"]
        numpy_actor = self.__dict__.get("_numpy_actor")  # None after a copy or unpickling (__getstate__)
        if numpy_actor is None or numpy_actor.net is not actor:  # new, or the actor was replaced
            numpy_actor = self._numpy_actor = NumpyMLP(actor)
        if obs.dim() != 2 or obs.shape[1] != self.obs_dim:
            obs = obs.reshape(obs.shape[0], self.obs_dim)  # raises on a wrong size, as _features does
        x = obs.numpy()
        if self.normalize_obs:
            norm = self._modules["normalizer"]
            if type(norm) is not RunningNormalizer or norm._forward_hooks or norm._forward_pre_hooks:
                return None
            mean, var = norm.mean, norm.var
            if not mean.is_cpu or mean.dtype != torch.float32 or var.dtype != torch.float32:
                return None
            # RunningNormalizer.forward's formula, in float32 as there.
            x = (x - mean.numpy()) / np.sqrt(var.numpy() + np.float32(norm.eps))
            np.clip(x, -norm.clip, norm.clip, out=x)
        return numpy_actor(x)

    def _exponential_noise(self, shape: tuple[int, ...]) -> np.ndarray:
        """What ``torch.empty(shape).exponential_()`` draws, in a buffer reused across env steps.

        A new tensor per step costs about as much as the draw. The buffer is made outside
        inference mode, so calls under ``inference_mode`` and under ``no_grad`` can both fill it.
        """
        buffer = self.__dict__.get("_noise_buffer")
        if buffer is None or buffer.shape != shape:
            with torch.inference_mode(False):
                buffer = self._noise_buffer = torch.empty(shape, dtype=torch.float32)
        return buffer.exponential_().numpy()

    def __getstate__(self) -> dict:
        """The module's state without the acting caches (numpy views, noise buffer): a copy or an
        unpickled module builds its own, on its own tensors."""
        state = self.__dict__.copy()
        state["_numpy_actor"] = state["_noise_buffer"] = None
        return state

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """State values ``[B]`` of raw observations ``[B, *obs_shape]``."""
        return self.critic(self._features(obs)).squeeze(-1)

    def evaluate_actions(
        self, obs: torch.Tensor, action: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probability, entropy and value of given actions, for the PPO loss.

        Returns:
            ``(log_prob, entropy, value)``, each of shape ``[B]``.
        """
        x = self._features(obs)
        log_prob, entropy = self._log_prob_entropy(self.actor(x), action)
        return log_prob, entropy, self.critic(x).squeeze(-1)

    def update_normalizer(self, obs: torch.Tensor) -> None:
        """Merge raw observations ``[B, *obs_shape]`` into the normalizer's statistics."""
        if isinstance(self.normalizer, RunningNormalizer):
            self.normalizer.update(obs.reshape(-1, self.obs_dim))
