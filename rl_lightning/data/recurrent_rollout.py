"""Rollouts for a recurrent policy: the state carried through every step, reset where episodes end, stored at the start.

:class:`RecurrentRolloutDataset` is :class:`~rl_lightning.data.rollout.RolloutDataset` for a
policy with memory (:class:`~rl_lightning.nets.recurrent.RecurrentActorCritic`). At each step
the policy acts with the state it carried from the previous step and the flag of which envs
begin an episode there (the first step of the run, and every step after a terminated or
truncated one), which zeroes their state before the step. The state at the rollout's first
step is kept with the rollout, so the update replays each env's sequence from the very state
the rollout acted with (CleanRL's ``ppo_atari_lstm.py``: ``initial_lstm_state``); the state
at its end carries into the next rollout.

The update's minibatches are whole env sequences (CleanRL's scheme: minibatches over envs,
:func:`env_minibatch_plan`), so ``num_minibatches`` must divide ``num_envs``. With truncated
backpropagation through time (``UpdatePlan.bptt_length`` = ``L``) the rollout also keeps the
state at every ``L``-th step, and each env's ``[T]`` steps become ``T / L`` sequences of ``L``
steps, each replayed from the state the rollout acted with at its first step (sb3-contrib's
``RecurrentPPO`` keeps the state of every step for the same purpose); the minibatches are then
over these ``num_envs * T / L`` sequences.

A truncated episode's return bootstraps from V(final obs) computed with the state the policy
had after the cut step (the state that would have read that observation), as the value a
feed-forward rollout takes from the final observation alone.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning.data.collection import to_env_action
from rl_lightning.data.rollout import RolloutDataset, UpdatePlan, compute_gae
from rl_lightning.envs.obs import map_obs, stack_rows, to_tensor
from rl_lightning.faults import interrupt_request


def check_env_minibatches(plan: UpdatePlan, num_envs: int, rollout_steps: int) -> None:
    """Raise a ``ValueError`` naming the fix unless the sequences split evenly: ``bptt_length`` divides
    ``rollout_steps`` and ``num_minibatches`` divides the number of sequences (``num_envs`` without truncation)."""
    length = plan.bptt_length
    if length is not None and rollout_steps % length:
        raise ValueError(
            f"bptt_length={length} does not divide rollout_steps={rollout_steps}: each env's rollout is cut into "
            "sequences of bptt_length steps. Choose a divisor: PPO(bptt_length=...) (Hydra: algo.bptt_length=...), "
            "or change data.rollout_steps."
        )
    sequences = num_envs * (rollout_steps // length if length else 1)
    if sequences % plan.num_minibatches:
        what = (
            f"num_envs={num_envs}"
            if not length
            else f"the {sequences} sequences (num_envs x rollout_steps / bptt_length)"
        )
        raise ValueError(
            f"num_minibatches={plan.num_minibatches} does not divide {what}: a recurrent policy's minibatches are "
            "whole sequences. Choose a divisor: PPO(num_minibatches=...) (Hydra: algo.num_minibatches=...)."
        )


def split_sequences(batch: TensorDict, states: torch.Tensor, length: int) -> tuple[TensorDict, torch.Tensor]:
    """A ``[T, N]`` rollout as ``[length, (T / length) * N]`` sequences, with the state each begins from.

    Sequence ``c * N + n`` is env ``n``'s steps ``c * length`` to ``(c + 1) * length - 1``;
    ``states`` ``[T / length, C, K, N, H]`` are the states the rollout acted with at those first steps.
    """
    T, N = batch.batch_size
    chunks = T // length

    def cut(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(chunks, length, N, *x.shape[2:]).transpose(0, 1).reshape(length, chunks * N, *x.shape[2:])

    sequences = batch.apply(cut, batch_size=[length, chunks * N])
    C, K, _, H = states.shape[1:]
    return sequences, states.permute(1, 2, 0, 3, 4).reshape(C, K, chunks * N, H)


def env_minibatch_plan(num_envs: int, plan: UpdatePlan, generator: torch.Generator) -> torch.Tensor:
    """The update phase's sequence minibatches: ``[update_epochs * num_minibatches, num_envs // num_minibatches]``
    env indices, every ``num_minibatches`` rows one permutation of the envs (drawn from ``generator``)."""
    orders = [torch.randperm(num_envs, generator=generator) for _ in range(plan.update_epochs)]
    return torch.stack(orders).view(-1, num_envs // plan.num_minibatches)


class RecurrentRolloutDataset(RolloutDataset):
    """Rollouts of a recurrent policy; each ``iter()`` collects one and yields it with its first state.

    Args: as :class:`~rl_lightning.data.rollout.RolloutDataset`; ``policy`` has ``initial_state``,
    ``act(obs, state, episode_start)`` and ``value(obs, state, episode_start)``.
    """

    def __init__(self, envs, policy, rollout_steps, plan, *args, **kwargs):
        check_env_minibatches(plan, envs.num_envs, rollout_steps)
        super().__init__(envs, policy, rollout_steps, plan, *args, **kwargs)
        #: The policy's state for the envs' current step, and which of them begin an episode there.
        self.state: torch.Tensor | None = None
        self.episode_start: torch.Tensor | None = None

    def set_learner(self, policy, plan: UpdatePlan) -> None:
        """As ``RolloutDataset.set_learner``, with sequence minibatches checked."""
        check_env_minibatches(plan, self.envs.num_envs, self.rollout_steps)
        super().set_learner(policy, plan)

    def __iter__(self):
        """Collect one rollout and yield it once.

        Yields:
            ``{"rollout": TensorDict [rollout_steps, num_envs] (the keys of RolloutDataset's, plus
            ``episode_start``), "initial_state": [C, K, num_envs, H], "minibatches": LongTensor
            [update_epochs * num_minibatches, num_envs // num_minibatches]}``: row ``k`` holds the env
            indices of minibatch ``k``. With ``bptt_length`` = ``L``, the rollout is ``[L, S]`` for
            ``S = num_envs * rollout_steps / L`` sequences (:func:`split_sequences`), the state and
            the minibatches are over those ``S``.
        """
        batch, states = self.collect()
        initial_state = states[0]  # whole env sequences: the state before the rollout's first step
        if self.plan.bptt_length is not None:
            batch, initial_state = split_sequences(batch, states, self.plan.bptt_length)
        yield {
            "rollout": batch,
            "initial_state": initial_state,
            "minibatches": env_minibatch_plan(batch.batch_size[1], self.plan, self.generator),
        }

    @torch.no_grad()
    def collect(self) -> tuple[TensorDict, torch.Tensor]:
        """Step the envs ``rollout_steps`` times, carrying the policy's state, and compute advantages.

        Returns:
            ``(batch, states)``: a ``[rollout_steps, num_envs]`` ``TensorDict`` (``obs``,
            ``action``, ``log_prob``, ``value``, ``advantage``, ``return``, ``episode_start``) on
            the CPU, and the states ``[S, C, K, num_envs, H]`` the rollout acted with at its first
            step and (with ``bptt_length``) at every ``bptt_length``-th one after it.
        """
        clock = time.perf_counter
        start = clock()
        policy, envs, T, N = self.policy, self.envs, self.rollout_steps, self.envs.num_envs
        self.apply_pending_obs()  # as RolloutDataset.collect: after the update that used the previous rollout
        sync_seconds = clock() - start
        device = next(policy.parameters()).device
        if envs.obs is None or self.state is None:  # a fresh run, or a resumed one (states are not checkpointed)
            if envs.obs is None:
                envs.reset(seed=self.reset_seed)
            self.state = policy.initial_state(N, device)
            self.episode_start = torch.ones(N, dtype=torch.bool, device=device)
        every = self.plan.bptt_length or T
        kept = []  # the state before every `every`-th step (zeroing where an episode begins is the step's own)
        obs = envs.obs
        steps_obs, actions, log_prob, value, starts = [], [], [], [], []
        reward = np.empty((T, N), dtype=np.float32)
        terminated = np.empty((T, N), dtype=bool)
        truncated = np.empty((T, N), dtype=bool)
        cut = []  # truncated steps: (t, i, final obs, the state after the step)
        env_seconds = inference_seconds = 0.0
        for t in range(T):
            interrupt_request.check()  # a signal stops the rollout here, uncounted (callbacks/interrupt.py)
            obs_t = to_tensor(obs, device)
            steps_obs.append(obs_t)
            starts.append(self.episode_start)
            if t % every == 0:
                kept.append(self.state)  # act returns a new tensor: this one stays as it is
            t0 = clock()
            action, lp, v, self.state = policy.act(obs_t, self.state, self.episode_start)
            t1 = clock()
            step = envs.step(to_env_action(action, envs.action_space))
            t2 = clock()
            inference_seconds += t1 - t0
            env_seconds += t2 - t1
            actions.append(action)
            log_prob.append(lp)
            value.append(v)
            reward[t], terminated[t], truncated[t] = step.reward, step.terminated, step.truncated
            for i in np.flatnonzero(step.truncated):
                cut.append((t, int(i), step.final_obs[i], self.state[:, :, i]))
            # Where an episode ended, the next step begins one: its state is zeroed then.
            self.episode_start = torch.as_tensor(step.terminated | step.truncated, device=device)
            obs = step.obs
        t0 = clock()
        log_prob, value = torch.stack(log_prob).float().cpu(), torch.stack(value).float().cpu()
        # V(s_T) with the state the next rollout starts from; V(final obs) of cut episodes with their own.
        end_values = policy.value(to_tensor(obs, device), self.state, self.episode_start).float().cpu()
        next_value = torch.cat([value[1:], end_values.unsqueeze(0)])
        if cut:
            final = to_tensor(stack_rows([c[2] for c in cut], obs), device)
            states = torch.stack([c[3] for c in cut], 2)
            no_start = torch.zeros(len(cut), dtype=torch.bool, device=device)
            for (t, i, *_), v in zip(cut, policy.value(final, states, no_start).float().cpu(), strict=True):
                next_value[t, i] = v
        inference_seconds += clock() - t0
        t1 = clock()
        reward, terminated, truncated = map(torch.from_numpy, (reward, terminated, truncated))
        advantage, returns = compute_gae(
            reward, value, next_value, terminated, truncated, self.plan.gamma, self.plan.gae_lambda
        )
        advantage_seconds = clock() - t1
        obs_steps = map_obs(lambda *rows: torch.stack(rows).cpu(), *steps_obs)
        obs_td = TensorDict(obs_steps, batch_size=[T, N]) if isinstance(obs_steps, dict) else obs_steps
        flat_obs = obs_td.flatten(0, 1)
        self.close_rollout(flat_obs, value, returns, rollout_seconds=clock() - start, env_seconds=env_seconds,
                           inference_seconds=inference_seconds, advantage_seconds=advantage_seconds,
                           sync_seconds=sync_seconds)  # fmt: skip
        batch = TensorDict(
            {
                "obs": obs_td,
                "action": torch.stack(actions).cpu(),
                "log_prob": log_prob,
                "value": value,
                "advantage": advantage,
                "return": returns,
                "episode_start": torch.stack(starts).cpu(),
            },
            batch_size=[T, N],
        )
        return batch, torch.stack(kept).cpu()
