"""The tensor path's off-policy stream: a batched env on the policy's device feeding a replay buffer on that device.

:class:`DeviceReplayDataset` is :class:`~rl_lightning.data.replay.ReplayDataset` for a
:class:`~rl_lightning.envs.tensor_group.TensorEnvGroup` (``ReplayDataModule(backend="torch")``;
Hydra ``env.backend=torch``). Each vector step is one ``explore`` of the whole batch (uniform
random actions, drawn on the device, before ``learning_starts``), one batched env step, and one
write of ``num_envs`` transitions into a torchrl ``TensorDictReplayBuffer`` whose
``LazyTensorStorage`` lives on the env's device (``device="auto"``: where the first batch is).
``next_obs`` is the step's ``final_obs``: the observation the step reached before a restart, so
a truncated episode bootstraps from where the time limit cut it. Only ``terminated`` stops
bootstrapping, as on the gymnasium path.

The chunks (``train_freq`` / ``gradient_steps``, or ``utd_ratio``'s smallest ones), the epoch
bookkeeping and the counters are ``ReplayDataset``'s. With many envs and ``utd_ratio =
1 / num_envs`` each batched step of transitions is a chunk followed by one gradient step
(``conf/experiment/sac_batched.yaml``).
"""

from __future__ import annotations

import time

import gymnasium as gym
import torch
from tensordict import TensorDict

from rl_lightning.data.replay import ReplayDataset
from rl_lightning.envs.tensor_group import TensorEnvGroup
from rl_lightning.faults import interrupt_request


class DeviceReplayDataset(ReplayDataset):
    """Off-policy collection from a batched tensor env, transitions stored on its device.

    Args: as :class:`~rl_lightning.data.replay.ReplayDataset`, with ``envs`` a
    :class:`~rl_lightning.envs.tensor_group.TensorEnvGroup` on the policy's device and
    ``buffer`` a uniform ``TensorDictReplayBuffer`` (``make_replay_buffer(..., device="auto")``).
    """

    envs: TensorEnvGroup

    def __init__(self, envs: TensorEnvGroup, *args, action_seed: int = 0, **kwargs):
        super().__init__(envs, *args, action_seed=action_seed, **kwargs)
        self.action_generator = torch.Generator(device=envs.device)
        self.action_generator.manual_seed(action_seed)

    def random_action(self) -> torch.Tensor:
        """Uniform actions ``[num_envs, *action_shape]`` on the device: a ``Box`` between its bounds, a
        ``Discrete`` index from 0 (the policy's indices; ``env_action`` adds ``start``)."""
        space, n, device = self.envs.action_space, self.envs.num_envs, self.envs.device
        if isinstance(space, gym.spaces.Discrete):
            return torch.randint(int(space.n), (n,), generator=self.action_generator, device=device)
        low = torch.as_tensor(space.low, dtype=torch.float32, device=device)
        high = torch.as_tensor(space.high, dtype=torch.float32, device=device)
        unit = torch.rand((n, *space.shape), generator=self.action_generator, device=device)
        return low + unit * (high - low)

    @torch.no_grad()
    def take_step(self) -> TensorDict:
        """One batched step: act (random before ``learning_starts``), step; the ``num_envs`` transitions to store."""
        interrupt_request.check()  # a signal stops collection between env steps (callbacks/interrupt.py)
        envs = self.envs
        if envs.obs is None:
            envs.reset(seed=self.reset_seed)
        obs = envs.obs
        self.sync_actor()
        t0 = time.perf_counter()
        if self.counters.env_steps < self.learning_starts:
            action = self.random_action()
        else:
            action = self.policy.explore(obs, self.counters.env_steps)
        t1 = time.perf_counter()
        step = envs.step(envs.env_action(action))
        self._inference_seconds += t1 - t0
        self._env_seconds += time.perf_counter() - t1
        transitions = TensorDict(
            {
                "obs": obs,
                "action": action,
                "reward": step.reward.float(),
                "terminated": step.terminated,
                "next_obs": step.final_obs,
            },
            batch_size=[envs.num_envs],
            device=envs.device,
        )
        self.counters.env_steps += envs.num_envs * self.world_size
        return transitions
