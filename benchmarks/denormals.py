"""What flushing denormal floats buys off-policy training on the CPU, ours and Stable-Baselines3's alike.

Usage::

    python -m benchmarks.denormals [--repeats 3] [--quick]

The algorithms flush denormals to zero while a fit runs (``flush_denormal=True``,
``rl_lightning/callbacks/denormals.py``).
This runs, alternating within every repeat, at the off-policy suite's settings
(``benchmarks/run.py --suites offpolicy``): DQN on CartPole-v1 at RL-Zoo's chunks and SAC on
Pendulum-v1 at 1/1, each as

- ``rl_lightning``: as shipped (flushed);
- ``rl_lightning_unflushed``: the same with only the flush left out;
- ``stable_baselines3``: as shipped (torch's default, denormals computed in full);
- ``stable_baselines3_flushed``: with ``torch.set_flush_denormal(True)`` around ``learn``, what
  a user of that library can set by hand.

It reports gradient-steps/s and the mean time of one optimizer step inside our fit (the
step is where denormals accumulate: Adam's second moments), medians over repeats.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
import warnings
from collections.abc import Callable, Iterator
from unittest import mock

import torch

from benchmarks import sac_vs_sb3, throughput
from benchmarks.run import alternate, machine, paired, summarize, table

RL_ZOO_DQN = (256, 128)


@contextlib.contextmanager
def flushed() -> Iterator[None]:
    """``torch.set_flush_denormal(True)`` for the block (on the calling thread), off again after."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def ours(run: Callable[..., dict], flush: bool) -> Callable[[int], dict]:
    """Our run, timing every optimizer step; ``flush=False`` runs it with ``flush_denormal=False`` (nothing else
    changes)."""
    from lightning.pytorch.core.optimizer import LightningOptimizer

    def timed(seed: int) -> dict:
        spent = []
        step = LightningOptimizer.step

        def timed_step(optimizer, *args, **kwargs):
            start = time.perf_counter()
            out = step(optimizer, *args, **kwargs)
            spent.append(time.perf_counter() - start)
            return out

        with contextlib.ExitStack() as stack:
            stack.enter_context(mock.patch.object(LightningOptimizer, "step", timed_step))
            result = run(seed, flush_denormal=flush)
        return {**result, "optimizer_step_ms": 1e3 * statistics.fmean(spent)}

    return timed


def sb3(run: Callable[[int], dict], flush: bool) -> Callable[[int], dict]:
    """Stable-Baselines3's run, with the thread flushing denormals or not."""

    def timed(seed: int) -> dict:
        with flushed() if flush else contextlib.nullcontext():
            return run(seed)

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="shorter runs (for checking, not for quoting)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    dqn_steps, sac_steps = (2_048, 600) if args.quick else (8_192, 2_100)
    suites = {
        f"DQN, CartPole-v1, RL-Zoo's chunks ({dqn_steps} env steps)": (
            lambda seed, **extra: throughput.dqn_ours(dqn_steps, seed, RL_ZOO_DQN, **extra),
            lambda seed: throughput.dqn_sb3(dqn_steps, seed, RL_ZOO_DQN),
        ),
        f"SAC, Pendulum-v1, 1/1 ({sac_steps} env steps)": (
            lambda seed, **extra: sac_vs_sb3.ours(sac_steps, seed, **extra),
            lambda seed: sac_vs_sb3.sb3(sac_steps, seed),
        ),
    }
    lines = [f"Measured on {machine()['cpu']}, 1 torch thread, {args.repeats} alternating repeats."]
    for title, (our_run, their_run) in suites.items():
        print(title, flush=True)
        results = alternate(
            {
                "rl_lightning": ours(our_run, flush=True),
                "rl_lightning_unflushed": ours(our_run, flush=False),
                "stable_baselines3": sb3(their_run, flush=False),
                "stable_baselines3_flushed": sb3(their_run, flush=True),
            },
            args.repeats,
        )
        baselines = ["rl_lightning_unflushed", "stable_baselines3", "stable_baselines3_flushed"]
        lines += [
            f"\n### {title}",
            table("run", summarize(results, "gradient_steps_per_second"), "gradient-steps/s", baselines),
        ]
        lines.append(paired(results, "gradient_steps_per_second", "rl_lightning", "rl_lightning_unflushed"))
        lines.append(paired(results, "gradient_steps_per_second", "stable_baselines3_flushed", "stable_baselines3"))
        steps = summarize(results, "optimizer_step_ms")
        lines.append(
            "Optimizer step inside our fit, median of the runs' means: "
            + ", ".join(f"{name} {s['median']:.3f} ms" for name, s in steps.items())
            + "."
        )
    print("\n".join(lines))


if __name__ == "__main__":
    main()
