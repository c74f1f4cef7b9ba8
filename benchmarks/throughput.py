"""Training throughput of rl_lightning against Stable-Baselines3 and a plain PyTorch loop, same hyperparameters.

Each function trains once and returns what it measured; ``benchmarks/run.py`` alternates
them over repeats and reports medians and ratios. Timing covers the training call only
(``Trainer.fit`` / ``model.learn`` / the plain loop): environments are built before the
clock starts for every contender, no evaluation runs, nothing is logged.

- PPO on CartPole-v1 at CleanRL's ``ppo.py`` defaults (4 envs x 128 steps, 4 minibatches,
  4 update epochs, lr 2.5e-4 annealed, gamma 0.99, GAE lambda 0.95, clip 0.2 with clipped
  value loss, entropy 0.01, value 0.5, max grad norm 0.5, 64x64 tanh networks, no
  observation normalization): env-steps/s.
- DQN on CartPole-v1 (256x256, batch 64, lr 2.3e-3, one gradient step per env step after
  1000 random steps, target copied every 500 gradient steps, Huber loss, max grad norm 10):
  gradient-steps/s and env-steps/s. SAC lives in ``benchmarks/sac_vs_sb3.py``.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from typing import Any

import lightning.pytorch as pl

from benchmarks.plain_ppo import PPOSettings
from benchmarks.plain_ppo import train as plain_ppo_train

PPO_SETTINGS = PPOSettings()
DQN_LEARNING_STARTS = 1000
#: The unmodified env for both object sets: the other contenders step plain CartPole-v1 too.
PLAIN = {"train": [{}], "test": [{}]}


def bare_trainer(max_epochs: int = -1, callbacks: Sequence[pl.Callback] = (), **kwargs) -> pl.Trainer:
    """A ``Trainer`` with nothing beside training (no loggers, checkpoints, progress bar or sanity
    check) but the given ``callbacks``; ``kwargs`` go to the ``Trainer`` (``accelerator=...``)."""
    warnings.filterwarnings("ignore")
    return pl.Trainer(
        max_epochs=max_epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=list(callbacks),
        **kwargs,
    )


def timed_rollout_data(env_id: str, num_envs: int, rollout_steps: int, seed: int, **kwargs: Any):
    """A ``RolloutDataModule`` for a timed fit: no evaluation inside the timed run (the other contenders evaluate
    none either), the plain env for both object sets unless ``obj_sets`` is given; ``kwargs``: more of its arguments
    (``backend="torch"``)."""
    from rl_lightning import RolloutDataModule

    kwargs.setdefault("obj_sets", PLAIN)
    return RolloutDataModule(env_id=env_id, num_envs=num_envs, rollout_steps=rollout_steps, eval_interval=10**9,
                             eval_episodes=1, seed=seed, **kwargs)  # fmt: skip


def timed_fit(trainer: pl.Trainer, model: pl.LightningModule, data) -> dict[str, float]:
    """``trainer.fit`` timed: env steps, optimizer steps, seconds and both per second; closes the envs."""
    start = time.perf_counter()
    trainer.fit(model, data)
    seconds = time.perf_counter() - start
    data.close()
    return {
        "env_steps": data.env_steps,
        "gradient_steps": trainer.global_step,
        "seconds": seconds,
        "env_steps_per_second": data.env_steps / seconds,
        "gradient_steps_per_second": trainer.global_step / seconds,
    }


def timed_learn(model, env_steps: int, gradient_steps: bool = False) -> dict[str, float]:
    """Stable-Baselines3's ``model.learn`` timed; ``gradient_steps`` adds ``_n_updates`` per second (off-policy)."""
    start = time.perf_counter()
    model.learn(env_steps)
    seconds = time.perf_counter() - start
    result = {
        "env_steps": model.num_timesteps,
        "seconds": seconds,
        "env_steps_per_second": model.num_timesteps / seconds,
    }
    if gradient_steps:
        result["gradient_steps_per_second"] = model._n_updates / seconds
    return result


def ppo_ours(env_steps: int, seed: int, **extra) -> dict[str, float]:
    """rl_lightning's PPO through the Python API (``Trainer.fit(PPO(...), RolloutDataModule(...))``); ``extra``: more
    of ``PPO``'s arguments (``compile=True``)."""
    s = PPO_SETTINGS
    pl.seed_everything(seed, verbose=False)
    data = timed_rollout_data(s.env_id, s.num_envs, s.rollout_steps, seed)
    data.setup("fit")  # envs built before the clock starts, as for the other contenders
    return timed_fit(bare_trainer(), ppo_model(s, env_steps, normalize_obs=False, **extra), data)


