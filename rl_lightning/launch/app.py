"""The Hydra app behind ``python train.py``: build a run from a composed config and run it.

``build_*`` turn the config groups into objects (``algo`` -> the algorithm, ``data`` +
``env`` -> the data module, ``trainer``, ``logger``, ``callbacks``); :func:`train` runs
the warm-up (``debug=true``), ``fit``, the final test on every object set, and the summary.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shlex
import time
import typing
import warnings
from typing import Any

import lightning.pytorch as pl
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import get_class, instantiate
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from rl_lightning.algos.loading import check_resume
from rl_lightning.callbacks import ActorSync, BestCheckpoint, Interruption
from rl_lightning.callbacks.checkpoint import check_checkpoint_file, run_checkpoint_dir
from rl_lightning.checks import check_new_run_dir, check_seed
from rl_lightning.data import ReplayDataModule
from rl_lightning.data.chunks import chunk_schedule
from rl_lightning.envs.object_sets import NoObjectSetsWarning
from rl_lightning.faults import EnvFault, NumericalFault, TrainingInterrupted
from rl_lightning.launch.errors import ConfigError, explain_build_error, explain_run_error
from rl_lightning.launch.summary import SUMMARY_FILE, RunSummary
from rl_lightning.loggers import continue_loggers

# Loggers share the run directory with Hydra's files; nothing of theirs is deleted.
warnings.filterwarnings("ignore", ".*Experiment logs directory .* exists and is not empty.*")


def build_data(cfg: DictConfig, **overrides: Any) -> pl.LightningDataModule:
    """The data module from the ``data`` group plus the ``env`` group and the top-level ``seed``."""
    env = OmegaConf.to_container(cfg.env, resolve=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = instantiate(cfg.data, **{**env, "seed": cfg.seed, **overrides}, _convert_="all")
    for warning in caught:  # passed on, the object-set advice in this front door's spelling
        message = warning.message
        if isinstance(message, NoObjectSetsWarning):
            message = NoObjectSetsWarning(message.env_id, "env.obj_sets='{train: [...], test: [...]}'")
        warnings.warn_explicit(message, warning.category, warning.filename, warning.lineno)
    return data


def build_model(cfg: DictConfig, **overrides: Any) -> pl.LightningModule:
    """The algorithm from the ``algo`` group (its keys are the constructor's arguments)."""
    return instantiate(cfg.algo, **overrides, _convert_="all")


def build_loggers(cfg: DictConfig) -> list[pl.loggers.Logger]:
    """Every logger selected in the ``logger`` group (``logger=[wandb,csv]`` for several)."""
    return [instantiate(node, _convert_="all") for node in (cfg.get("logger") or {}).values()]


def build_callbacks(cfg: DictConfig) -> list[pl.Callback]:
    """The ``callbacks`` group's callbacks; with ``debug=true`` an acting copy checks every sync."""
    callbacks = [instantiate(node, _convert_="all") for node in (cfg.get("callbacks") or {}).values()]
    for callback in callbacks:
        if isinstance(callback, ActorSync) and cfg.get("debug"):
            callback.verify = True
    return callbacks


def build_trainer(cfg: DictConfig, loggers: list, callbacks: list) -> pl.Trainer:
    """The ``Trainer`` with its root, logs and checkpoints in ``run_dir``.

    Raises:
        ConfigError: A number or switch given as text (``trainer.max_epochs=abc``), which the
            ``Trainer`` takes and fails on mid-fit.
    """
    hints = typing.get_type_hints(pl.Trainer.__init__)
    for key, value in cfg.trainer.items():
        allowed = set()  # the types the hint admits, a Literal's values' included (deterministic: bool or 'warn')
        for arg in typing.get_args(hints.get(key)) or [hints.get(key)]:
            allowed |= {type(v) for v in typing.get_args(arg)} if typing.get_origin(arg) is typing.Literal else {arg}
        kinds = {int, float, bool} & allowed
        if isinstance(value, str) and kinds and str not in allowed:
            raise ConfigError(f"trainer.{key} must be {' or '.join(sorted(k.__name__ for k in kinds))}, got "
                              f"{value!r}. Fix it: trainer.{key}=...")  # fmt: skip
    saving = {"enable_checkpointing": False} if cfg.algo.get("save_interval") is None else {}  # not Lightning's own
    return instantiate(cfg.trainer, default_root_dir=cfg.run_dir, logger=loggers or False, callbacks=callbacks,
                       _convert_="all", **saving)  # fmt: skip


@contextlib.contextmanager
def explained_errors(cfg: DictConfig, model: pl.LightningModule | None = None):
    """Turn a config mistake into a :class:`ConfigError` naming the key and the fix.

    Without ``model``, mistakes raised while building objects; with it, the library's refusals
    while ``model``'s run starts (spaces an algorithm cannot handle, the wrong data module, a
    checkpoint that does not fit). Faults of a running run (interruption, env or numerical
    faults), anything raised once a loop has started, and bugs pass through unchanged.
    """
    try:
        yield
    except (TrainingInterrupted, EnvFault, NumericalFault, ConfigError):
        raise
    except Exception as err:
        if getattr(model, "loops_started", False):
            raise
        if (message := explain_build_error(err, cfg) if model is None else explain_run_error(err, cfg)) is None:
            raise
        raise ConfigError(message) from None


def warm_up(cfg: DictConfig) -> None:
    """A few-second dry run: a few env steps (one replay chunk), one update and one evaluation of each object set.

    It builds its own small data module and model from the same config on one device,
    surfacing dataflow errors (shapes, dtypes, env settings) before the real run starts.
    Nothing is logged or saved; the real run then starts from fresh objects and seeds.
    """
    small, one_update = dict(eval_interval=1, eval_episodes=1, eval_num_envs=1), dict(save_interval=None)
    if issubclass(get_class(cfg.data._target_), ReplayDataModule):
        # limit_train_batches=1 trains one Lightning batch, one epoch: whole chunks of the run's own schedule (RL-Zoo's
        # DQN: 256 env steps), as many as store a batch of 8 (SAC's chunk is one step), so the last one updates; one
        # gradient step where the schedule names its count.
        chunk = _one_chunk(cfg.data, cfg.env.num_envs)
        small.update(steps_per_epoch=chunk * math.ceil(8 / chunk), learning_starts=0, batch_size=8)
        if cfg.data.get("train_freq") is not None and cfg.data.get("gradient_steps") is not None:
            small.update(gradient_steps=1)
    else:
        # A recurrent run's truncated BPTT needs rollouts of whole sequences: one of them.
        small.update(rollout_steps=cfg.algo.get("bptt_length") or 8)
        one_update.update(update_epochs=1, num_minibatches=1)
    with explained_errors(cfg):
        data, model = build_data(cfg, **small), build_model(cfg, **one_update)
    # A signal stops the warm-up too, but nothing of it is saved (it must never write over the run's last.ckpt).
    trainer = pl.Trainer(accelerator=cfg.trainer.get("accelerator", "auto"), devices=1, max_epochs=1,
                         limit_train_batches=1, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                         callbacks=[Interruption(save=False)], enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=cfg.run_dir)  # fmt: skip
    start = time.perf_counter()
    try:
        with explained_errors(cfg, model), warnings.catch_warnings():
            warnings.filterwarnings("ignore", r"Trainer\(max_epochs=1\) stops after")  # one epoch, on purpose
            trainer.fit(model, data)
    finally:
        data.close()
    seconds = time.perf_counter() - start
    _print(f"Warm-up passed in {seconds:.1f} s (a few env steps, one update, one evaluation per set).")


def _one_chunk(data: DictConfig, num_envs: Any) -> int:
    """Env steps in one chunk of the run's schedule; 8 per env where the schedule is not numbers (building the
    data module then refuses it, naming the key)."""
    try:
        vector_steps, _ = chunk_schedule(
            data.get("utd_ratio", 1.0), int(num_envs), data.get("train_freq"), data.get("gradient_steps")
        )
        return vector_steps * int(num_envs) if vector_steps > 0 else 8 * int(num_envs)
    except (TypeError, ValueError, ZeroDivisionError):
        return 8 * num_envs


@rank_zero_only
def _print(text: str) -> None:
    print(text, flush=True)


#: What the final test evaluates: the final weights, or best.ckpt (highest eval/return_mean).
TEST_CHECKPOINTS = ("last", "best")


def _best_checkpoint(trainer: pl.Trainer) -> str | None:
    best = next((c for c in trainer.callbacks if isinstance(c, BestCheckpoint)), None)
    if best is None or not best.best_model_path:
        warnings.warn(
            "test_ckpt=best, but no best.ckpt was written (algo.save_interval is null, no evaluation ran, or "
            "env.eval_obj_sets leaves out the training set, whose evaluation chooses it): the final test evaluates "
            "the final weights.",
            stacklevel=2,
        )
        return None
    return best.best_model_path


def _checked_checkpoint(ckpt_path: str, checkpoint_dir: str) -> str:
    """The file ``ckpt_path`` names (``last``: ``checkpoint_dir/last.ckpt``), checked to be a complete checkpoint.

    Raises:
        ConfigError: The file does not exist or is not a complete checkpoint; nothing has run yet.
    """
    path = os.path.join(checkpoint_dir, "last.ckpt") if ckpt_path == "last" else str(ckpt_path)
    try:
        check_checkpoint_file(path)
    except (FileNotFoundError, ValueError) as err:
        # Only a missing file can mean the wrong run directory: a torn one is in the right place.
        hint = (
            " ckpt_path=last reads <run_dir>/checkpoints/last.ckpt: also pass hydra.run.dir=<the run's directory>."
            if ckpt_path == "last" and isinstance(err, FileNotFoundError)
            else ""
        )
        raise ConfigError(f"ckpt_path: {err}{hint}") from None
    return path


def sweeping() -> bool:
    """Whether this Hydra job is one of a sweep's (``-m``)."""
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def _check_new_run_dir(run_dir: str) -> None:
    try:
        check_new_run_dir(
            run_dir, f"Resume it with hydra.run.dir={run_dir} ckpt_path=last, or pass another hydra.run.dir."
        )
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_resume_before_hydra(config_dir: str, config_name: str, overrides: list[str]) -> None:
    """Refuse a resume that cannot run before Hydra starts the job and writes into the run directory.

    Hydra rewrites ``<run_dir>/.hydra/`` and appends to the job's log as a job starts, and
    :func:`train` writes ``config.yaml``; ``train.py`` calls this first, so a refused resume
    (another env, another algorithm, other settings, a torn file) leaves the run directory
    byte for byte as it was. The checks are :func:`~rl_lightning.algos.loading.check_resume`'s.

    Raises:
        ConfigError: Naming the checkpoint, the culprit and the fix.
    """
    with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
        cfg = compose(config_name, overrides=overrides, return_hydra_config=True)
    if not cfg.get("ckpt_path"):
        _check_new_run_dir(cfg.hydra.run.dir)
        return
    # The shipped loggers and checkpoints live in the run directory itself (name "", version "").
    path = _checked_checkpoint(cfg.ckpt_path, os.path.join(cfg.hydra.run.dir, "checkpoints"))
    with explained_errors(cfg):
        data, model = build_data(cfg), build_model(cfg)
    try:
        with explained_errors(cfg, model):
            check_resume(model, data, path)
    finally:
        data.close()


def resume_command(run_dir: str) -> str:
    """The ``python train.py ...`` command that resumes this run in ``run_dir`` from its ``last.ckpt``.

    The job's own overrides (from Hydra; for a sweep job, its values) are repeated so the
    config composes the same; ``hydra.run.dir`` puts the resumed run in the same directory.
    """
    overrides = list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in ("ckpt_path", "hydra.run.dir")]
    args = [*kept, f"hydra.run.dir={run_dir}", "ckpt_path=last"]
    return "python train.py " + " ".join(shlex.quote(a) for a in args)


