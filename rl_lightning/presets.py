"""Tuned settings: keyword arguments for ``RolloutDataModule`` and ``PPO`` per task.

Each preset names the budget it was checked at (see ``docs/algos/ppo.md`` for figures).
"""

from __future__ import annotations

from typing import Any

PPO_PRESETS: dict[str, dict[str, Any]] = {
    # RL-Zoo's tuned CartPole PPO (8 envs x 32 steps, 20 epochs, gamma 0.98, lambda 0.8,
    # lr 1e-3 annealed, no entropy bonus). Checked: eval return >= 475 within 150k steps.
    "cartpole": {
        "data": dict(
            env="CartPole-v1",
            num_envs=8,
            rollout_steps=32,
            update_epochs=20,
            num_minibatches=1,
            gamma=0.98,
            gae_lambda=0.8,
            eval_interval=20,
            eval_episodes=10,
        ),
        "model": dict(
            lr=1e-3, ent_coef=0.0, clip_coef=0.2, clip_vloss=False, max_grad_norm=0.5, total_timesteps=150_000
        ),
    },
    # CleanRL's ppo_continuous_action.py defaults (1 env x 2048 steps, 32 minibatches,
    # 10 epochs, lr 3e-4 annealed). Checked: eval return >= 900 within 200k steps.
    "inverted_pendulum": {
        "data": dict(
            env="InvertedPendulum-v5",
            num_envs=1,
            rollout_steps=2048,
            update_epochs=10,
            num_minibatches=32,
            gamma=0.99,
            gae_lambda=0.95,
            eval_interval=5,
            eval_episodes=10,
        ),
        "model": dict(
            lr=3e-4, ent_coef=0.0, clip_coef=0.2, clip_vloss=True, max_grad_norm=0.5, total_timesteps=200_000
        ),
    },
}
