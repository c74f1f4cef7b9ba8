"""Memory of an Atari replay buffer: ours (plain and compact) against Stable-Baselines3's ``ReplayBuffer``.

    python -m benchmarks.replay_memory [--capacity 10000] [--num-envs 1]

Each buffer is built for 4x84x84 uint8 frame stacks and ``Discrete(4)`` actions (Breakout's
spaces after CleanRL's wrapper stack), given one vector step so its storage is allocated
for the whole capacity (the buffer allocates at the first write; SB3's arrays
at construction), and measured by the bytes of the arrays it holds, divided by the capacity.
The table also states what ``transition_bytes`` predicts (the figure the replay data module
logs) and projects each buffer to 100k transitions. The compact buffer's final observations
(one per episode end) are not in the figure: there are none after one step.
"""

from __future__ import annotations

import argparse
import json
import warnings

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rl_lightning.data.compact_replay import CompactReplayBuffer
from rl_lightning.data.replay import make_replay_buffer, transition_bytes

OBS_SPACE = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACTION_SPACE = gym.spaces.Discrete(4)


def ours(capacity: int, num_envs: int, optimize_memory_usage: bool) -> int:
    """Bytes held by our buffer of ``capacity`` transitions after one vector step."""
    buffer = make_replay_buffer(capacity, 32, optimize_memory_usage=optimize_memory_usage, num_envs=num_envs)
    obs = torch.randint(0, 256, (num_envs, *OBS_SPACE.shape), dtype=torch.uint8)
    fields = {
        "obs": obs,
        "action": torch.zeros(num_envs, dtype=torch.int64),
        "reward": torch.zeros(num_envs),
        "terminated": torch.zeros(num_envs, dtype=torch.bool),
    }
    if isinstance(buffer, CompactReplayBuffer):
        buffer.extend(TensorDict(fields, batch_size=[num_envs]), {})
        return buffer.storage.bytes() + buffer.sampleable.numel() * buffer.sampleable.element_size()
    fields["next_obs"] = obs.clone()
    buffer.extend(TensorDict(fields, batch_size=[num_envs]))
    return buffer.storage.bytes()


def sb3(capacity: int, num_envs: int, optimize_memory_usage: bool) -> int:
    """Bytes of the arrays Stable-Baselines3's ``ReplayBuffer`` of ``capacity`` transitions allocates."""
    from stable_baselines3.common.buffers import ReplayBuffer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its "not enough memory" check
        buffer = ReplayBuffer(
            capacity,
            OBS_SPACE,
            ACTION_SPACE,
            n_envs=num_envs,
            optimize_memory_usage=optimize_memory_usage,
            handle_timeout_termination=not optimize_memory_usage,  # SB3 refuses both together
        )
    arrays = [buffer.observations, buffer.actions, buffer.rewards, buffer.dones, buffer.timeouts]
    if not optimize_memory_usage:
        arrays.append(buffer.next_observations)
    return sum(a.nbytes for a in arrays)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capacity", type=int, default=10_000)
    parser.add_argument("--num-envs", type=int, default=1)
    args = parser.parse_args()
    rows = []
    for name, measure, compact in [
        ("rl_lightning, plain", ours, False),
        ("rl_lightning, optimize_memory_usage", ours, True),
        ("SB3 ReplayBuffer", sb3, False),
        ("SB3 ReplayBuffer, optimize_memory_usage", sb3, True),
    ]:
        per = measure(args.capacity, args.num_envs, compact) / args.capacity
        predicted = transition_bytes(OBS_SPACE, ACTION_SPACE, compact) if measure is ours else None
        rows.append({"buffer": name, "bytes_per_transition": per, "predicted": predicted, "gb_100k": per * 1e5 / 1e9})
    print("| buffer | bytes per transition (measured) | `transition_bytes` | 100k transitions |")
    print("| --- | --- | --- | --- |")
    for r in rows:
        predicted = f"{r['predicted']:,}" if r["predicted"] is not None else "-"
        print(f"| {r['buffer']} | {r['bytes_per_transition']:,.1f} | {predicted} | {r['gb_100k']:.2f} GB |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
