"""The tensor path's rollout loop: a batched env on the policy's device, and a rollout that never leaves it.

:class:`DeviceRolloutDataset` is :class:`~rl_lightning.data.rollout.RolloutDataset` for a
:class:`~rl_lightning.envs.tensor_group.TensorEnvGroup` (``env.backend=torch``, or a
simulator's vector env of tensors). The buffers are preallocated on the device; each step
is one policy forward (``act``: action, log-probability, value) and one batched env step,
written into them by index. GAE (torchrl's, :func:`~rl_lightning.data.rollout.compute_gae`),
the minibatch plan and the update stay on the device. Per rollout a fixed number of values
cross to the host, however many steps it has: the positions of truncated episodes (to
bootstrap their returns from the true final observations), the episode statistics
(:meth:`TensorEnvGroup.pop_stats`) and the explained variance; ``tests/data/test_device_rollout.py``
counts them.

With thousands of envs a step's fixed costs (Python, kernel launches) are shared by the
whole batch, which is where the speed comes from (``benchmarks/device_envs.py``).
"""

from __future__ import annotations

import time

import torch
from tensordict import TensorDict

from rl_lightning.data.rollout import RolloutDataset, compute_gae, minibatch_plan
from rl_lightning.envs.tensor_group import TensorEnvGroup
from rl_lightning.faults import interrupt_request


def _action_buffer(envs: TensorEnvGroup, shape: tuple[int, int]) -> torch.Tensor:
    """An empty ``[T, N, *action_shape]`` buffer in the dtype the policy's actions take (indices: int64)."""
    space = envs.action_space
    dtype = torch.float32 if space.dtype is not None and space.dtype.kind == "f" else torch.int64
    return torch.empty((*shape, *space.shape), dtype=dtype, device=envs.device)


def _clock(device: torch.device, synchronize: bool):
    """``time.perf_counter``; with ``synchronize`` on a CUDA device, read after the device's queued kernels finish."""
    if not (synchronize and device.type == "cuda"):
        return time.perf_counter

    def clock() -> float:
        torch.cuda.synchronize(device)
        return time.perf_counter()

    return clock


class DeviceRolloutDataset(RolloutDataset):
    """Rollouts of a batched tensor env, kept on its device; each ``iter()`` collects one and yields it.

    The constructor, ``set_learner`` and ``__len__`` are :class:`~rl_lightning.data.rollout.RolloutDataset`'s;
    ``collect`` is this path's loop.

    Args: as :class:`~rl_lightning.data.rollout.RolloutDataset`, with ``envs`` a
    :class:`~rl_lightning.envs.tensor_group.TensorEnvGroup` on the policy's device.
    """

    envs: TensorEnvGroup
    #: Wait for the device's queued kernels before each phase clock reading (``PhaseTimer(synchronize=True)``):
    #: on CUDA, kernels run asynchronously and their time lands in whichever phase next waits. Off by default,
    #: as each wait costs a little throughput.
    synchronize_timing: bool = False

    def __iter__(self):
        """Collect one rollout and yield it with its minibatch plan (as ``RolloutDataset`` does), on the device."""
        batch = self.collect()
        yield {
            "rollout": batch,
            "minibatches": minibatch_plan(batch.shape[0], self.plan, self.generator).to(batch.device),
        }

    def _check_device(self) -> None:
        device = next(self.policy.parameters()).device
        if device != self.envs.device:
            raise ValueError(
                f"The policy is on {device} but the batched env lives on {self.envs.device}; the tensor path keeps "
                f"the rollout on one device. Train on {self.envs.device} (Trainer(accelerator=...)) or build the env "
                f"on {device}."
            )

    @torch.no_grad()  # no_grad, not inference_mode: the rollout tensors are training inputs
    def collect(self) -> TensorDict:
        """Step the envs ``rollout_steps`` times with the policy and compute advantages, on the device.

        Returns:
            A flat ``TensorDict`` of ``rollout_steps * num_envs`` transitions on the device, with the
            keys of ``RolloutDataset.collect``.
        """
        clock = _clock(self.envs.device, self.synchronize_timing)
        start = clock()
        self._check_device()
        policy, envs, T, N = self.policy, self.envs, self.rollout_steps, self.envs.num_envs
        # Observation statistics move once per rollout, after the update that used the previous one.
        self.apply_pending_obs(self.envs.device)  # a checkpoint's are on the CPU
        sync_seconds = clock() - start
        if envs.obs is None:
            envs.reset(seed=self.reset_seed)
        obs = envs.obs
        device = envs.device
        obs_buf = torch.empty((T, N, *obs.shape[1:]), dtype=obs.dtype, device=device)
        final_buf = torch.empty_like(obs_buf)  # what each step reached, before a restart
        actions = _action_buffer(envs, (T, N))
        log_prob, value, reward = (torch.empty((T, N), device=device) for _ in range(3))
        terminated, truncated = (torch.empty((T, N), dtype=torch.bool, device=device) for _ in range(2))
        env_seconds = inference_seconds = 0.0
        for t in range(T):
            interrupt_request.check()  # a signal stops the rollout here, uncounted (callbacks/interrupt.py)
            obs_buf[t] = obs
            t0 = clock()
            action, log_prob[t], value[t] = policy.act(obs)
            t1 = clock()
            step = envs.step(envs.env_action(action))
            t2 = clock()
            inference_seconds += t1 - t0
            env_seconds += t2 - t1
            actions[t] = action
            reward[t] = step.reward
            terminated[t] = step.terminated
            truncated[t] = step.truncated
            final_buf[t] = step.final_obs
            obs = step.obs
        t0 = clock()
        # V(s_T), and V(final obs) where the time limit cut an episode: the return bootstraps from
        # the true final observation, never from the next episode's first (one host read: where).
        next_value = torch.cat([value[1:], policy.value(obs).unsqueeze(0)])
        cut = (truncated & ~terminated).nonzero(as_tuple=True)
        next_value[cut] = policy.value(final_buf[cut]).to(next_value.dtype)
        t1 = clock()
        inference_seconds += t1 - t0
        advantage, returns = compute_gae(
            reward, value, next_value, terminated, truncated, self.plan.gamma, self.plan.gae_lambda
        )
        advantage_seconds = clock() - t1
        flat_obs = obs_buf.flatten(0, 1)
        self.close_rollout(flat_obs, value, returns, rollout_seconds=clock() - start, env_seconds=env_seconds,
                           inference_seconds=inference_seconds, advantage_seconds=advantage_seconds,
                           sync_seconds=sync_seconds)  # fmt: skip
        batch = TensorDict(
            {
                "obs": obs_buf,
                "action": actions,
                "log_prob": log_prob,
                "value": value,
                "advantage": advantage,
                "return": returns,
            },
            batch_size=[T, N],
            device=device,
        )
        return batch.reshape(T * N)
