"""Small builders the tests share: tiny data modules, a quiet Trainer, and readers of recorded videos."""

from __future__ import annotations

import os

import gymnasium as gym
import imageio_ffmpeg
import lightning.pytorch as pl
import numpy as np
import torch

from rl_lightning import PPO, ReplayDataModule, RolloutDataModule
from rl_lightning.envs import EnvGroup

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


def succeeded(rate: float, episodes: int) -> int:
    """Episodes that succeeded, from a logged success rate (a float32 mean: 19 of 20 reads 0.94999...)."""
    return round(rate * episodes)


def fit_and_test(model: pl.LightningModule, data) -> dict[str, float]:
    """Train ``model`` on ``data`` to its budget (quiet, no checkpoints), then the final test's metrics as floats."""
    trainer = quiet_trainer(max_epochs=-1)
    trainer.fit(model, data)
    return {k: float(v) for r in trainer.test(model, data, verbose=False) for k, v in r.items()}


class CountDynamics:
    """Observation = steps into the episode; reward 1; terminates at ``terminate_at`` (never with 0)."""

    env_id = "Count-v0"
    max_episode_steps = 3
    observation_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, terminate_at: int = 0):
        self.params = {}
        self.terminate_at = terminate_at

    def start(self, n, generator, like):
        return torch.zeros((n, 1), dtype=like.dtype, device=like.device)

    def step(self, state, action, params):
        state = state + 1
        terminated = state[:, 0] == self.terminate_at
        return state, torch.ones(state.shape[0], dtype=state.dtype), terminated

    def observe(self, state):
        return state.float()


def count_envs(num_envs: int, terminate_at: int = 0) -> EnvGroup:
    """A batched ``EnvGroup`` of :class:`CountDynamics` (episodes of 3 steps unless they terminate sooner)."""
    from rl_lightning.envs.batched import TorchVectorEnv

    def make(env_id, n, device, seed, limit):
        return TorchVectorEnv(CountDynamics(terminate_at), n, device=device, seed=seed)

    return EnvGroup("Count-v0", num_envs, obj_sets={"train": [{}]}, backend="torch", env_factory=make)


def as_rows(fields):
    """``ReplayDataset.take_step``'s fields as the ``TensorDict`` of rows a ``ReplayBuffer`` writes."""
    from tensordict import TensorDict

    return TensorDict(fields, batch_size=fields["reward"].shape)


def count_frames(path: str | os.PathLike) -> int:
    """The number of frames in a video file (decoded by ffmpeg, not read from its header)."""
    return int(imageio_ffmpeg.count_frames_and_secs(os.fspath(path))[0])


def read_frames(path: str | os.PathLike) -> list[np.ndarray]:
    """Every frame of a (short) video as ``[height, width, 3]`` uint8 arrays."""
    reader = imageio_ffmpeg.read_frames(os.fspath(path))
    width, height = next(reader)["size"]
    return [np.frombuffer(raw, np.uint8).reshape(height, width, 3) for raw in reader]
