"""``RecurrentActorCritic``: an LSTM or GRU core between the observation features and the policy and value heads.

For partially observed tasks (a single camera frame, a robot without velocity sensors, MiniGrid's Memory rooms) the
policy needs memory. The layout follows sb3-contrib's ``RecurrentPPO`` (``MlpLstmPolicy``): features (flattened and
normalized vectors, or the image / ``Dict`` encoder) -> a recurrent core -> the usual MLP heads; actor and critic share
one core (``shared_core=True``, as CleanRL's ``ppo_atari_lstm.py``) or have one each (sb3-contrib's default,
``shared_core=False``). The cores' weights are orthogonal with gain 1 and their biases 0 (CleanRL's
``ppo_atari_lstm.py``).

The recurrent state is one tensor ``[B, C, K, H]``, the env batch first (the data layer's contract,
:mod:`rl_lightning.data.protocol`): ``B`` the batch, ``C`` = 2 for an LSTM (``h``, ``c``) or 1 for a GRU (``h``), ``K``
the number of cores (1 or 2), ``H`` = ``recurrent_size``. A rollout stores it per step and env, and an export takes and
returns it as one input and one output. Where ``episode_start`` is true, the state is zeroed *before* the step, so the
first step of every episode starts from the initial state (CleanRL's ``get_states``: ``(1 - done) * state`` at every
step; sb3-contrib's ``_process_sequence``).
"""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import torch
from torch import nn

from rl_lightning.checks import check_one_of, check_positive_int
from rl_lightning.envs.obs import Obs, map_obs
from rl_lightning.nets.actor_critic import ActorCritic
from rl_lightning.nets.encoders import EncoderSettings
from rl_lightning.nets.mlp import mlp

CELLS = ("lstm", "gru")


def check_recurrent_settings(
    recurrent: bool, cell: str, recurrent_size: int, bptt_length: int | None, custom_heads: bool
) -> None:
    """Refuse, naming the fix, PPO's recurrent settings that do not go together (checked before any env is made)."""
    if recurrent and custom_heads:
        raise ValueError(
            "recurrent=True builds its own heads after the recurrent core; a custom actor or critic cannot be "
            "combined with it. Drop algo.actor / algo.critic, or set recurrent=false."
        )
    if recurrent:
        check_one_of(CELLS, " (Hydra: algo.cell=lstm)", cell=cell)
    if not recurrent and bptt_length is not None:
        raise ValueError(
            f"bptt_length={bptt_length} truncates the backpropagation through a recurrent core; this policy "
            "has none. Set recurrent=true (Hydra: algo.recurrent=true), or drop bptt_length."
        )
    check_positive_int(recurrent_size=recurrent_size)
    check_positive_int(bptt_length=bptt_length, none="None")


def _one_step(obs: Obs) -> Obs:
    """One step's observations ``[B, ...]`` as a sequence of one, ``[1, B, ...]`` (a dict's leaves each)."""
    return map_obs(lambda leaf: leaf.unsqueeze(0), obs)


def _core(cell: str, in_features: int, size: int) -> nn.RNNBase:
    core = (nn.LSTM if cell == "lstm" else nn.GRU)(in_features, size)
    for name, param in core.named_parameters():  # zero biases, orthogonal weights (CleanRL's ppo_atari_lstm.py)
        nn.init.constant_(param, 0.0) if "bias" in name else nn.init.orthogonal_(param, 1.0)
    return core


