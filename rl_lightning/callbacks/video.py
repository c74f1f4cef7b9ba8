"""``EvaluationVideo``: film one episode per object set at every ``video_interval``-th evaluation."""

from __future__ import annotations

import os
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from rl_lightning.data.base import eval_prefix
from rl_lightning.data.evaluation import play_episode
from rl_lightning.envs import make_env
from rl_lightning.video import VideoWriter, gif_bytes


class EvaluationVideo(pl.Callback):
    """Records one deterministic episode per evaluated object set, every ``video_interval`` evaluations.

    The episode is played by the policy that was just evaluated (the acting copy if any),
    on an env of its own made with ``render_mode="rgb_array"`` from the data module's env,
    object sets and evaluation time limit. It is reset with the same ``seed`` every time, so
    successive videos show the same episode start and variation, played by a better policy.

    Each video is written to ``<dirpath>/<object set>/env_steps=<N>.mp4`` while it is
    played (frames are never gathered in memory), then logged as ``<prefix>/video``
    (``eval/video`` for the training set, ``eval_ood/video`` for the others) to W&B
    (``wandb.Video``, against ``time/env_steps``) and TensorBoard (an animated GIF at most
    320 px wide, as ``add_video`` writes, at step = env steps) where those loggers are
    active. Only global rank zero records; the other ranks go on to the next epoch.

    Args:
        video_interval: Record at every this-many-th evaluation (1: every evaluation);
            0 records nothing (the switch of the Hydra config, ``callbacks.video.video_interval``).
        obj_sets: Object sets to film; ``None`` films every set that was evaluated.
        dirpath: Directory of the videos; ``None`` uses ``<trainer.log_dir>/videos`` (beside
            ``checkpoints/``).
        seed: Reset seed of the filmed episodes.
        max_frames: Cut an episode's video (and the episode) at this many frames; ``None``
            films whole episodes. MuJoCo renders about 5 to 15 frames/s on a CPU.

    Raises:
        ValueError: ``video_interval`` is negative or ``max_frames`` not positive.
    """

    def __init__(
        self,
        video_interval: int = 1,
        obj_sets: list[str] | None = None,
        dirpath: str | None = None,
        seed: int = 0,
        max_frames: int | None = None,
    ):
        if not isinstance(video_interval, int) or isinstance(video_interval, bool) or video_interval < 0:
            raise ValueError(f"video_interval must be an integer >= 0 (0 records no video), got {video_interval!r}.")
        if max_frames is not None and (
            not isinstance(max_frames, int) or isinstance(max_frames, bool) or max_frames < 1
        ):
            raise ValueError(f"max_frames must be a positive integer or None (whole episodes), got {max_frames!r}.")
        self.video_interval = video_interval
        if isinstance(obj_sets, str):
            obj_sets = [obj_sets]
        self.obj_sets = None if obj_sets is None else [str(s) for s in obj_sets]
        self.dirpath = dirpath
        self.seed = seed
        self.max_frames = max_frames
        #: Evaluations seen during fit (saved in checkpoints, so a resumed run keeps the cadence).
        self.evaluations = 0
        #: The videos of the last recording: ``{object set: path}``.
        self.last_videos: dict[str, str] = {}
        self._evaluated: list[str] = []
        self._envs: dict[str, Any] = {}

    # ---------------------------------------------------------------- which evaluations
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluated = []

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        # An evaluation loader yields its one batch only when an evaluation is due (eval_interval).
        if isinstance(batch, dict) and "obj_set" in batch and batch["obj_set"] not in self._evaluated:
            self._evaluated.append(batch["obj_set"])

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._evaluated or self.video_interval == 0:
            return
        self.evaluations += 1
        if self.evaluations % self.video_interval == 0 and trainer.is_global_zero:
            self.record(trainer, pl_module, [s for s in self._evaluated if self.obj_sets is None or s in self.obj_sets])

    # ---------------------------------------------------------------- recording
    def record(self, trainer: pl.Trainer, pl_module: pl.LightningModule, obj_sets: list[str]) -> dict[str, str]:
        """Film one episode on each of ``obj_sets`` now, write and log the videos; returns their paths."""
        datamodule = trainer.datamodule
        hp = datamodule.hparams
        env_steps = int(pl_module.env_steps)
        dirpath = self.dirpath or os.path.join(trainer.log_dir or trainer.default_root_dir, "videos")
        policy = pl_module.acting_policy
        self.last_videos = {}
        for obj_set in obj_sets:
            env = self._envs.get(obj_set)
            if env is None:
                env = make_env(hp.env, obj_set, datamodule.obj_sets, hp.eval_max_episode_steps, render_mode="rgb_array")
                self._envs[obj_set] = env
            path = os.path.join(dirpath, obj_set, f"env_steps={env_steps}.mp4")
            with VideoWriter(path, env.metadata.get("render_fps") or 30) as video:
                play_episode(policy, env, self.seed, hp.eval_deterministic, video, self.max_frames)
            self.last_videos[obj_set] = path
            self._log(trainer, f"{eval_prefix(obj_set, hp.train_obj_set)}/video", path, video.fps, env_steps)
        return self.last_videos

    @staticmethod
    def _log(trainer: pl.Trainer, key: str, path: str, fps: float, env_steps: int) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                import wandb

                logger.experiment.log({key: wandb.Video(path, format="mp4"), "time/env_steps": env_steps})
            elif isinstance(logger, TensorBoardLogger):
                from torch.utils.tensorboard.summary import Summary

                # What SummaryWriter.add_video writes (torch/utils/tensorboard/summary.py, make_video).
                gif = gif_bytes(path)
                height, width = _gif_size(gif)
                image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
                summary = Summary(value=[Summary.Value(tag=key, image=image)])
                logger.experiment._get_file_writer().add_summary(summary, env_steps)

    # ---------------------------------------------------------------- state
    def state_dict(self) -> dict[str, Any]:
        return {"evaluations": self.evaluations}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.evaluations = int(state_dict.get("evaluations", 0))

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for env in self._envs.values():
            env.close()
        self._envs = {}


def _gif_size(gif: bytes) -> tuple[int, int]:
    """``(height, width)`` from a GIF's logical screen descriptor (bytes 6-9, little-endian)."""
    return int.from_bytes(gif[8:10], "little"), int.from_bytes(gif[6:8], "little")
