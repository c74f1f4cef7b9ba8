"""The rollout loop: collect on-policy experience, compute GAE, plan PPO's minibatches.

One iteration of :class:`RolloutDataset` is one Trainer epoch: a rollout of
``rollout_steps x num_envs`` transitions with the current policy, yielded as a single
batch together with ``update_epochs x num_minibatches`` shuffled index sets (the same count
on every rank, so DDP never waits on a rank that ran out of minibatches). PPO's
``training_step`` runs the whole update phase on it: one Lightning batch per rollout
instead of one per minibatch saves Lightning's per-batch machinery (``docs/algos/ppo.md``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict
from torch.utils.data import IterableDataset
from torchrl.objectives.value.functional import generalized_advantage_estimate, vec_generalized_advantage_estimate

from rl_lightning.checks import check_positive_int, check_unit_interval
from rl_lightning.data.collection import CollectionMetrics, DataCounters, to_env_action
from rl_lightning.data.protocol import OnPolicyLearner, RolloutPolicy
from rl_lightning.envs import EnvGroup
from rl_lightning.envs.obs import concat, empty_obs, map_obs, stack_rows, step_view, to_tensor, write_obs
from rl_lightning.faults import interrupt_request

#: Rows per batched forward pass when a rollout's log-probabilities and values are computed.
EVAL_CHUNK = 8192

#: Up to this many envs GAE runs torchrl's vectorized form, beyond it torchrl's loop over time
#: (same values to float rounding, tests/data/test_rollout.py): the vectorized form costs per
#: env, the loop per step (the crossing is measured in docs/algos/ppo.md, "GAE at the rollout's shape").
VEC_GAE_MAX_ENVS = 8


@dataclasses.dataclass(frozen=True)
class UpdatePlan:
    """The on-policy algorithm's settings a rollout is prepared with: GAE's, and the minibatch plan's.

    They are learning settings, so the algorithm holds them (``PPO(gamma=..., ...)``, as SAC
    and DQN hold ``gamma``) and hands them to the rollout stream through
    :class:`~rl_lightning.data.protocol.OnPolicyLearner`; the data module says only how
    experience is gathered.

    Args:
        gamma: Discount factor.
        gae_lambda: GAE's lambda.
        update_epochs: Passes over each rollout.
        num_minibatches: Minibatches per pass; must divide ``rollout_steps * num_envs``.
        bptt_length: A recurrent policy's truncated backpropagation through time: the update
            replays sequences of this many steps, each from the state the rollout acted with
            there (``None``: whole rollouts). Must divide ``rollout_steps``.
    """

    gamma: float = 0.99
    gae_lambda: float = 0.95
    update_epochs: int = 4
    num_minibatches: int = 4
    bptt_length: int | None = None

    def __post_init__(self):
        check_unit_interval(gamma=self.gamma, gae_lambda=self.gae_lambda)
        check_positive_int(update_epochs=self.update_epochs, num_minibatches=self.num_minibatches)
        if self.bptt_length is not None:
            check_positive_int(bptt_length=self.bptt_length)

    def check_rollout(self, rollout_steps: int, num_envs: int) -> None:
        """Raise a ``ValueError`` naming the fix unless ``num_minibatches`` divides the rollout."""
        if (rollout_steps * num_envs) % self.num_minibatches:
            raise ValueError(
                f"num_minibatches={self.num_minibatches} does not divide the rollout of rollout_steps x num_envs = "
                f"{rollout_steps} x {num_envs} = {rollout_steps * num_envs} transitions; choose a divisor so every "
                "minibatch has the same size: PPO(num_minibatches=...) (Hydra: algo.num_minibatches=...; CLI: "
                "--model.num_minibatches)."
            )


def take_plan_settings(learner: OnPolicyLearner, settings: Mapping[str, Any]) -> None:
    """Give ``learner`` these plan settings: its ``update_plan`` and, for a LightningModule, its saved settings.

    For the learning settings of earlier spellings (a data module's deprecated arguments, an
    earlier version's checkpoint), so logs and checkpoints say what ran.
    """
    learner.update_plan = dataclasses.replace(learner.update_plan, **settings)
    hparams = getattr(learner, "hparams", None)
    if hparams is not None:
        hparams.update(settings)


def compute_gae(
    reward: torch.Tensor,
    value: torch.Tensor,
    next_value: torch.Tensor,
    terminated: torch.Tensor,
    truncated: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation (Schulman et al., 2016, eq. 16) through torchrl.

    torchrl's vectorized form for up to ``VEC_GAE_MAX_ENVS`` envs, its loop over time beyond
    (whichever is faster at that shape).

    ``next_value[t]`` must be the value of the true next state of step ``t``: for a
    truncated step, the value of the final observation the time limit cut off (so the
    return bootstraps from it); for a terminated step it is ignored (no bootstrap). The
    advantage recursion stops at either kind of episode end.

    Args:
        reward: Shape ``[T, N]``.
        value: ``V(s_t)``, shape ``[T, N]``.
        next_value: ``V(s_{t+1})``, shape ``[T, N]``.
        terminated: Shape ``[T, N]``, bool.
        truncated: Shape ``[T, N]``, bool.
        gamma: Discount factor.
        gae_lambda: GAE's lambda.

    Returns:
        ``(advantage, return)``, each ``[T, N]``, with ``return = advantage + value``.
    """
    gae = vec_generalized_advantage_estimate if reward.shape[1] <= VEC_GAE_MAX_ENVS else generalized_advantage_estimate
    advantage, returns = gae(
        gamma,
        gae_lambda,
        value.unsqueeze(-1),
        next_value.unsqueeze(-1),
        reward.unsqueeze(-1),
        (terminated | truncated).unsqueeze(-1),
        terminated.unsqueeze(-1),
        time_dim=0,
    )
    return advantage.squeeze(-1), returns.squeeze(-1)


def minibatch_plan(size: int, plan: UpdatePlan, generator: torch.Generator) -> torch.Tensor:
    """The update phase's minibatches of a rollout of ``size`` transitions: ``[update_epochs * num_minibatches,
    size // num_minibatches]`` indices, every ``num_minibatches`` rows one permutation (drawn from ``generator``)."""
    orders = [torch.randperm(size, generator=generator) for _ in range(plan.update_epochs)]
    return torch.stack(orders).view(-1, size // plan.num_minibatches)


def explained_variance(value: torch.Tensor, returns: torch.Tensor) -> float:
    """``1 - Var[return - value] / Var[return]``: 1 is a perfect critic, <= 0 a useless one."""
    var = returns.var()
    return float("nan") if var == 0 else float(1 - (returns - value).var() / var)


class RolloutDataset(IterableDataset):
    """Rollout-backed dataset: each ``iter()`` collects a rollout and yields its minibatches.

    Args:
        envs: The training ``EnvGroup``.
        policy: The acting policy (see :class:`RolloutPolicy`).
        rollout_steps: Steps per env per rollout.
        plan: The algorithm's GAE and minibatch settings.
        counters: Shared progress counters (owned by the data module).
        generator: Torch generator for minibatch shuffling (saved in checkpoints).
        reset_seed: Called with the counters to seed the first reset of the envs.
        world_size: Number of ranks stepping their own envs; scales the step count.
    """

    def __init__(
        self,
        envs: EnvGroup,
        policy: RolloutPolicy,
        rollout_steps: int,
        plan: UpdatePlan,
        counters: DataCounters,
        generator: torch.Generator,
        reset_seed: int,
        world_size: int = 1,
    ):
        super().__init__()
        self.envs = envs
        self.policy = policy
        self.rollout_steps = rollout_steps
        plan.check_rollout(rollout_steps, envs.num_envs)
        self.plan = plan
        self.counters = counters
        self.generator = generator
        self.reset_seed = reset_seed
        self.world_size = world_size
        self.pending_obs: torch.Tensor | None = None
        self.last_collection: CollectionMetrics | None = None

    def set_learner(self, policy: RolloutPolicy, plan: UpdatePlan) -> None:
        """Act with ``policy`` and prepare rollouts by ``plan`` from now on (a data module reused by another fit)."""
        plan.check_rollout(self.rollout_steps, self.envs.num_envs)
        self.policy, self.plan = policy, plan

    def __len__(self) -> int:
        return 1

    def __iter__(self):
        """Collect one rollout and yield it once, with the shuffled minibatch plan of its update phase.

        Yields:
            ``{"rollout": TensorDict [rollout_steps * num_envs], "minibatches": LongTensor
            [update_epochs * num_minibatches, minibatch_size]}``: row ``k`` holds the rollout
            indices of minibatch ``k``; every ``num_minibatches`` rows are one permutation.
        """
        batch = self.collect()
        yield {"rollout": batch, "minibatches": minibatch_plan(batch.shape[0], self.plan, self.generator)}

    def apply_pending_obs(self, device: torch.device | str | None = None) -> None:
        """Move the policy's observation statistics by the last rollout's observations (kept by
        :meth:`close_rollout`), once, before the next rollout acts; ``device``: where the policy is,
        for observations that a checkpoint restored on the CPU."""
        if self.pending_obs is not None:
            self.policy.update_normalizer(self.pending_obs if device is None else self.pending_obs.to(device))
            self.pending_obs = None

    def close_rollout(self, flat_obs, value: torch.Tensor, returns: torch.Tensor, **seconds: float) -> None:
        """A collected rollout's bookkeeping: what the next normalizer update reads (an encoder's vector keys: no
        images), the counters, and :attr:`last_collection` (``seconds``: its ``*_seconds`` fields)."""
        select = getattr(self.policy, "normalizer_input", None)
        self.pending_obs = select(flat_obs) if select is not None else flat_obs
        steps = self.rollout_steps * self.envs.num_envs * self.world_size
        self.counters.env_steps += steps
        self.counters.iterations += 1
        self.last_collection = CollectionMetrics(
            episodes=self.envs.pop_stats(),
            explained_variance=explained_variance(value.flatten(), returns.flatten()),
            env_steps=steps,
            **seconds,
        )

    @staticmethod
    def _evaluate(
        policy: RolloutPolicy, obs: torch.Tensor, actions: torch.Tensor, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities and values of a rollout's actions, in chunks of ``EVAL_CHUNK`` rows (bounded memory)."""
        log_prob, value = [], []
        for first in range(0, obs.shape[0], EVAL_CHUNK):
            lp, _, v = policy.evaluate_actions(
                obs[first : first + EVAL_CHUNK].to(device), actions[first : first + EVAL_CHUNK]
            )
            log_prob.append(lp.float().cpu())
            value.append(v.float().cpu())
        return torch.cat(log_prob), torch.cat(value)

    @torch.no_grad()  # no_grad, not inference_mode: the rollout tensors are training inputs
    def collect(self) -> TensorDict:
        """Step the envs ``rollout_steps`` times with the policy and compute advantages.

        Returns:
            A flat ``TensorDict`` of ``rollout_steps * num_envs`` transitions with keys
            ``obs``, ``action``, ``log_prob``, ``value``, ``advantage``, ``return``.
        """
        clock = time.perf_counter
        start = clock()
        policy, envs, T, N = self.policy, self.envs, self.rollout_steps, self.envs.num_envs
        # Observation statistics move once per rollout, after the update that used the
        # previous rollout: acting and learning on a rollout see the same normalization.
        self.apply_pending_obs()
        sync_seconds = clock() - start
        env_seconds = inference_seconds = 0.0
        device = next(policy.parameters()).device
        if envs.obs is None:
            envs.reset(seed=self.reset_seed)
        # Per-step results go into numpy arrays (an indexed numpy write costs well under a
        # microsecond, an indexed torch write several) and become tensors once, below.
        obs = envs.obs
        obs_buf = empty_obs(envs.observation_space, (T, N))  # float32, or a dict of arrays; uint8 images stay uint8
        obs_steps = map_obs(torch.from_numpy, obs_buf)  # the same memory as tensors
        dict_obs = isinstance(obs_buf, dict)
        reward = np.empty((T, N), dtype=np.float32)
        terminated = np.empty((T, N), dtype=bool)
        truncated = np.empty((T, N), dtype=bool)
        actions = []
        # A shared encoder: action, log-probability and value from one forward per step
        # (ActorCritic.evaluates_per_step); else one batched pass after the loop.
        per_step = bool(getattr(policy, "evaluates_per_step", False))
        step_log_prob, step_value = [], []
        final_steps, final_obs = [], []  # where episodes were truncated, and their final observations
        for t in range(T):
            # A signal stops the rollout here; its steps are not counted, so a resumed run
            # spends the budget exactly once (callbacks/interrupt.py).
            interrupt_request.check()
            if dict_obs:
                write_obs(obs_buf, t, obs)
                step_obs = step_view(obs_steps, t, device)
            else:  # the same for one array, without the per-key walk (this runs every env step)
                obs_buf[t] = obs
                step_obs = torch.from_numpy(obs_buf[t]).to(device)  # numpy's indexing is the cheaper
            t0 = clock()
            if per_step:
                action, lp, v = policy.act(step_obs)
                step_log_prob.append(lp)
                step_value.append(v)
            else:
                action = policy.explore(step_obs, self.counters.env_steps)
            t1 = clock()
            step = envs.step(to_env_action(action, envs.action_space))
            t2 = clock()
            inference_seconds += t1 - t0
            env_seconds += t2 - t1
            actions.append(action)
            reward[t] = step.reward
            terminated[t] = step.terminated
            truncated[t] = step.truncated
            for i in np.flatnonzero(step.truncated):
                final_steps.append((t, i))
                final_obs.append(step.final_obs[i])
            obs = step.obs
        t0 = clock()
        # Log-probabilities and values of the whole rollout in one batched pass instead of
        # one per env step: the acting policy has not changed since it chose these actions.
        obs_t = TensorDict(obs_steps, batch_size=[T, N]) if isinstance(obs_steps, dict) else obs_steps
        flat_obs = obs_t.flatten(0, 1)
        flat_actions = torch.stack(actions).reshape(T * N, *actions[0].shape[1:])
        if per_step:
            log_prob, value = torch.stack(step_log_prob).float().cpu(), torch.stack(step_value).float().cpu()
        else:
            log_prob, value = self._evaluate(policy, flat_obs, flat_actions, device)
            log_prob, value = log_prob.view(T, N), value.view(T, N)
        # V(s_T) of the last observations, and V(final obs) where the time limit cut an
        # episode: the return bootstraps from the true final observation, never from the
        # first observation of the next episode.
        ends = to_tensor(concat(obs, stack_rows(final_obs, obs)), device)
        end_values = policy.value(ends).cpu()
        t1 = clock()
        inference_seconds += t1 - t0
        reward, terminated, truncated = (
            torch.from_numpy(reward),
            torch.from_numpy(terminated),
            torch.from_numpy(truncated),
        )
        next_value = torch.cat([value[1:], end_values[:N].unsqueeze(0)])
        for k, (t, i) in enumerate(final_steps):
            next_value[t, i] = end_values[N + k]
        advantage, returns = compute_gae(
            reward, value, next_value, terminated, truncated, self.plan.gamma, self.plan.gae_lambda
        )
        advantage_seconds = clock() - t1
        self.close_rollout(flat_obs, value, returns, rollout_seconds=clock() - start, env_seconds=env_seconds,
                           inference_seconds=inference_seconds, advantage_seconds=advantage_seconds,
                           sync_seconds=sync_seconds)  # fmt: skip
        batch = TensorDict(
            {
                "obs": obs_t,
                "action": flat_actions.cpu().view(T, N, *actions[0].shape[1:]),
                "log_prob": log_prob,
                "value": value,
                "advantage": advantage,
                "return": returns,
            },
            batch_size=[T, N],
        )
        return batch.reshape(T * N)
