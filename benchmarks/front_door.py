"""Cost of the front door's extras: the same PPO run bare and with everything ``train.py`` adds.

    python -m benchmarks.front_door [--repeats 3] [--env-steps 20480] [--experiment ppo] [OVERRIDE ...]

``bare``: ``Trainer(logger=False)``, no checkpoints, no progress bar, no callbacks.
``front_door``: what ``python train.py +experiment=...`` builds by default: W&B (offline)
and CSV loggers, the env-step progress bar, the timing profiler, interval checkpoints.
Both train the same experiment for the same env steps with the same seed (so the same
episodes and updates); repeats alternate the two; the table reports medians and the ratio.
Extra Hydra overrides (e.g. ``logger=csv``) apply to both, to attribute the cost.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import lightning.pytorch as pl
import wandb
from hydra import compose, initialize_config_dir

from rl_lightning.callbacks import PhaseTimer
from rl_lightning.launch.app import build_callbacks, build_data, build_loggers, build_model, build_trainer

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def run(experiment: str, env_steps: int, front_door: bool, extra: list[str]) -> float:
    """Seconds of ``fit`` for one run."""
    with tempfile.TemporaryDirectory() as run_dir:
        overrides = [f"+experiment={experiment}", f"algo.total_timesteps={env_steps}", f"run_dir={run_dir}", *extra]
        with initialize_config_dir(config_dir=CONF, version_base="1.3"):
            cfg = compose("config", overrides=overrides)
        os.environ["WANDB_MODE"] = "offline"
        os.environ["WANDB_SILENT"] = "true"
        pl.seed_everything(cfg.seed, verbose=False)
        data = build_data(cfg)
        if front_door:
            model = build_model(cfg)
            loggers, callbacks = build_loggers(cfg), build_callbacks(cfg)
            for callback in callbacks:
                if isinstance(callback, PhaseTimer):
                    callback.print_summary = False
            trainer = build_trainer(cfg, loggers, callbacks)
        else:
            model = build_model(cfg, save_interval=None)
            trainer = pl.Trainer(
                max_epochs=-1,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
                default_root_dir=run_dir,
            )
        start = time.perf_counter()
        trainer.fit(model, data)
        seconds = time.perf_counter() - start
        wandb.finish()  # the offline W&B run of the Hydra front door, if it started one
        data.close()
        return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-steps", type=int, default=20480)
    parser.add_argument("--experiment", default="ppo")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides for both variants, e.g. logger=csv")
    args = parser.parse_args()
    times: dict[str, list[float]] = {"bare": [], "front_door": []}
    for _ in range(args.repeats):
        for name in times:
            times[name].append(run(args.experiment, args.env_steps, name == "front_door", args.overrides))
    medians = {k: statistics.median(v) for k, v in times.items()}
    print(
        json.dumps(
            {
                "experiment": args.experiment,
                "overrides": args.overrides,
                "env_steps": args.env_steps,
                "repeats": args.repeats,
                "seconds": {k: [round(x, 2) for x in v] for k, v in times.items()},
                "median_seconds": {k: round(v, 2) for k, v in medians.items()},
                "front_door / bare": round(medians["front_door"] / medians["bare"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