def ppo_model(s: PPOSettings, env_steps: int, **extra):
    """rl_lightning's ``PPO`` at the settings ``s`` (CleanRL's clipped value loss), plus ``extra`` arguments."""
    from rl_lightning import PPO

    return PPO(
        lr=s.lr,
        anneal_lr=s.anneal_lr,
        gamma=s.gamma,
        gae_lambda=s.gae_lambda,
        update_epochs=s.update_epochs,
        num_minibatches=s.num_minibatches,
        clip_coef=s.clip_coef,
        clip_vloss=True,
        ent_coef=s.ent_coef,
        vf_coef=s.vf_coef,
        max_grad_norm=s.max_grad_norm,
        total_timesteps=env_steps,
        **extra,
    )


def ppo_sb3(env_steps: int, seed: int) -> dict[str, float]:
    """Stable-Baselines3's PPO with the same settings (``clip_range_vf`` = CleanRL's clipped value loss)."""
    from stable_baselines3.common.env_util import make_vec_env

    warnings.filterwarnings("ignore")
    envs = make_vec_env(PPO_SETTINGS.env_id, n_envs=PPO_SETTINGS.num_envs, seed=seed)
    model = sb3_ppo_model("MlpPolicy", envs, PPO_SETTINGS, seed, policy_kwargs={"net_arch": [64, 64]})
    result = timed_learn(model, env_steps)
    envs.close()
    return result


def sb3_ppo_model(policy: str, envs, s: PPOSettings, seed: int, **extra):
    """Stable-Baselines3's ``PPO`` at the settings ``s`` (``clip_range_vf``: CleanRL's clipped value loss)."""
    from stable_baselines3 import PPO as SB3PPO

    return SB3PPO(
        policy,
        envs,
        n_steps=s.rollout_steps,
        batch_size=s.rollout_steps * s.num_envs // s.num_minibatches,
        n_epochs=s.update_epochs,
        learning_rate=lambda remaining: s.lr * remaining,
        gamma=s.gamma,
        gae_lambda=s.gae_lambda,
        clip_range=s.clip_coef,
        clip_range_vf=s.clip_coef,
        ent_coef=s.ent_coef,
        vf_coef=s.vf_coef,
        max_grad_norm=s.max_grad_norm,
        seed=seed,
        device="cpu",
        verbose=0,
        **extra,
    )


def ppo_plain(env_steps: int, seed: int) -> dict[str, float]:
    """The plain PyTorch loop of ``benchmarks/plain_ppo.py``."""
    return plain_ppo_train(PPO_SETTINGS, env_steps, seed)


def dqn_ours(env_steps: int, seed: int, chunks: tuple[int, int] | None = None, **extra) -> dict[str, float]:
    """rl_lightning's DQN, one gradient step per env step after the random steps; ``chunks`` = ``(train_freq,
    gradient_steps)``: that many gradient steps after each chunk of env steps instead (RL-Zoo: ``(256, 128)``);
    ``extra``: more of ``DQN``'s arguments (``compile=True``)."""
    from rl_lightning import DQN, ReplayDataModule

    pl.seed_everything(seed, verbose=False)
    data = ReplayDataModule(
        env_id="CartPole-v1",
        num_envs=1,
        steps_per_epoch=env_steps,
        learning_starts=DQN_LEARNING_STARTS,
        utd_ratio=1.0,
        train_freq=chunks[0] if chunks else None,
        gradient_steps=chunks[1] if chunks else None,
        batch_size=64,
        buffer_size=100_000,
        obj_sets=PLAIN,
        eval_interval=10**9,
        eval_episodes=1,
        seed=seed,
    )
    data.setup("fit")
    # The target network's cadence counts gradient steps here, env steps in SB3: once per chunk (RL-Zoo's 10 env
    # steps there update it after every chunk's gradient steps too), or every 500.
    target_update_interval = chunks[1] if chunks else 500
    model = DQN(
        lr=2.3e-3,
        target_update_interval=target_update_interval,
        max_grad_norm=10.0,
        total_timesteps=env_steps,
        **extra,
    )
    return timed_fit(bare_trainer(max_epochs=1), model, data)


def dqn_sb3(env_steps: int, seed: int, chunks: tuple[int, int] | None = None) -> dict[str, float]:
    """Stable-Baselines3's DQN with the same settings (``target_update_interval`` counts env steps there)."""
    import gymnasium as gym
    from stable_baselines3 import DQN as SB3DQN

    warnings.filterwarnings("ignore")
    model = SB3DQN(
        "MlpPolicy",
        gym.make("CartPole-v1"),
        learning_rate=2.3e-3,
        batch_size=64,
        buffer_size=100_000,
        learning_starts=DQN_LEARNING_STARTS,
        gamma=0.99,
        train_freq=chunks[0] if chunks else 1,
        gradient_steps=chunks[1] if chunks else 1,
        target_update_interval=10 if chunks else 500,  # RL-Zoo's 10 with its chunks
        max_grad_norm=10.0,
        policy_kwargs={"net_arch": [256, 256]},
        seed=seed,
        device="cpu",
        verbose=0,
    )
    return timed_learn(model, env_steps, gradient_steps=True)
