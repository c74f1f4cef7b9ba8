"""Stable-Baselines3's DQN with RL-Zoo's CartPole-v1 settings on our ``train`` object set: its eval curve.

    pip install -e ".[bench]"; python -m benchmarks.sb3_dqn_curve [--seed 0] [--env-steps 100000]

The reference for what ``experiment=dqn`` should look like: the same hyperparameters
(lr 2.3e-3, batch 64, buffer 100k, learning_starts 1000, target update every 10 env
steps, train_freq 256 with 128 gradient steps, epsilon 1 -> 0.04 over 16%, 256x256), the
same env (CartPole-v1 drawing a ``train`` variation per episode), and a deterministic
10-episode evaluation every 10k env steps (``EvalCallback``). Prints one line per evaluation.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings

import torch

from rl_lightning.envs.object_sets import ObjectSetWrapper, resolve_obj_sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--env-steps", type=int, default=100_000)
    parser.add_argument("--eval-every", type=int, default=10_000)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import EvalCallback

    obj_sets = resolve_obj_sets("CartPole-v1", None)
    model = DQN(
        "MlpPolicy",
        ObjectSetWrapper(obj_sets, "train"),
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=1000,
        gamma=0.99,
        target_update_interval=10,
        train_freq=256,
        gradient_steps=128,
        exploration_fraction=0.16,
        exploration_final_eps=0.04,
        policy_kwargs={"net_arch": [256, 256]},
        seed=args.seed,
    )
    # One learn() call over the whole budget, so the exploration schedule spans all of it.
    log_dir = tempfile.mkdtemp()  # EvalCallback keeps its results only when it has a log path
    evaluation = EvalCallback(
        ObjectSetWrapper(obj_sets, "train"),
        eval_freq=args.eval_every,
        n_eval_episodes=10,
        deterministic=True,
        log_path=log_dir,
        verbose=0,
    )
    start = time.perf_counter()
    model.learn(args.env_steps, callback=evaluation)
    for steps, returns in zip(evaluation.evaluations_timesteps, evaluation.evaluations_results, strict=True):
        print(f"{steps} env steps: eval/return_mean {sum(returns) / len(returns):.1f}")
    print(f"wall {time.perf_counter() - start:.0f} s (evaluations included)")


if __name__ == "__main__":
    main()
