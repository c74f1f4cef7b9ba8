"""Cost of the Nature CNN per call with images in channels-last memory against torch's default NCHW layout.

    python -m benchmarks.conv_layout [--repeats 5] [--threads 1]

``MultiInputEncoder`` on Breakout's observations (4x84x84 uint8 frame stacks) under a
linear head, as PPO's update runs it: forward and backward of a minibatch (``--batches``,
PPO's 256 at CleanRL's ``ppo_atari.py`` settings, DQN's 32) and the forward of acting
(8 envs, no gradients). Each with ``EncoderSettings.channels_last`` on and off, alternating.
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from benchmarks.timing import alternate, print_table
from rl_lightning.nets.encoders import MultiInputEncoder

SPACE = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)


def variants(batches: list[int]) -> dict[str, callable]:
    """One call per variant: ``<what> <batch> channels_last|nchw`` (``EncoderSettings.channels_last`` on or off)."""
    torch.manual_seed(0)
    encoder = MultiInputEncoder(SPACE)
    head = nn.Linear(encoder.features_dim, 5)
    images = {b: torch.randint(0, 256, (b, *SPACE.shape), dtype=torch.uint8) for b in (*batches, 8)}

    def gradient_step(batch: int, on: bool):
        def step():
            encoder.channels_last = on
            encoder.zero_grad(set_to_none=True)
            head(encoder(images[batch])).sum().backward()

        return step

    def act(on: bool):
        def step():
            encoder.channels_last = on
            with torch.no_grad():
                head(encoder(images[8].float().contiguous(memory_format=torch.channels_last) if on else images[8]))

        return step

    out = {}
    for batch in batches:
        for on in (True, False):
            out[f"forward+backward {batch} {'channels_last' if on else 'nchw'}"] = gradient_step(batch, on)
    for on in (True, False):
        out[f"acting forward 8 {'channels_last' if on else 'nchw'}"] = act(on)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batches", type=int, nargs="+", default=[256, 32])
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    medians = print_table(alternate(variants(args.batches), args.repeats, steps=8, warmup=2))
    for name in medians:
        if name.endswith(" channels_last"):
            nchw = name[: -len("channels_last")] + "nchw"
            print(f"{name[: -len(' channels_last')]}: channels_last / nchw time {medians[name] / medians[nchw]:.2f}")


if __name__ == "__main__":
    main()
