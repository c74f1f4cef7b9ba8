"""Soak test: a long PPO run on CartPole through the Hydra app, with resident memory sampled as it goes.

    python -m benchmarks.soak                     # 30 minutes (the reliability target: growth under 5%)
    python -m benchmarks.soak --minutes 1         # a quick look
    python -m benchmarks.soak --minutes 30 -- logger=[csv] env.num_envs=16   # extra overrides after --

The run is ``train.py +experiment=ppo`` as a user would start it (default loggers: W&B
offline and CSV; evaluation of both object sets every ``eval_interval`` epochs; interval
checkpoints with ``keep_last``), with an unreachable step budget and Lightning's
``max_time`` ending it. A callback samples the process's resident set size (VmRSS) every
``--sample-seconds``; the report compares the first sample after ``--warmup-minutes``
(imports, the first evaluation and checkpoint, allocator pools filled) with the last, and
counts the files in the checkpoint directory at the end (disk use stays bounded).

Writes ``<out>/soak.json`` with every sample and prints a summary line.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import lightning.pytorch as pl

from rl_lightning.launch.app import train

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def rss_bytes() -> int:
    """Resident set size of this process (Linux ``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status (the soak benchmark reads Linux's /proc).")


class MemorySampler(pl.Callback):
    """Records ``(seconds, env_steps, rss_bytes)`` at the end of a training epoch, at most every ``every`` seconds.

    Samples are few (every 10 s by default: 180 in 30 minutes), so the record itself does not grow the process.
    """

    #: The sampler of the latest run (Hydra instantiates it from the callbacks group).
    latest: MemorySampler | None = None

    def __init__(self, every: float = 10.0):
        MemorySampler.latest = self
        self.every = every
        self.samples: list[tuple[float, int, int]] = []
        self._start = time.perf_counter()
        self._next = 0.0

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        now = time.perf_counter() - self._start
        if now >= self._next:
            self.samples.append((now, int(pl_module.env_steps), rss_bytes()))
            self._next = now + self.every


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--warmup-minutes", type=float, default=1.0)
    parser.add_argument("--sample-seconds", type=float, default=10.0)
    parser.add_argument("--out", default="bench_results")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. logger=[csv]")
    args = parser.parse_args(argv)

    from hydra import compose, initialize_config_dir

    run_dir = tempfile.mkdtemp(prefix="soak_")
    seconds = int(args.minutes * 60)
    overrides = [
        "+experiment=ppo",
        "algo.total_timesteps=1000000000",
        "algo.save_interval=20",
        "env.eval_interval=20",
        f"+trainer.max_time={{seconds:{seconds}}}",
        "test_after_fit=false",
        f"run_dir={run_dir}",
        "+callbacks.memory_sampler._target_=benchmarks.soak.MemorySampler",
        f"+callbacks.memory_sampler.every={args.sample_seconds}",
        *args.overrides,
    ]
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    start = time.perf_counter()
    summary = train(cfg)
    wall = time.perf_counter() - start
    # Hydra imported the sampler as benchmarks.soak (this file may be running as __main__).
    from benchmarks.soak import MemorySampler as InstantiatedSampler

    samples = InstantiatedSampler.latest.samples
    after_warmup = next((s for s in samples if s[0] >= args.warmup_minutes * 60), samples[0])
    end = samples[-1]
    growth = (end[2] - after_warmup[2]) / after_warmup[2]
    ckpt_dir = os.path.join(run_dir, "checkpoints")
    result = {
        "minutes": args.minutes,
        "wall_seconds": wall,
        "env_steps": summary.env_steps if summary else end[1],
        "overrides": overrides,
        "rss_first_mb": samples[0][2] / 2**20,
        "rss_after_warmup_mb": after_warmup[2] / 2**20,
        "rss_end_mb": end[2] / 2**20,
        "rss_max_mb": max(s[2] for s in samples) / 2**20,
        "growth_after_warmup": growth,
        "checkpoint_files_at_end": sorted(os.listdir(ckpt_dir)) if os.path.isdir(ckpt_dir) else [],
        "samples": samples,
    }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "soak.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(
        f"soak: {wall / 60:.1f} min, {result['env_steps']:,} env steps; RSS {result['rss_after_warmup_mb']:.1f} MB "
        f"after {args.warmup_minutes:g} min warm-up -> {result['rss_end_mb']:.1f} MB at the end "
        f"({100 * growth:+.2f}%), max {result['rss_max_mb']:.1f} MB, first sample {result['rss_first_mb']:.1f} MB; "
        f"{len(result['checkpoint_files_at_end'])} checkpoint files at the end (run dir {run_dir})"
    )
    return result


if __name__ == "__main__":
    main()