class RecurrentActorCritic(ActorCritic):
    """Policy and value networks with memory: ``ActorCritic``'s features and distributions around a recurrent core.

    Args:
        observation_space, action_space, hidden_sizes, normalize_obs, init_log_std, encoder:
            as :class:`~rl_lightning.nets.actor_critic.ActorCritic`; ``hidden_sizes`` are the
            heads' widths after the core.
        cell: ``"lstm"`` (default) or ``"gru"``.
        recurrent_size: Width of the recurrent state.
        shared_core: One core for actor and critic (``True``), or one each. A privileged critic
            (observation groups) reads other features than the actor, so it needs a core of its own.

    Raises:
        ValueError: Unknown ``cell``, a non-positive ``recurrent_size``, or a privileged critic on a shared core.
    """

    def __init__(
        self,
        observation_space: gym.Space,
        action_space: gym.Space,
        hidden_sizes: Sequence[int] = (64, 64),
        normalize_obs: bool = True,
        init_log_std: float = 0.0,
        encoder: EncoderSettings | dict | nn.Module | None = None,
        cell: str = "lstm",
        recurrent_size: int = 128,
        shared_core: bool = True,
    ):
        check_recurrent_settings(True, cell, recurrent_size, None, custom_heads=False)
        super().__init__(
            observation_space, action_space, hidden_sizes, None, None, normalize_obs, init_log_std, encoder
        )
        if shared_core and self.critic_encoder is not None:
            raise ValueError(
                "The critic reads observation keys the actor does not (algo.encoder.critic_keys), so it cannot share "
                "the actor's recurrent core: set shared_core=False (Hydra: algo.shared_core=false)."
            )
        self.cell, self.recurrent_size, self.shared_core = cell, recurrent_size, shared_core
        widths = (self.obs_dim,) if shared_core else (self.obs_dim, self.critic_dim)
        self.cores = nn.ModuleList(_core(cell, width, recurrent_size) for width in widths)
        act_dim = self.actor[-1].out_features
        self.actor = mlp(recurrent_size, hidden_sizes, act_dim, out_gain=0.01)
        self.critic = mlp(recurrent_size, hidden_sizes, 1, out_gain=1.0)
        self._dtype_ref = [next(self.parameters())]  # the heads were replaced: point at a live parameter

    def initial_state(self, batch_size: int, device: torch.device | str | None = None) -> torch.Tensor:
        """The state every episode starts from: zeros ``[batch_size, C, K, recurrent_size]``."""
        parts = 2 if self.cell == "lstm" else 1
        device = device if device is not None else self._dtype_ref[0].device
        return torch.zeros(batch_size, parts, len(self.cores), self.recurrent_size, device=device)

    def _run_core(self, k: int, x: torch.Tensor, state: torch.Tensor, starts: torch.Tensor):
        """Core ``k`` over ``x`` ``[T, B, F]`` from ``state`` ``[B, C, H]``, zeroing it where ``starts`` ``[T, B]``.

        Returns the outputs ``[T, B, H]`` and the state after the last step ``[B, C, H]``.
        """
        core, outputs = self.cores[k], []
        keep = (~starts).to(x.dtype)[..., None, None]  # [T, B, 1, 1]
        T = x.shape[0]
        # The core runs once per stretch of steps in which no env begins an episode after its first
        # step (one host read of where they begin), rather than once per step: the same values
        # (zeroing a state only at a stretch's first step), a fraction of the calls.
        cuts = [0, *(starts[1:].any(1).nonzero().flatten() + 1).tolist(), T] if T > 1 else [0, T]
        for first, end in zip(cuts[:-1], cuts[1:], strict=True):
            state = state * keep[first]
            parts = state.transpose(0, 1).contiguous()  # [C, B, H]
            lstm = self.cell == "lstm"  # its state is (h, c), a GRU's h
            out, hidden = core(x[first:end], (parts[0:1], parts[1:2]) if lstm else parts[0:1])
            state = (torch.cat(hidden) if lstm else hidden).transpose(0, 1)
            outputs.append(out)
        return torch.cat(outputs), state

    def _heads_input(
        self, obs: torch.Tensor, state: torch.Tensor | None, starts: torch.Tensor, critic: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """Actor and critic inputs ``[T, B, H]`` and the next state, for observations ``[T, B, ...]``.

        Without ``critic``, the critic's own core (``shared_core=False``) does not run and its state passes
        through unchanged (acting needs the actor only; the critic input is then ``None``).
        """
        T, B = starts.shape
        state = self.initial_state(B, starts.device) if state is None else state
        flat = map_obs(lambda leaf: leaf.flatten(0, 1), obs)  # a dict's leaves, too (an exported policy's)
        x = self.features(flat)
        inputs = [x.reshape(T, B, -1)]
        if len(self.cores) == 2 and critic:
            inputs.append(self.critic_features(flat, x).reshape(T, B, -1))
        outs, states = zip(*(self._run_core(k, xk, state[:, :, k], starts) for k, xk in enumerate(inputs)), strict=True)
        if len(states) < len(self.cores):
            states = (*states, state[:, :, 1])  # the critic's core did not run: it keeps its state
        return outs[0], outs[-1] if critic else None, torch.stack(states, 2)

    def act(
        self,
        obs: torch.Tensor,
        state: torch.Tensor | None,
        episode_start: torch.Tensor,
        deterministic: bool = False,
        value: bool = True,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """One step for a batch: observations ``[B, ...]``, the state before it, which envs begin an episode ``[B]``.

        Returns:
            ``(action, log_prob, value, next_state)``: as ``ActorCritic.act`` (``value=False``: the
            critic, and its own core, do not run), plus the state to pass with the next step.
        """
        starts = episode_start.unsqueeze(0)
        actor_in, critic_in, next_state = self._heads_input(_one_step(obs), state, starts, critic=value)
        action, log_prob = self._action_and_log_prob(self.actor(actor_in[0]), deterministic)
        return action, log_prob, self.critic(critic_in[0]).squeeze(-1) if value else None, next_state

    def value(self, obs: torch.Tensor, state: torch.Tensor | None, episode_start: torch.Tensor) -> torch.Tensor:
        """State values ``[B]`` of one step (the bootstrap value after a rollout's last step)."""
        _, critic_in, _ = self._heads_input(_one_step(obs), state, episode_start.unsqueeze(0))
        return self.critic(critic_in[0]).squeeze(-1)

    def evaluate_actions(
        self, obs: torch.Tensor, action: torch.Tensor, episode_start: torch.Tensor, state: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Log-probability, entropy and value ``[T, B]`` of a rollout's actions, replayed from its first state.

        Args:
            obs: ``[T, B, *obs_shape]``, the env sequences of a minibatch (``B`` sequences).
            action: ``[T, B, ...]`` the actions taken.
            episode_start: ``[T, B]``: where an episode began (the state is zeroed there).
            state: ``[B, C, K, H]``: the state the rollout acted with at each sequence's first step.
        """
        T, B = episode_start.shape
        actor_in, critic_in, _ = self._heads_input(obs, state, episode_start)
        out = self.actor(actor_in.reshape(T * B, -1))
        log_prob, entropy = self._log_prob_entropy(out, action.reshape(T * B, *action.shape[2:]))
        value = self.critic(critic_in.reshape(T * B, -1)).squeeze(-1)
        return log_prob.reshape(T, B), entropy.reshape(T, B), value.reshape(T, B)