def train(cfg: DictConfig) -> RunSummary | None:
    """Run one experiment: optional warm-up, ``fit``, the final test, and the summary.

    Returns:
        The run's summary on rank zero (also printed and written to ``summary.json``).

    Raises:
        ConfigError: A config value cannot build its object (the message names the key).
        TrainingInterrupted: A signal stopped the run; ``resume_command`` holds the command
            that resumes it (``last.ckpt`` was written).
        EnvFault: An env failed beyond its restart limit; likewise resumable.
        NumericalFault: A NaN or inf stopped the run (nothing was saved over the last checkpoint).
    """
    test_ckpt = cfg.get("test_ckpt", "last")
    if test_ckpt not in TEST_CHECKPOINTS:
        raise ConfigError(
            f"test_ckpt must be one of {TEST_CHECKPOINTS}, got {test_ckpt!r}. Write test_ckpt=best or last."
        )
    if not isinstance(cfg.get("debug", False), bool):  # debug=no would read as true
        raise ConfigError(f"debug must be true or false, got {cfg.debug!r}. Write debug=true or debug=false.")
    try:
        check_seed(cfg.seed)  # before seed_everything, whose own refusal is a traceback
    except ValueError as err:
        raise ConfigError(f"{err} Write seed=0 (or another such integer).") from None
    done = os.path.join(cfg.run_dir, SUMMARY_FILE)
    if cfg.get("ckpt_path") == "last" and sweeping() and os.path.exists(done):  # a sweep rerun keeps finished jobs
        with open(done) as f:
            finished = RunSummary(**json.load(f))
        # The budget its summary was written for (not config.yaml's: a rerun cut short rewrote it); a larger resumes.
        if cfg.algo.total_timesteps <= (finished.total_timesteps or 0):
            _print(f"{cfg.run_dir} finished this budget (its {SUMMARY_FILE}): skipped.")
            return finished
    os.makedirs(cfg.run_dir, exist_ok=True)
    if cfg.get("debug"):
        pl.seed_everything(cfg.seed, verbose=False)
        warm_up(cfg)
    pl.seed_everything(cfg.seed, verbose=False)
    with explained_errors(cfg):
        data, model = build_data(cfg), build_model(cfg)
        loggers, callbacks = build_loggers(cfg), build_callbacks(cfg)
        trainer = build_trainer(cfg, loggers, callbacks)
    # In a sweep (-m), ckpt_path=last resumes the jobs that have a last.ckpt and starts the others (not run yet).
    last = os.path.join(checkpoint_dir := run_checkpoint_dir(trainer), "last.ckpt")
    fresh = cfg.get("ckpt_path") == "last" and sweeping() and not os.path.exists(last)
    ckpt_path = _checked_checkpoint(cfg.ckpt_path, checkpoint_dir) if cfg.get("ckpt_path") and not fresh else None
    if ckpt_path is None:  # on every rank: one that went on alone would wait for the others in DDP's setup
        _check_new_run_dir(cfg.run_dir)
    if ckpt_path is not None:
        # Before config.yaml, the loggers and the checkpoint writers touch the run directory: a refused
        # resume leaves it as it was (Lightning's CSV logger would replace metrics.csv).
        with explained_errors(cfg, model):
            saved_loggers = check_resume(model, data, ckpt_path)
        continue_loggers(loggers, saved_loggers)  # the W&B run goes on under its id
    resolved = OmegaConf.to_container(cfg, resolve=True)
    if trainer.is_global_zero:
        OmegaConf.save(OmegaConf.create(resolved), os.path.join(cfg.run_dir, "config.yaml"))
    for logger in loggers:
        logger.log_hyperparams({"config": resolved})
    try:
        start = time.perf_counter()
        try:
            with explained_errors(cfg, model):
                trainer.fit(model, data, ckpt_path=ckpt_path)
        except (TrainingInterrupted, EnvFault) as err:
            err.resume_command = resume_command(os.path.abspath(cfg.run_dir))  # type: ignore[attr-defined]
            raise
        wall = time.perf_counter() - start
        # Testing a checkpoint restores its counters into the data module, and its callbacks' state: read them first.
        env_steps, resumed_from = data.env_steps, data.resumed_from
        checkpoint = next((c.last_model_path for c in trainer.checkpoint_callbacks if c.last_model_path), None)
        tested = None
        if cfg.get("test_after_fit", True):
            tested = _best_checkpoint(trainer) if test_ckpt == "best" else None
            with explained_errors(cfg, model):
                results = trainer.test(model, data, ckpt_path=tested, verbose=False)
            metrics = {k: v for r in results for k, v in r.items()}
        else:
            metrics = dict(trainer.callback_metrics)
        summary = RunSummary.from_metrics(
            metrics, tested_checkpoint=tested, env_steps=env_steps, wall_seconds=wall,
            env_steps_per_second=(env_steps - resumed_from) / max(wall, 1e-9), resumed_from_env_steps=resumed_from,
            checkpoint=checkpoint or None, run_dir=os.path.abspath(cfg.run_dir), seed=cfg.seed,
            total_timesteps=cfg.algo.total_timesteps)  # fmt: skip
    finally:
        data.close()
        # A W&B run stays open until finished; a sweep's next job must not reuse it.
        if any(isinstance(logger, pl.loggers.WandbLogger) for logger in loggers):
            import wandb

            wandb.finish()
    if not trainer.is_global_zero:
        return None
    summary.write()
    _print(str(summary))
    return summary
