"""Sync against async env workers on one experiment: env-steps/s of the same training run, each way.

    python -m benchmarks.vectorization [--experiment ppo_maniskill] [--env-steps 12800] [--repeats 3] [OVERRIDE ...]

Both train the experiment for the same env steps from the same seed, through the Python API with
a bare ``Trainer`` (no loggers, checkpoints or evaluation during fit); ``sync`` steps the envs in
the training process (``env.vectorization=sync``), ``async`` in worker processes, one per env
(``env.vectorization=async``, the env config's start method). Repeats alternate the two. The
report gives each run's seconds of ``fit``, the median env-steps/s of each mode and their ratio
(medians of the repeats, and the median of the per-repeat ratios), and the share of ``fit`` spent
waiting on the envs (``PhaseTimer``'s ``env`` phase): the part async can hand to other cores. The
seconds are ``PhaseTimer``'s, from ``on_fit_start``: building the envs in ``setup`` (starting the
workers, each importing the simulator) is reported apart, as ``setup_seconds``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

import lightning.pytorch as pl
import torch
from hydra import compose, initialize_config_dir

from rl_lightning.callbacks import PhaseTimer
from rl_lightning.launch.app import build_data, build_model

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")
MODES = ("sync", "async")


def run(experiment: str, env_steps: int, mode: str, extra: list[str]) -> dict[str, float]:
    """One training run: seconds of ``fit`` and the share of it in the envs."""
    with tempfile.TemporaryDirectory() as run_dir:
        overrides = [f"+experiment={experiment}", f"algo.total_timesteps={env_steps}", f"run_dir={run_dir}",
                     f"env.vectorization={mode}", "env.eval_interval=1000000", *extra]  # fmt: skip
        with initialize_config_dir(config_dir=CONF, version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        pl.seed_everything(cfg.seed, verbose=False)
        data, model = build_data(cfg), build_model(cfg, save_interval=None)
        timer = PhaseTimer(print_summary=False)
        trainer = pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False, num_sanity_val_steps=0, limit_val_batches=0,
                             callbacks=[timer], default_root_dir=run_dir)  # fmt: skip
        start = time.perf_counter()
        trainer.fit(model, data)
        seconds = time.perf_counter() - start
        data.close()
        # PhaseTimer's clock starts at on_fit_start, after setup has built the envs (and started any workers).
        fit = timer.fit_seconds
        return {"seconds": fit, "setup_seconds": seconds - fit, "env_share": timer.totals["env"] / max(fit, 1e-9)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--experiment", default="ppo_maniskill")
    parser.add_argument("--env-steps", type=int, default=12800)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both modes, e.g. env.num_envs=8")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
    for _ in range(args.repeats):
        for mode in MODES:
            runs[mode].append(run(args.experiment, args.env_steps, mode, args.overrides))
            print(mode, {k: round(v, 3) for k, v in runs[mode][-1].items()}, flush=True)
    sps = {mode: [args.env_steps / r["seconds"] for r in rs] for mode, rs in runs.items()}
    medians = {mode: statistics.median(v) for mode, v in sps.items()}
    per_repeat = [a / s for a, s in zip(sps["async"], sps["sync"], strict=True)]
    print(
        json.dumps(
            {
                "experiment": args.experiment,
                "overrides": args.overrides,
                "env_steps": args.env_steps,
                "repeats": args.repeats,
                "host": {
                    "cpus": os.cpu_count(),
                    "processor": platform.processor() or platform.machine(),
                    "torch": torch.__version__,
                    "threads": torch.get_num_threads(),
                },  # fmt: skip
                "seconds": {m: [round(r["seconds"], 2) for r in rs] for m, rs in runs.items()},
                "setup_seconds": {m: [round(r["setup_seconds"], 2) for r in rs] for m, rs in runs.items()},
                "env_share": {m: [round(r["env_share"], 3) for r in rs] for m, rs in runs.items()},
                "median_env_steps_per_s": {m: round(v, 1) for m, v in medians.items()},
                "async / sync": round(medians["async"] / medians["sync"], 3),
                "per_repeat_median": round(statistics.median(per_repeat), 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
