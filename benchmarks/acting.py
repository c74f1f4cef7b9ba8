"""Cost of acting once per env step: ``ActorCritic.explore`` on its numpy path against the torch path.

    python -m benchmarks.acting [--repeats 5] [--steps 2000] [--envs 4] [--fits 6] [--threads 1]

Per call: sampled actions for ``--envs`` CartPole observations (4x64x64x2 tanh actor, no
observation normalization: CleanRL's ``ppo.py`` network), through ``explore`` without
gradients (the numpy forward of ``rl_lightning/fast/numpy_actor.py`` and the Gumbel-max draw
on numpy views) and through the torch path it replaces (``sample(actor(features(obs)))``,
what ``explore`` runs with the fast path off). Both draw from torch's generator alike.

In a fit: PPO at CleanRL's settings (``benchmarks/throughput.py``), ``--fits`` pairs of
16,384-step fits with the numpy path on and off, the order alternating; reported as the
median of the per-pair speedups.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from benchmarks.timing import alternate, print_table
from rl_lightning import fast
from rl_lightning.nets import ActorCritic


def per_call(repeats: int, steps: int, envs: int) -> dict[str, float]:
    """Milliseconds per ``explore``-sized call on each path; prints the table."""
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), normalize_obs=False)
    obs = torch.from_numpy(np.random.default_rng(0).normal(size=(envs, 4)).astype(np.float32))

    def numpy_path():
        with torch.no_grad():
            policy.explore(obs)

    def torch_path():
        with torch.no_grad():
            policy.sample(policy.actor(policy.features(obs)))

    times = alternate({"explore (numpy path)": numpy_path, "torch path": torch_path}, repeats, steps)
    return print_table(times)


def in_fit(pairs: int) -> list[float]:
    """Speedup of PPO fits with the numpy path over fits without it, one per pair of back-to-back fits."""
    from benchmarks.throughput import ppo_ours

    numpy_explore = fast.explore
    speedups = []
    ppo_ours(2048, 0)  # warm-up
    try:
        for pair in range(pairs):
            seconds = {}
            for on in (True, False) if pair % 2 == 0 else (False, True):
                fast.explore = numpy_explore if on else (lambda policy, obs: None)
                start = time.perf_counter()
                ppo_ours(16_384, pair)
                seconds[on] = time.perf_counter() - start
            speedups.append(seconds[False] / seconds[True])
    finally:
        fast.explore = numpy_explore
    return speedups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--fits", type=int, default=6, help="pairs of PPO fits (0: skip)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, numpy {np.__version__}, threads {args.threads}, {args.envs} envs")
    medians = per_call(args.repeats, args.steps, args.envs)
    ratio = medians["torch path"] / medians["explore (numpy path)"]
    print(f"torch path / numpy path per call: {ratio:.2f}x")
    result = {"medians_ms": medians, "per_call_ratio": ratio}
    if args.fits:
        speedups = in_fit(args.fits)
        print(
            f"PPO fit speedup per pair: {', '.join(f'{s:.2f}' for s in speedups)}; "
            f"median {statistics.median(speedups):.2f}x"
        )
        result["fit_speedups"] = speedups
    print(json.dumps(result))


if __name__ == "__main__":
    main()
