"""SAC training throughput against Stable-Baselines3's SAC, same hyperparameters, one invocation.

    python -m benchmarks.sac_vs_sb3 [--repeats 3] [--env-steps 2100] [--threads 1] [--compile]

Both train SAC on Pendulum-v1 with 256x256 networks, batch 256, learning rate 1e-3,
buffer 1M, tau 0.005, gamma 0.99, automatic entropy (target -1), 256 random steps (one
batch: rl_lightning samples only from a buffer that holds a batch, Stable-Baselines3 would
draw 256 from fewer with repeats, so both take their first gradient step at the same env
step), then one gradient step per env step. Reported: gradient steps per second over the
whole ``fit``/``learn`` call (env steps included), medians of alternating repeats, and the ratio.
``--compile`` runs ours with ``SAC(compile=True)`` (the compilation's seconds fall inside the timed fit).
Needs ``pip install stable-baselines3`` (not a dependency of the package).
"""

from __future__ import annotations

import argparse
import json
import statistics
import warnings

import gymnasium as gym
import lightning.pytorch as pl
import torch

from benchmarks.throughput import bare_trainer, timed_fit, timed_learn
from rl_lightning import SAC, ReplayDataModule

LEARNING_STARTS = 256  # = batch_size (see above)


def ours(env_steps: int, seed: int, **extra) -> dict[str, float]:
    """Gradient steps and env steps per second of rl_lightning's SAC; ``extra``: more of ``SAC``'s arguments
    (``compile=True``)."""
    pl.seed_everything(seed, verbose=False)
    data = ReplayDataModule(
        env_id="Pendulum-v1",
        steps_per_epoch=env_steps,
        learning_starts=LEARNING_STARTS,
        batch_size=256,
        eval_interval=10**6,
        eval_episodes=1,
        seed=seed,
    )
    model = SAC(actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3, total_timesteps=env_steps, **extra)
    data.setup("fit")  # envs built before the clock starts, as for Stable-Baselines3
    return timed_fit(bare_trainer(max_epochs=1), model, data)  # one optimizer step per gradient step


def sb3(env_steps: int, seed: int) -> dict[str, float]:
    """Gradient steps and env steps per second of Stable-Baselines3's SAC with the same settings."""
    from stable_baselines3 import SAC as SB3SAC

    model = SB3SAC(
        "MlpPolicy",
        gym.make("Pendulum-v1"),
        learning_rate=1e-3,
        buffer_size=1_000_000,
        learning_starts=LEARNING_STARTS,
        batch_size=256,
        tau=0.005,
        gamma=0.99,
        train_freq=1,
        gradient_steps=1,
        ent_coef="auto",
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    return timed_learn(model, env_steps, gradient_steps=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-steps", type=int, default=2100)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--compile", action="store_true", help="ours with SAC(compile=True)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    warnings.filterwarnings("ignore")
    rates: dict[str, list[float]] = {"rl_lightning": [], "stable_baselines3": []}
    for repeat in range(args.repeats):
        rates["rl_lightning"].append(ours(args.env_steps, repeat, compile=args.compile)["gradient_steps_per_second"])
        rates["stable_baselines3"].append(sb3(args.env_steps, repeat)["gradient_steps_per_second"])
    medians = {k: statistics.median(v) for k, v in rates.items()}
    print(
        json.dumps(
            {
                "env_steps": args.env_steps,
                "threads": args.threads,
                "compile": args.compile,
                "gradient_steps_per_second": {k: [round(x, 1) for x in v] for k, v in rates.items()},
                "median": {k: round(v, 1) for k, v in medians.items()},
                "rl_lightning / stable_baselines3": round(medians["rl_lightning"] / medians["stable_baselines3"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
