"""Small builders the tests share: tiny data modules and a quiet Trainer."""

from __future__ import annotations

import lightning.pytorch as pl

from rl_lightning import PPO, ReplayDataModule, RolloutDataModule

#: The update plan of the tiny PPO runs: 2 passes of 2 minibatches over each rollout.
TINY_PLAN = {"update_epochs": 2, "num_minibatches": 2}

REPLAY_STEPS = 60  # env steps per epoch of tiny_replay_data
REPLAY_LEARNING_STARTS = 40


def quiet_trainer(tmp_path=None, callbacks=(), **kwargs) -> pl.Trainer:
    """A Trainer without logger, progress bar or model summary; checkpoints only with a ``tmp_path``."""
    kwargs = {
        "max_epochs": 2,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": tmp_path is not None,
        "default_root_dir": tmp_path,
        "callbacks": list(callbacks),
        **kwargs,
    }
    return pl.Trainer(**kwargs)


def tiny_replay_data(env_id: str, **kwargs) -> ReplayDataModule:
    """60 env steps per epoch, learning from step 40, batches of 16, one short evaluation episode."""
    kwargs = {
        "env_id": env_id,
        "steps_per_epoch": REPLAY_STEPS,
        "learning_starts": REPLAY_LEARNING_STARTS,
        "batch_size": 16,
        "eval_episodes": 1,
        "eval_max_episode_steps": 20,
        **kwargs,
    }
    return ReplayDataModule(**kwargs)


def tiny_ppo(**kwargs) -> PPO:
    """PPO with the tiny runs' update plan (``TINY_PLAN``) and the given settings."""
    return PPO(**{**TINY_PLAN, **kwargs})


def tiny_rollout_data(**kwargs) -> RolloutDataModule:
    """CartPole-v1, 2 envs x 16 steps per rollout, 2 short evaluation episodes (train it with ``tiny_ppo``)."""
    kwargs = {
        "env_id": "CartPole-v1",
        "num_envs": 2,
        "rollout_steps": 16,
        "eval_episodes": 2,
        "eval_max_episode_steps": 20,
        **kwargs,
    }
    return RolloutDataModule(**kwargs)


#: The tests' PixelGoal Dict task with its train and test seeds (tests/envs/pixel_goal.py).
PIXEL_GOAL = {
    "env_id": "tests.envs.pixel_goal:pixel_goal/PixelGoal-v0",
    "obj_sets": {"train": [{"seeds": [0, 1000]}], "test": [{"seeds": [1000, 2000]}]},
}


def fit_and_test(model: pl.LightningModule, data) -> dict[str, float]:
    """Train ``model`` on ``data`` to its budget (quiet, no checkpoints), then the final test's metrics as floats."""
    trainer = quiet_trainer(max_epochs=-1)
    trainer.fit(model, data)
    return {k: float(v) for r in trainer.test(model, data, verbose=False) for k, v in r.items()}
