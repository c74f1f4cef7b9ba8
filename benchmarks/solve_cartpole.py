"""Time to solve CartPole-v1: our tuned experiment against Stable-Baselines3 with RL-Zoo's tuned PPO preset.

Solved = the mean return of 10 deterministic evaluation episodes on CartPole-v1 (the
unmodified env: the object set is replaced by plain CartPole for this comparison) reaches
475. Both sides evaluate every ``eval_every`` env steps, after the update of the rollout
that crossed the mark, and stop at the first evaluation that passes. Reported: env steps
and wall seconds to that point, the seconds spent evaluating subtracted (the clock stops
while either side evaluates), so the figure is training time. Budget: 150k env steps (our
experiment's); a run that does not solve within it reports ``solved: false``.

Ours: ``conf/experiment/ppo.yaml`` composed through Hydra as ``train.py +experiment=ppo``
would (8 envs x 32 steps, 20 epochs of one minibatch, gamma 0.98, lambda 0.8, lr 1e-3
annealed, clip 0.2, observation normalization), run through ``Trainer.fit`` without
loggers or checkpoints. Stable-Baselines3: RL-Zoo's ``ppo.yml`` CartPole-v1 entry (8 envs,
n_steps 32, batch 256, gae_lambda 0.8, gamma 0.98, 20 epochs, ent_coef 0, lr lin_1e-3,
clip lin_0.2).
"""

from __future__ import annotations

import os
import time
import warnings

import lightning.pytorch as pl
import numpy as np

from benchmarks.throughput import bare_trainer

SOLVED = 475.0
BUDGET = 150_000
CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


class _SolveWatch(pl.Callback):
    """Stops the fit at the first evaluation reaching ``SOLVED``; keeps the evaluation time.

    The evaluation runs when Lightning's validation loop fetches its first batch, which is
    before ``on_validation_start``: the clock therefore stops at the end of the epoch's
    training batch and restarts at ``on_validation_end``, on the epochs where an evaluation
    ran (a validation batch came), which also excludes that loop's own few milliseconds;
    epochs without an evaluation count their whole (empty) loop as training.
    """

    def __init__(self):
        self.eval_seconds = 0.0
        self.solved_at: int | None = None
        self.solved_seconds: float | None = None
        self._fit_start = self._batch_end = 0.0
        self._evaluated = False

    def on_train_start(self, trainer, pl_module):
        self._fit_start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._batch_end = time.perf_counter()
        self._evaluated = False

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self._evaluated = True

    def on_validation_end(self, trainer, pl_module):
        if not self._evaluated:
            return
        now = time.perf_counter()
        self.eval_seconds += now - self._batch_end
        score = trainer.callback_metrics.get("eval/return_mean")
        if self.solved_at is None and score is not None and float(score) >= SOLVED:
            self.solved_at = pl_module.env_steps
            self.solved_seconds = now - self._fit_start - self.eval_seconds
            trainer.should_stop = True


def solve_ours(seed: int, eval_every: int = 2048, experiment: str = "ppo") -> dict[str, float | bool]:
    """Train ``+experiment=<experiment>`` until solved; returns solved, env steps and training seconds.

    An experiment whose rollouts are longer than ``eval_every`` env steps evaluates after every rollout.
    """
    from hydra import compose, initialize_config_dir

    from rl_lightning.launch.app import build_data, build_model

    warnings.filterwarnings("ignore")
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={experiment}", f"seed={seed}", "run_dir=."])
    per_epoch = cfg.env.num_envs * cfg.data.rollout_steps
    pl.seed_everything(seed, verbose=False)
    data = build_data(
        cfg,
        obj_sets={"train": [{}], "test": [{}]},
        eval_obj_sets=["train"],
        eval_interval=max(1, eval_every // per_epoch),
        eval_episodes=10,
    )
    model = build_model(cfg, save_interval=None, total_timesteps=max(BUDGET, cfg.algo.total_timesteps))
    watch = _SolveWatch()
    bare_trainer(callbacks=[watch]).fit(model, data)
    data.close()
    return {
        "solved": watch.solved_at is not None,
        "env_steps": watch.solved_at or data.env_steps,
        "seconds": watch.solved_seconds,
    }


def rl_zoo_cartpole() -> dict:
    """RL-Zoo's PPO update for CartPole-v1 (``ppo.yml``; ``ppo_lstm.yml``'s ``CartPoleNoVel-v1`` has the same), as
    Stable-Baselines3 keyword arguments: 32 steps per env, batch 256, 20 epochs, lr and clip range annealed."""

    def linear(value):
        return lambda remaining: remaining * value

    return {
        "n_steps": 32,
        "batch_size": 256,
        "gae_lambda": 0.8,
        "gamma": 0.98,
        "n_epochs": 20,
        "ent_coef": 0.0,
        "learning_rate": linear(1e-3),
        "clip_range": linear(0.2),
    }


def solve_sb3(seed: int, eval_every: int = 2048) -> dict[str, float | bool]:
    """Train Stable-Baselines3's PPO with RL-Zoo's preset until solved, evaluated the same way."""
    import gymnasium as gym
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    warnings.filterwarnings("ignore")
    eval_env = gym.make("CartPole-v1")

    def evaluate(model) -> float:
        returns = []
        for episode in range(10):
            obs, _ = eval_env.reset(seed=1_000_000 + seed * 100 + episode)
            total, done = 0.0, False
            while not done:
                action, _ = model.predict(obs, deterministic=True)
                obs, reward, terminated, truncated, _ = eval_env.step(action)
                total += float(reward)
                done = terminated or truncated
            returns.append(total)
        return float(np.mean(returns))

    class Watch(BaseCallback):
        # Evaluates at the start of a rollout: the previous rollout's update has run, as in ours.
        def __init__(self):
            super().__init__()
            self.next_eval, self.eval_seconds = eval_every, 0.0
            self.solved_at = self.solved_seconds = None
            self.stop = False

        def _on_training_start(self):
            self.start = time.perf_counter()

        def _on_rollout_start(self):
            if self.num_timesteps < self.next_eval or self.solved_at is not None:
                return
            self.next_eval += eval_every
            t0 = time.perf_counter()
            score = evaluate(self.model)
            t1 = time.perf_counter()
            self.eval_seconds += t1 - t0
            if score >= SOLVED:
                self.solved_at = self.num_timesteps
                self.solved_seconds = t0 - self.start - (self.eval_seconds - (t1 - t0))
                self.stop = True

        def _on_step(self):
            return not self.stop

    model = PPO(
        "MlpPolicy",
        make_vec_env("CartPole-v1", n_envs=8, seed=seed),
        **rl_zoo_cartpole(),
        seed=seed,
        device="cpu",
        verbose=0,
    )
    watch = Watch()
    model.learn(BUDGET, callback=watch)
    return {
        "solved": watch.solved_at is not None,
        "env_steps": watch.solved_at or model.num_timesteps,
        "seconds": watch.solved_seconds,
    }
