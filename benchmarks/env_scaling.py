"""Raw environment env-steps/s against ``num_envs``, sync and async: the ceiling of any training loop.

    python -m benchmarks.env_scaling [--quick] [--out DIR]

Random actions (pre-sampled, so sampling is not timed) step a plain gymnasium vector env
(``SyncVectorEnv`` or ``AsyncVectorEnv`` of ``gym.make(env_id)``, ``SAME_STEP`` autoreset as in
``rl_lightning.envs.EnvGroup``). Construction, reset and 10 warm-up steps are not timed. Each point
is then sized by time, not steps, so 64 async workers on a small machine cost no more than one env;
it reports the median env-steps/s (vector steps x num_envs / seconds) of 3 timed windows.

Why: a training loop at the same ``num_envs`` and vectorization steps these same envs, so it can never
be faster than this; its env-steps/s over this number is the share of its time spent in the envs.
``library_env_steps_per_second`` measures the same through ``EnvGroup`` (object sets and episode
statistics included); its ratio to the raw number is the cost of the library's wrapper.

Writes ``DIR/env_scaling.json`` (records and machine info) and ``DIR/env_scaling.png``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

#: Start method of async workers, as in rl_lightning.envs.env_group (fork on Linux).
ASYNC_CONTEXT = "fork" if sys.platform.startswith("linux") else None
NUM_ACTIONS = 64  # pre-sampled action batches, cycled
WARMUP_STEPS = 10
WINDOWS = 3  # the median of a few windows shrugs off a burst of load from others on a shared machine


def _measure(
    env_id: str,
    num_envs: int,
    vectorization: str,
    steps: int | None,
    seconds: float | None,
    seed: int = 0,
    library: bool = False,
) -> dict:
    """Build, reset and warm up the envs (untimed), then time ``steps`` vector steps or ``seconds`` seconds.

    Returns:
        A record: ``env_id``, ``vectorization``, ``num_envs``, ``library``, ``env_steps_per_second``
        (median of the windows), ``window_env_steps_per_second``, ``startup_seconds`` (build and reset) and
        ``start_method`` (of async workers; see :func:`library_env_steps_per_second`).
    """
    if library:
        from rl_lightning.envs import EnvGroup  # not timed as start-up: the first import takes seconds
    start = time.perf_counter()
    if library:
        group = EnvGroup(env_id, num_envs, vectorization=vectorization, seed=seed)
        group.reset(seed)
        envs, step = group.env, group.step  # the gymnasium backend's vector env: its batched spaces, close
    else:
        env_fns = [lambda: gym.make(env_id) for _ in range(num_envs)]
        if vectorization == "sync":
            envs = gym.vector.SyncVectorEnv(env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
        else:
            # Forked like EnvGroup's workers: once torchrl is imported the default is spawn,
            # whose workers re-import torch and take seconds each to start.
            envs = gym.vector.AsyncVectorEnv(
                env_fns, autoreset_mode=gym.vector.AutoresetMode.SAME_STEP, context=ASYNC_CONTEXT
            )
        envs.reset(seed=seed)
        step = envs.step
    startup = time.perf_counter() - start
    try:
        envs.action_space.seed(seed)
        actions = np.stack([envs.action_space.sample() for _ in range(NUM_ACTIONS)])
        for i in range(WARMUP_STEPS):
            step(actions[i % NUM_ACTIONS])
        rates, n = [], 0
        for _ in range(WINDOWS):
            count, window_start = 0, time.perf_counter()
            while True:
                step(actions[n % NUM_ACTIONS])
                n, count = n + 1, count + 1
                elapsed = time.perf_counter() - window_start
                if elapsed >= seconds / WINDOWS if seconds is not None else count >= max(1, steps // WINDOWS):
                    break
            rates.append(count * num_envs / elapsed)
    finally:
        envs.close()
    return dict(
        env_id=env_id,
        vectorization=vectorization,
        num_envs=num_envs,
        library=library,
        startup_seconds=startup,
        env_steps_per_second=statistics.median(rates),
        window_env_steps_per_second=rates,
        start_method=(ASYNC_CONTEXT or multiprocessing.get_start_method()) if vectorization == "async" else None,
    )


def raw_env_steps_per_second(
    env_id: str, num_envs: int, vectorization: str = "sync", steps: int = 1500, seed: int = 0
) -> float:
    """env-steps/s of a plain gymnasium vector env of ``gym.make(env_id)`` under random actions.

    Args:
        env_id: Gymnasium id, e.g. ``"CartPole-v1"``.
        num_envs: Number of environments stepped together.
        vectorization: ``"sync"`` (one process) or ``"async"`` (a worker process per env).
        steps: Timed vector steps (after 10 untimed warm-up steps), in 3 windows.
        seed: Seed of the resets and of the action space.

    Returns:
        Median over the windows of vector steps x ``num_envs`` / seconds.
    """
    return _measure(env_id, num_envs, vectorization, steps, None, seed)["env_steps_per_second"]


def library_env_steps_per_second(
    env_id: str, num_envs: int, vectorization: str = "sync", steps: int = 1500, seed: int = 0
) -> float:
    """As :func:`raw_env_steps_per_second`, through ``rl_lightning.envs.EnvGroup`` (``reset``, ``step``).

    Async start-up (untimed) depends on import order: importing ``rl_lightning`` imports torchrl, whose
    ``__init__`` sets the process's multiprocessing start method to ``spawn`` unless it is already fixed (the
    first ``AsyncVectorEnv`` fixes it, to ``fork`` on Linux). Spawned workers re-import the library, seconds
    each; raw async envs built after that are spawned too (a fraction of a second each). Stepping is unaffected.
    """
    return _measure(env_id, num_envs, vectorization, steps, None, seed, library=True)["env_steps_per_second"]


def scaling_curves(
    env_ids: Sequence[str] = ("CartPole-v1", "HalfCheetah-v5"),
    num_envs_list: Sequence[int] = (1, 2, 4, 8, 16, 32, 64),
    vectorizations: Sequence[str] = ("sync", "async"),
    seconds_per_point: float = 1.0,
    quick: bool = False,
) -> list[dict]:
    """Raw env-steps/s for every (env, vectorization, num_envs), each point sized by time.

    Args:
        env_ids: Gymnasium ids.
        num_envs_list: Numbers of envs; ``quick`` keeps only 1, 4, 16 and 64 of them.
        vectorizations: Any of ``"sync"``, ``"async"``.
        seconds_per_point: Timed seconds per point, after build, reset and warm-up; ``quick`` caps it at 0.5.
        quick: Fewer, shorter points, for a smoke run.

    Returns:
        One record per point, as ``_measure`` returns it.
    """
    if quick:
        num_envs_list = [n for n in num_envs_list if n in (1, 4, 16, 64)]
        seconds_per_point = min(seconds_per_point, 0.5)
    return [
        _measure(env_id, n, vec, None, seconds_per_point)
        for env_id in env_ids
        for vec in vectorizations
        for n in num_envs_list
    ]


def plot_scaling(records: list[dict], path: str) -> None:
    """Save a PNG with one subplot per env: env-steps/s against num_envs, one line per vectorization."""
    import matplotlib

    matplotlib.use("Agg")  # no display on benchmark machines
    import matplotlib.pyplot as plt

    env_ids = list(dict.fromkeys(r["env_id"] for r in records))
    fig, axes = plt.subplots(1, len(env_ids), figsize=(5 * len(env_ids), 4), squeeze=False)
    for ax, env_id in zip(axes[0], env_ids, strict=True):
        ours = [r for r in records if r["env_id"] == env_id]
        for vec in dict.fromkeys(r["vectorization"] for r in ours):
            points = sorted((r["num_envs"], r["env_steps_per_second"]) for r in ours if r["vectorization"] == vec)
            ax.plot([n for n, _ in points], [sps for _, sps in points], marker="o", label=vec)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ns = sorted({r["num_envs"] for r in ours})
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.set(title=env_id, xlabel="num_envs", ylabel="env-steps/s")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter points (well under a minute)")
    parser.add_argument("--out", default="runs/env_scaling", help="output directory")
    args = parser.parse_args()
    torch.set_num_threads(1)  # nothing here uses torch; pinned so the recorded setting matches the other benchmarks
    start = time.perf_counter()
    records = scaling_curves(quick=args.quick)
    total = time.perf_counter() - start
    machine = {
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
        "torch_threads": torch.get_num_threads(),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"machine": machine, "quick": args.quick, "total_seconds": total, "records": records}
    (out / "env_scaling.json").write_text(json.dumps(result, indent=2))
    plot_scaling(records, str(out / "env_scaling.png"))
    print(f"Raw env-steps/s, random actions, {machine['cpu_count']} CPUs, curve took {total:.0f} s")
    print("| env | vectorization | num_envs | env-steps/s | window range | start-up s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in records:
        low, high = min(r["window_env_steps_per_second"]), max(r["window_env_steps_per_second"])
        print(
            f"| {r['env_id']} | {r['vectorization']} | {r['num_envs']} | {r['env_steps_per_second']:.0f} "
            f"| {low:.0f}-{high:.0f} | {r['startup_seconds']:.2f} |"
        )
    print(f"Wrote {out / 'env_scaling.json'} and {out / 'env_scaling.png'}", file=sys.stderr)


if __name__ == "__main__":
    main()
