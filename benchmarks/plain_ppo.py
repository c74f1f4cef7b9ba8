"""The "no framework" reference: PPO on a gymnasium vector env as one plain PyTorch loop.

Written in the single-file style of CleanRL's ``ppo.py`` (the structure most RL researchers
would write by hand): per-step numpy <-> torch conversions, a preallocated rollout buffer,
GAE in a Python loop over time, shuffled minibatches, Adam with ``eps=1e-5``, linear
learning-rate annealing, advantage normalization, clipped value loss, global gradient
clipping. Orthogonal initialization as in CleanRL's ``layer_init``. On image observations it
is CleanRL's ``ppo_atari.py`` (:class:`AtariAgent`; ``benchmarks/atari.py``). No Lightning, no
torchrl, no logging. ``benchmarks/run.py`` times it against rl_lightning and
Stable-Baselines3 at identical hyperparameters; it is not part of the package.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions import Categorical


@dataclasses.dataclass
class PPOSettings:
    """CleanRL's ``ppo.py`` defaults (CartPole-v1)."""

    env_id: str = "CartPole-v1"
    num_envs: int = 4
    rollout_steps: int = 128
    num_minibatches: int = 4
    update_epochs: int = 4
    lr: float = 2.5e-4
    anneal_lr: bool = True
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_coef: float = 0.2
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5


def layer(in_size: int, out_size: int, gain: float = np.sqrt(2)) -> nn.Linear:
    """Linear layer with orthogonal weights and zero bias."""
    linear = nn.Linear(in_size, out_size)
    nn.init.orthogonal_(linear.weight, gain)
    nn.init.zeros_(linear.bias)
    return linear


class Agent(nn.Module):
    """Separate 64x64 tanh actor and critic."""

    def __init__(self, obs_dim: int, n_actions: int):
        super().__init__()
        self.critic = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, 1, 1.0))
        self.actor = nn.Sequential(layer(obs_dim, 64), nn.Tanh(), layer(64, 64), nn.Tanh(), layer(64, n_actions, 0.01))

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(x)

    def act(self, x: torch.Tensor, action: torch.Tensor | None = None):
        dist = Categorical(logits=self.actor(x))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(x)


class AtariAgent(nn.Module):
    """CleanRL's ``ppo_atari.py`` agent: the Nature CNN (Mnih et al., 2015) on frames scaled by 1/255,
    shared by a linear actor and a linear critic."""

    def __init__(self, n_actions: int, channels: int = 4):
        super().__init__()
        self.network = nn.Sequential(
            layer_conv(channels, 32, 8, 4),
            nn.ReLU(),
            layer_conv(32, 64, 4, 2),
            nn.ReLU(),
            layer_conv(64, 64, 3, 1),
            nn.ReLU(),
            nn.Flatten(),
            layer(64 * 7 * 7, 512),
            nn.ReLU(),
        )
        self.actor = layer(512, n_actions, 0.01)
        self.critic = layer(512, 1, 1.0)

    def value(self, x: torch.Tensor) -> torch.Tensor:
        return self.critic(self.network(x / 255.0))

    def act(self, x: torch.Tensor, action: torch.Tensor | None = None):
        hidden = self.network(x / 255.0)
        dist = Categorical(logits=self.actor(hidden))
        if action is None:
            action = dist.sample()
        return action, dist.log_prob(action), dist.entropy(), self.critic(hidden)


def layer_conv(in_channels: int, out_channels: int, kernel: int, stride: int) -> nn.Conv2d:
    """Convolution with orthogonal weights (gain sqrt 2) and zero bias, as CleanRL's ``layer_init``."""
    conv = nn.Conv2d(in_channels, out_channels, kernel, stride)
    nn.init.orthogonal_(conv.weight, np.sqrt(2))
    nn.init.zeros_(conv.bias)
    return conv


def gae(s: PPOSettings, rewards, values, dones, next_value, next_done) -> torch.Tensor:
    """Advantages by GAE (Schulman et al., 2016), CleanRL's loop over time; ``dones[t]`` marks an obs that began an
    episode."""
    T = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    last = 0.0
    for t in reversed(range(T)):
        not_done = 1.0 - (next_done if t == T - 1 else dones[t + 1])
        following = next_value if t == T - 1 else values[t + 1]
        delta = rewards[t] + s.gamma * following * not_done - values[t]
        advantages[t] = last = delta + s.gamma * s.gae_lambda * not_done * last
    return advantages


def update(agent, optimizer, s: PPOSettings, b_obs, b_actions, b_log_probs, b_advantages, b_values) -> None:
    """The update phase: ``update_epochs`` shuffled passes of clipped-loss minibatch steps over the flat rollout."""
    batch_size = b_obs.shape[0]
    minibatch_size = batch_size // s.num_minibatches
    b_returns = b_advantages + b_values
    for _ in range(s.update_epochs):
        order = torch.randperm(batch_size, device=b_obs.device)
        for first in range(0, batch_size, minibatch_size):
            idx = order[first : first + minibatch_size]
            _, new_log_prob, entropy, new_value = agent.act(b_obs[idx], b_actions[idx])
            ratio = (new_log_prob - b_log_probs[idx]).exp()
            adv = b_advantages[idx]
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            policy_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - s.clip_coef, 1 + s.clip_coef)).mean()
            new_value = new_value.flatten()
            clipped = b_values[idx] + (new_value - b_values[idx]).clamp(-s.clip_coef, s.clip_coef)
            value_loss = 0.5 * torch.max((new_value - b_returns[idx]) ** 2, (clipped - b_returns[idx]) ** 2).mean()
            loss = policy_loss - s.ent_coef * entropy.mean() + s.vf_coef * value_loss
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(agent.parameters(), s.max_grad_norm)
            optimizer.step()


