"""Train PPO from a preset with the Python API, then evaluate both object sets.

    python examples/train_ppo.py --preset cartpole --seed 0
    python examples/train_ppo.py --preset inverted_pendulum --total-timesteps 200000

Prints a JSON summary: env steps, wall time, final train-set (``eval``) and held-out
(``eval_ood``) returns, the generalization gap and the last checkpoint.
"""

from __future__ import annotations

import argparse
import json
import time

import lightning.pytorch as pl

from rl_lightning import PPO, RolloutDataModule
from rl_lightning.presets import PPO_PRESETS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=sorted(PPO_PRESETS), default="cartpole")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=int, default=None, help="override the preset's budget")
    parser.add_argument("--out", default="runs", help="checkpoints and CSV logs go under OUT/PRESET")
    args = parser.parse_args()

    preset = PPO_PRESETS[args.preset]
    model_kwargs = dict(preset["model"], save_interval=50)
    if args.total_timesteps is not None:
        model_kwargs["total_timesteps"] = args.total_timesteps
    out = f"{args.out}/{args.preset}"

    pl.seed_everything(args.seed)
    data = RolloutDataModule(seed=args.seed, **preset["data"])
    model = PPO(**model_kwargs)
    trainer = pl.Trainer(
        max_epochs=-1,
        default_root_dir=out,
        logger=pl.loggers.CSVLogger(out),
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(model, data)
    wall = time.perf_counter() - start
    last_checkpoint = trainer.checkpoint_callback.last_model_path
    final = {k: float(v) for r in trainer.test(model, data, verbose=False) for k, v in r.items()}
    print(
        json.dumps(
            {
                "preset": args.preset,
                "seed": args.seed,
                "env_steps": data.env_steps,
                "wall_seconds": round(wall, 1),
                "env_steps_per_second": round(data.env_steps / wall),
                "eval/return_mean": final.get("eval/return_mean"),
                "eval_ood/return_mean": final.get("eval_ood/return_mean"),
                "eval_ood/generalization_gap": final.get("eval_ood/generalization_gap"),
                "last_checkpoint": last_checkpoint,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
