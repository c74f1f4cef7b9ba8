"""Train PPO on CartPole-v1 with the Python API and evaluate both object sets.

    python examples/ppo_cartpole.py --seed 0 --total-timesteps 150000

The settings are the tuned CartPole preset (8 envs x 32 steps, 20 update epochs,
gamma 0.98, GAE lambda 0.8, lr 1e-3 annealed); they are also what the learning test uses.
"""

from __future__ import annotations

import argparse
import json
import time

import lightning.pytorch as pl

from rl_lightning import PPO, RolloutDataModule

CARTPOLE_DATA = dict(
    env="CartPole-v1", num_envs=8, rollout_steps=32, update_epochs=20, num_minibatches=1,
    gamma=0.98, gae_lambda=0.8, eval_interval=20, eval_episodes=10,
)
CARTPOLE_PPO = dict(lr=1e-3, ent_coef=0.0, clip_coef=0.2, clip_vloss=False, max_grad_norm=0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total-timesteps", type=int, default=150_000)
    parser.add_argument("--out", default="runs/ppo_cartpole", help="checkpoints and logs go here")
    args = parser.parse_args()

    pl.seed_everything(args.seed)
    data = RolloutDataModule(seed=args.seed, **CARTPOLE_DATA)
    model = PPO(total_timesteps=args.total_timesteps, save_interval=50, **CARTPOLE_PPO)
    trainer = pl.Trainer(
        max_epochs=-1, default_root_dir=args.out, logger=pl.loggers.CSVLogger(args.out),
        enable_progress_bar=False, enable_model_summary=False,
    )
    start = time.perf_counter()
    trainer.fit(model, data)
    wall = time.perf_counter() - start
    results = trainer.test(model, data, verbose=False)
    final = {k: float(v) for r in results for k, v in r.items()}
    summary = {
        "seed": args.seed,
        "env_steps": data.env_steps,
        "wall_seconds": round(wall, 1),
        "env_steps_per_second": round(data.env_steps / wall),
        "eval/return_mean": final.get("eval/return_mean"),
        "eval_ood/return_mean": final.get("eval_ood/return_mean"),
        "generalization_gap": final.get("eval_ood/generalization_gap"),
        "checkpoint": trainer.checkpoint_callback.last_model_path if trainer.checkpoint_callback else None,
    }
    print(json.dumps(summary, indent=2))


if __name__ == "__main__":
    main()
