"""``EvaluationVideo``: film one episode per object set at every ``video_interval``-th evaluation."""

from __future__ import annotations

import contextlib
import os
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities import rank_zero_warn

from rl_lightning.checks import check_positive_int
from rl_lightning.data.base import eval_prefix
from rl_lightning.data.evaluation import play_episode
from rl_lightning.envs import make_env
from rl_lightning.faults import TrainingInterrupted
from rl_lightning.video import VideoWriter, gif_bytes


class EvaluationVideo(pl.Callback):
    """Records one episode per evaluated object set, every ``video_interval`` evaluations.

    Evaluations are numbered on the env-step grid (the data module's collections over its
    ``eval_interval``), so a resumed run films at the env steps an uninterrupted one would,
    also after an evaluation rerun outside the validation loop (``RLModule._evaluate_cut``).

    The episode is played by the policy that was just evaluated (the acting copy if any), deterministically unless the
    data module's ``eval_deterministic`` is off, on an env of its own made with ``render_mode="rgb_array"`` from the
    data module's env, object sets, evaluation time limit and ``obs_bound``. It is reset with the same ``seed`` every
    time, so successive videos show the same episode start and variation, played by a better policy. Recording draws
    from a forked torch RNG, so turning videos on changes nothing in training.

    Each video is written to ``<dirpath>/<object set>/env_steps=<N>.mp4`` while it is played (frames are never gathered
    in memory), then logged as ``<prefix>/video`` (``eval/video`` for the training set, ``eval_ood/video`` for the
    others) to W&B (``wandb.Video``, against ``time/env_steps``) and TensorBoard (an animated GIF at most 320 px wide,
    as ``add_video`` writes, at step = env steps) where those loggers are active. Only global rank zero records; the
    other ranks go on to the next epoch.

    Rendering is tried once when fit starts, so a machine that cannot render fails before training. A video that fails
    later (a full disk, say) is reported in a warning, its partial file removed, and training goes on.

    Args:
        video_interval: Record at every this-many-th evaluation (1: every evaluation);
            0 records nothing (the switch of the Hydra config, ``callbacks.video.video_interval``).
        video_obj_sets: Names of the object sets to film; ``None`` films every set that was evaluated.
        dirpath: Directory of the videos; ``None`` uses ``<trainer.log_dir>/videos`` (beside ``checkpoints/``).
        seed: Reset seed of the filmed episodes.
        max_frames: Cut an episode's video (and the episode) at this many frames; ``None``
            films whole episodes. MuJoCo renders about 5 to 15 frames/s on a CPU.

    Raises:
        ValueError: ``video_interval`` is negative or ``max_frames`` not positive; at setup,
            a name in ``video_obj_sets`` that the data module does not evaluate.
    """

    def __init__(
        self, video_interval: int = 1, video_obj_sets: list[str] | None = None, dirpath: str | None = None,
        seed: int = 0, max_frames: int | None = None,
    ):  # fmt: skip
        if not isinstance(video_interval, int) or isinstance(video_interval, bool) or video_interval < 0:
            raise ValueError(f"video_interval must be an integer >= 0 (0 records no video), got {video_interval!r}.")
        check_positive_int(max_frames=max_frames, none="None (whole episodes)")
        if isinstance(video_obj_sets, str):
            video_obj_sets = [video_obj_sets]
        self.video_interval = video_interval
        self.video_obj_sets = None if video_obj_sets is None else [str(s) for s in video_obj_sets]
        self.dirpath = dirpath
        self.seed = seed
        self.max_frames = max_frames
        #: The videos of the last recording: ``{object set: path}``.
        self.last_videos: dict[str, str] = {}
        self._evaluated: list[str] = []
        self._envs: dict[str, Any] = {}
        self._dir: str | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Resolve the video directory on every rank and check the object-set names.

        ``trainer.log_dir`` broadcasts from rank zero, so it must be read by all ranks at
        once (Lightning's docstring): here, not in rank zero's recording.
        """
        self._dir = self.dirpath or os.path.join(trainer.log_dir or trainer.default_root_dir, "videos")
        evaluated = list(trainer.datamodule.hparams.eval_obj_sets)
        if unknown := [name for name in self.video_obj_sets or [] if name not in evaluated]:
            raise ValueError(
                f"EvaluationVideo(video_obj_sets={self.video_obj_sets}) names {unknown}, which the data module does "
                f"not evaluate (eval_obj_sets={evaluated}). Film some of {evaluated}, or add the set to eval_obj_sets."
            )

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.video_interval and trainer.is_global_zero:
            for obj_set in self._to_film(list(trainer.datamodule.hparams.eval_obj_sets)):
                try:
                    env = self._env(trainer, obj_set)
                    env.reset(seed=self.seed)
                    env.render()
                except Exception as err:  # an env without rgb_array rendering, no GL backend, no pygame
                    raise RuntimeError(
                        f"EvaluationVideo cannot render {trainer.datamodule.env_id} ({type(err).__name__}: "
                        f"{err}). MuJoCo needs MUJOCO_GL=egl (or osmesa) on a machine without a display; classic "
                        "control needs pygame (gymnasium[classic-control]). Or turn videos off (video_interval=0)."
                    ) from err

    # ---------------------------------------------------------------- which evaluations
    def on_validation_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._evaluated = []

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        # An evaluation loader yields its one batch only when an evaluation is due (eval_interval).
        if isinstance(batch, dict) and "obj_set" in batch and batch["obj_set"] not in self._evaluated:
            self._evaluated.append(batch["obj_set"])

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking and trainer.state.fn == TrainerFn.FITTING:
            self.evaluated(trainer, pl_module, self._evaluated)

    def evaluated(self, trainer: pl.Trainer, pl_module: pl.LightningModule, obj_sets: list[str]) -> None:
        """Film ``obj_sets``, just evaluated, where this evaluation is one to film (``video_interval``); also called
        for the evaluation a resumed run reruns outside the validation loop (``RLModule._evaluate_cut``)."""
        evaluation = trainer.datamodule.counters.iterations // trainer.datamodule.hparams.eval_interval  # on the grid
        if obj_sets and self.video_interval and evaluation % self.video_interval == 0 and trainer.is_global_zero:
            self.record(trainer, pl_module, self._to_film(obj_sets))

    def _to_film(self, obj_sets: list[str]) -> list[str]:
        return [s for s in obj_sets if self.video_obj_sets is None or s in self.video_obj_sets]

    # ---------------------------------------------------------------- recording
    def _env(self, trainer: pl.Trainer, obj_set: str) -> Any:
        if obj_set not in self._envs:
            datamodule = trainer.datamodule
            self._envs[obj_set] = make_env(datamodule.env_id, obj_set, datamodule.obj_sets,
                                           datamodule.hparams.eval_max_episode_steps, render_mode="rgb_array",
                                           wrappers=datamodule.hparams.wrappers)  # fmt: skip
        return self._envs[obj_set]

    def record(self, trainer: pl.Trainer, pl_module: pl.LightningModule, obj_sets: list[str]) -> dict[str, str]:
        """Film one episode on each of ``obj_sets`` now, write and log the videos; returns their paths.

        A failure is reported in a warning and its partial file removed; training goes on.
        """
        hp = trainer.datamodule.hparams
        env_steps = int(pl_module.env_steps)
        policy = pl_module.acting_policy
        obs_bound = hp.obs_bound if hp.obs_bound_mode == "clip" else None
        device = next(policy.parameters()).device
        self.last_videos = {}
        for obj_set in obj_sets:
            path = os.path.join(self._dir, obj_set, f"env_steps={env_steps}.mp4")
            try:
                # A forked RNG: a sampling policy (eval_deterministic=false) draws nothing from
                # the training run's stream, so filming leaves training as it would have been.
                with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
                    env = self._env(trainer, obj_set)
                    with VideoWriter(path, env.metadata.get("render_fps") or 30) as video:
                        play_episode(
                            policy, env, self.seed, hp.eval_deterministic, video, self.max_frames, obs_bound=obs_bound
                        )
                self._log(trainer, f"{eval_prefix(obj_set, hp.train_obj_set)}/video", path, env_steps)
                self.last_videos[obj_set] = path
            except (TrainingInterrupted, KeyboardInterrupt):
                _remove(path)
                raise
            except Exception as err:
                _remove(path)
                rank_zero_warn(f"EvaluationVideo: the video of object set '{obj_set}' failed and was skipped: {err!r}")
        return self.last_videos

    @staticmethod
    def _log(trainer: pl.Trainer, key: str, path: str, env_steps: int) -> None:
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                import wandb

                logger.experiment.log({key: wandb.Video(path, format="mp4"), "time/env_steps": env_steps})
            elif isinstance(logger, TensorBoardLogger):
                from torch.utils.tensorboard.summary import Summary

                # What SummaryWriter.add_video writes (torch/utils/tensorboard/summary.py, make_video).
                gif = gif_bytes(path)
                # (height, width) from the GIF's logical screen descriptor (bytes 6-9, little-endian).
                height, width = int.from_bytes(gif[8:10], "little"), int.from_bytes(gif[6:8], "little")
                image = Summary.Image(height=height, width=width, colorspace=3, encoded_image_string=gif)
                summary = Summary(value=[Summary.Value(tag=key, image=image)])
                logger.experiment.file_writer.add_summary(summary, env_steps)

    def _close(self) -> None:
        for env in self._envs.values():
            env.close()
        self._envs = {}

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._close()

    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._close()  # Lightning skips teardown after an exception; render contexts would leak


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