def loop(s: PPOSettings, agent: nn.Module, first_obs: torch.Tensor, step, total_timesteps: int, device):
    """CleanRL's ``ppo.py`` loop: rollouts into preallocated buffers, GAE, the update phase, lr annealing.

    ``step(action)`` steps the envs and returns ``(next_obs, reward, done)`` as float tensors on
    ``device``. Returns the env steps taken and the last rollout's ``dones`` ``[T, N]``.
    """
    optimizer = torch.optim.Adam(agent.parameters(), lr=s.lr, eps=1e-5)
    T, N = s.rollout_steps, s.num_envs
    batch_size = T * N
    obs_shape = first_obs.shape[1:]
    obs = torch.zeros((T, N, *obs_shape), device=device)
    actions = torch.zeros((T, N), dtype=torch.long, device=device)
    log_probs, rewards, dones, values = (torch.zeros((T, N), device=device) for _ in range(4))
    iterations = total_timesteps // batch_size
    next_obs, next_done = first_obs, torch.zeros(N, device=device)
    for iteration in range(1, iterations + 1):
        if s.anneal_lr:
            optimizer.param_groups[0]["lr"] = (1.0 - (iteration - 1.0) / iterations) * s.lr
        for t in range(T):
            obs[t] = next_obs
            dones[t] = next_done
            with torch.no_grad():
                action, log_prob, _, value = agent.act(next_obs)
            values[t] = value.flatten()
            actions[t] = action
            log_probs[t] = log_prob
            next_obs, rewards[t], next_done = step(action)
        with torch.no_grad():
            advantages = gae(s, rewards, values, dones, agent.value(next_obs).flatten(), next_done)
        update(agent, optimizer, s, obs.reshape(batch_size, *obs_shape), actions.reshape(-1), log_probs.reshape(-1),
               advantages.reshape(-1), values.reshape(-1))  # fmt: skip
    return iterations * batch_size, dones


def train(
    settings: PPOSettings, total_timesteps: int, seed: int, make_env: Callable[[], gym.Env] | None = None
) -> dict[str, float]:
    """Train for ``total_timesteps`` env steps; returns env steps, seconds and env-steps/s.

    ``make_env`` builds one env (default: ``gym.make(settings.env_id)`` with episode statistics); image observations
    (rank 3) get :class:`AtariAgent`, vectors :class:`Agent`.
    """
    s = settings
    torch.manual_seed(seed)
    np.random.seed(seed)
    if make_env is None:
        make_env = lambda: gym.wrappers.RecordEpisodeStatistics(gym.make(s.env_id))  # noqa: E731
    envs = gym.vector.SyncVectorEnv([make_env] * s.num_envs)
    obs_shape = envs.single_observation_space.shape
    n_actions = int(envs.single_action_space.n)
    agent = AtariAgent(n_actions, obs_shape[0]) if len(obs_shape) == 3 else Agent(int(np.prod(obs_shape)), n_actions)

    def step(action: torch.Tensor):
        next_obs, reward, terminated, truncated, _ = envs.step(action.numpy())
        done = torch.as_tensor(np.logical_or(terminated, truncated), dtype=torch.float32)
        return torch.as_tensor(next_obs, dtype=torch.float32), torch.as_tensor(reward, dtype=torch.float32), done

    first_obs = torch.as_tensor(envs.reset(seed=seed)[0], dtype=torch.float32)
    start = time.perf_counter()
    steps, _ = loop(s, agent, first_obs, step, total_timesteps, "cpu")
    seconds = time.perf_counter() - start
    envs.close()
    return {"env_steps": steps, "seconds": seconds, "env_steps_per_second": steps / seconds}


def train_batched(settings: PPOSettings, total_timesteps: int, seed: int, device: str = "cpu") -> dict[str, float]:
    """:func:`train` on a batched torch env (``rl_lightning.envs.TorchVectorEnv``): the no-framework tensor loop.

    The same CleanRL loop with the numpy conversions gone: actions, observations, rewards and
    the rollout buffer stay on ``device``, as a user of a GPU simulator writes it by hand
    (CleanRL's ``ppo_continuous_action_isaacgym.py``). Ended episodes count as done (CleanRL's
    reading of truncation), GAE is the same loop over time. Returns as :func:`train`, plus
    ``episode_length``: the last rollout's env steps per episode end.
    """
    from rl_lightning.envs import TorchVectorEnv

    s = settings
    torch.manual_seed(seed)
    envs = TorchVectorEnv(s.env_id, s.num_envs, device=device, seed=seed)
    obs_shape = envs.single_observation_space.shape
    agent = Agent(int(np.prod(obs_shape)), int(envs.single_action_space.n)).to(device)

    def step(action: torch.Tensor):
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        return next_obs, reward, (terminated | truncated).float()

    first_obs = envs.reset(seed=seed)[0]
    start = time.perf_counter()
    steps, dones = loop(s, agent, first_obs, step, total_timesteps, device)
    seconds = time.perf_counter() - start
    # Mean episode length over the last rollout (steps per episode end): a learning check, read once.
    length = dones.numel() / max(1.0, float(dones.sum()))
    return {"env_steps": steps, "seconds": seconds, "env_steps_per_second": steps / seconds, "episode_length": length}


if __name__ == "__main__":
    print(train(PPOSettings(), 20480, seed=0))
