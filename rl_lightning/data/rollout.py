"""The rollout loop: on-policy experience as ``[T, N]`` tensors, one rollout per Trainer epoch.

One iteration of :class:`RolloutDataset` steps the :class:`~rl_lightning.envs.EnvGroup` ``rollout_steps`` (``T``) times
with the acting policy and yields the rollout as one ``TensorDict`` of batch ``[T, N]``, on the envs' device.
Feed-forward, recurrent and device-resident collection are this one loop: the policy acts as ``act(obs, state,
episode_start) -> (action, log_prob, value, state)``, with ``state`` ``None`` for a feed-forward policy (its
``initial_state``), and the envs hand back tensors whatever steps them.

What the rollout holds (the algorithm computes advantages from it; ``PPO.training_step``):

- ``obs``, ``action``, ``log_prob``, ``value``, ``reward``, ``terminated``, ``truncated``;
- ``episode_start``: the step begins an episode (the policy zeroes its state there);
- ``next_value``: the value of the observation each step reached: ``value[t + 1]``, the value of
  the last observation for the last step, and, where the time limit truncated an episode, the
  value of its true final observation (with the state the policy had after the step), so a
  return bootstraps from where the episode was cut, never from the next episode's start;
- ``state`` (a policy with memory): the state each step acted from, ``[T, N, ...]``.

No host read per step: the positions of truncated episodes are read once, after the loop.
"""

from __future__ import annotations

import torch
from tensordict import TensorDict
from torch.utils.data import IterableDataset

from rl_lightning.checks import check_positive_int
from rl_lightning.data.collection import CollectionMetrics, DataCounters, timer
from rl_lightning.data.protocol import RolloutPolicy
from rl_lightning.envs import EnvGroup
from rl_lightning.faults import interrupt_request


class RolloutDataset(IterableDataset):
    """Rollout-backed dataset: each ``iter()`` collects one rollout and yields it.

    Args:
        envs: The training envs.
        policy: The acting policy (:class:`~rl_lightning.data.protocol.RolloutPolicy`).
        rollout_steps: Steps per env per rollout.
        counters: Shared progress counters (owned by the data module).
        reset_seed: Seed of the envs' first reset.
        world_size: Ranks stepping their own envs (scales the step count).
    """

    #: Wait for the device before each phase clock reading (``PhaseTimer(synchronize=True)``): on CUDA,
    #: kernels run asynchronously and their time lands in whichever phase next waits.
    synchronize_timing: bool = False

    def __init__(
        self,
        envs: EnvGroup,
        policy: RolloutPolicy,
        rollout_steps: int,
        counters: DataCounters,
        reset_seed: int,
        world_size: int = 1,
    ):
        super().__init__()
        check_positive_int(rollout_steps=rollout_steps)
        self.envs, self.policy, self.rollout_steps = envs, policy, rollout_steps
        self.counters, self.reset_seed, self.world_size = counters, reset_seed, world_size
        self.last_collection: CollectionMetrics | None = None
        #: The policy's state for the envs' current step and which of them begin an episode there
        #: (not checkpointed: a resumed run starts its episodes afresh).
        self.state = None
        self.episode_start: torch.Tensor | None = None

    def __len__(self) -> int:
        return 1

    def __iter__(self):
        yield self.collect()

    @torch.no_grad()
    def collect(self) -> TensorDict:
        """Step the envs ``rollout_steps`` times with the policy.

        Returns:
            The rollout, a ``TensorDict`` of batch ``[rollout_steps, num_envs]`` on the envs' device
            (keys: see the module).
        """
        envs, policy, T = self.envs, self.policy, self.rollout_steps
        device = next(policy.parameters()).device  # where the policy acts: observations go there
        clock = timer(device, self.synchronize_timing)  # the acting device's queued kernels, CPU envs or not
        start = clock()
        if envs.obs is None:
            envs.reset(seed=self.reset_seed)
            self.state = policy.initial_state(envs.num_envs, device)
            self.episode_start = torch.ones(envs.num_envs, dtype=torch.bool, device=envs.device)
        keys = ("obs", "final_obs", "action", "log_prob", "value", "reward", "terminated", "truncated", "episode_start")
        rows, states = [], [self.state]  # rows: one tuple of the keys' tensors per step
        env_seconds = inference_seconds = 0.0
        # The steps in inference mode: no version counters or view tracking (acting on 4 CartPoles 73 against 81 us
        # under no_grad, python -m benchmarks.ppo_step_costs); their tensors are stacked below, outside it, into
        # ordinary ones that the update may differentiate through.
        with torch.inference_mode():
            for _ in range(T):
                # A signal stops the rollout here; its steps are not counted, so a resumed run spends the
                # budget exactly once (callbacks/interrupt.py).
                interrupt_request.check()
                obs = envs.obs
                t0 = clock()
                start_d = self.episode_start.to(device)
                action, log_prob, value, self.state = policy.act(obs.to(device), self.state, start_d)
                t1 = clock()
                step = envs.step(action)
                env_seconds += clock() - t1
                inference_seconds += t1 - t0
                rows.append((obs, step.final_obs, action, log_prob, value, step.reward, step.terminated,
                             step.truncated, self.episode_start))  # fmt: skip
                self.episode_start = step.done  # where an episode ended, the next step begins one
                states.append(self.state)
        t0 = clock()
        columns = {key: torch.stack(column) for key, column in zip(keys, zip(*rows, strict=True), strict=True)}
        rollout = TensorDict(columns, [T, envs.num_envs], device=envs.device)
        final_obs = rollout.pop("final_obs")
        # V(s_T) from the state the next rollout starts with; V(final obs) of truncated episodes from the state
        # after their cut step (the one that would have read that observation): one host read, of where they are.
        last = policy.value(envs.obs.to(device), self.state, self.episode_start.to(device)).to(envs.device)
        next_value = torch.cat([rollout["value"][1:], last.unsqueeze(0)])
        cut = (rollout["truncated"] & ~rollout["terminated"]).nonzero(as_tuple=True)
        stacked = None if self.state is None else torch.stack(states).to(envs.device)  # [T + 1, N, ...]
        if cut[0].numel():
            after = None if stacked is None else stacked[1:][cut].to(device)
            no_start = torch.zeros(cut[0].numel(), dtype=torch.bool, device=device)
            next_value[cut] = policy.value(final_obs[cut].to(device), after, no_start).to(next_value)
        rollout["next_value"] = next_value
        if stacked is not None:
            rollout["state"] = stacked[:-1]
        inference_seconds += clock() - t0
        steps = T * envs.num_envs * self.world_size
        self.counters.env_steps += steps
        self.counters.iterations += 1
        self.last_collection = CollectionMetrics(envs.pop_stats(), steps, clock() - start, env_seconds,
                                                 inference_seconds)  # fmt: skip
        return rollout
