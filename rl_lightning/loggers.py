"""Loggers: curves that run on across a resume, and Weights & Biases with no account and no network.

Every metric the modules log carries ``time/env_steps``, and they log ``step`` as the env
step count, which Lightning hands to every logger as its x-axis (TensorBoard, CSV, W&B).

A resumed run continues the interrupted run's logs. When a fit starts, ``RLModule`` calls :func:`rewind_loggers`: each
logger here keeps what was logged up to the checkpoint's env step and drops (CSV) or hides (TensorBoard) what came after
it, so the resumed run's rows follow on without a duplicate env step. Lightning's own ``CSVLogger`` deletes
``metrics.csv`` when it starts, so a resume with it keeps only the second half (a warning says so). A W&B run continues
under the run id the checkpoint stored.
"""

from __future__ import annotations

import csv
import io
import netrc
import os
import time
import warnings
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlparse

from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch.loggers import CSVLogger as _LightningCSVLogger
from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers import TensorBoardLogger as _LightningTensorBoardLogger
from lightning.pytorch.loggers import WandbLogger as _LightningWandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from rl_lightning.checks import check_one_of

WANDB_MODES = ("auto", "online", "offline")


def wandb_api_key_configured() -> bool:
    """Whether a W&B API key is configured (``WANDB_API_KEY`` or a ``~/.netrc`` entry, as ``wandb login`` writes)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


class WandbLogger(_LightningWandbLogger):
    """Lightning's ``WandbLogger`` with an ``auto`` mode and env steps as the x-axis.

    ``mode="auto"`` (the default) logs online when an API key is configured and offline otherwise, so a run on a machine
    with no account and no network still writes a full offline run under ``save_dir/wandb`` (upload it later with
    ``wandb sync``). ``"online"`` insists on uploading and fails early, with the fix, when no key is configured;
    ``"offline"`` never touches the network.

    Args:
        save_dir: Directory the ``wandb/`` run folder is written under.
        project: W&B project name.
        mode: ``"auto"``, ``"online"`` or ``"offline"``.
        **kwargs: Passed to Lightning's ``WandbLogger`` (``name``, ``tags``, ``group``, ...).
    """

    def __init__(self, save_dir: str = ".", project: str = "rl_lightning", mode: str = "auto", **kwargs):
        check_one_of(WANDB_MODES, " (W&B's run mode)", mode=mode)
        has_key = wandb_api_key_configured()
        if mode == "online" and not has_key:
            raise ValueError(
                "W&B mode 'online' needs an API key, and none is configured: run `wandb login` or set "
                "WANDB_API_KEY, or log offline (mode 'offline' or 'auto') and upload later with `wandb sync`."
            )
        self.mode = mode if mode != "auto" else ("online" if has_key else "offline")
        self._started = False  # whether the W&B run was created
        os.makedirs(save_dir, exist_ok=True)
        # Kept for continue_run; the call below is written out, as the CLI reads Lightning's arguments from it.
        self._settings = {"save_dir": save_dir, "project": project, "offline": self.mode == "offline", **kwargs}
        super().__init__(save_dir=save_dir, project=project, offline=self.mode == "offline", **kwargs)

    @property
    def experiment(self):
        """The W&B run; on creation, ``time/env_steps`` is declared the step metric of every curve."""
        run = super().experiment
        if not self._started and getattr(run, "define_metric", None):
            run.define_metric("time/env_steps")
            run.define_metric("*", step_metric="time/env_steps", step_sync=True)
        self._started = True
        return run

    def continue_run(self, run_id: str) -> None:
        """Log into the W&B run ``run_id`` (the interrupted run's) rather than a new one.

        Must come before the run starts (before ``fit``): the front doors call it with the id
        a resumed checkpoint stored. Lightning's logger takes the id as its constructor's
        ``id`` (and already asks W&B for ``resume="allow"``): it is constructed again with it.
        """
        if self._started:
            raise RuntimeError("continue_run must be called before the W&B run starts (before fit).")
        super().__init__(**{**self._settings, "id": run_id, "version": None})


class CSVLogger(_LightningCSVLogger):
    """Lightning's ``CSVLogger``, keeping ``metrics.csv`` across a resume.

    Lightning's writer deletes an existing ``metrics.csv`` when it is created. This logger puts the file back and
    appends under its header: at fit start a resumed run keeps the rows up to its checkpoint's env step; a fresh fit
    starts the file over, with a warning, after moving the earlier rows to ``metrics-before-<time>.csv``. Same
    arguments as Lightning's.
    """

    _writer: ExperimentWriter | None = None
    #: The rows of ``metrics.csv`` so far: a checkpoint keeps the count, and a resume from it keeps those rows only.
    logged_rows = 0

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        """Lightning's writer (created on first use), with the run's ``metrics.csv`` as it was before."""
        if self._writer is None:
            path = os.path.join(self.log_dir, ExperimentWriter.NAME_METRICS_FILE)
            fs = get_filesystem(path)
            kept = fs.cat_file(path) if fs.isfile(path) else b""
            with warnings.catch_warnings():  # its warning that the (run) directory is not empty: nothing is lost here
                warnings.filterwarnings("ignore", "Experiment logs directory")
                self._writer = super().experiment
            if kept:
                fs.pipe_file(path, kept)
                header, *rows = csv.reader(io.StringIO(kept.decode()))
                self._writer.metrics_keys, self.logged_rows = header, len(rows)
        return self._writer

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Lightning's (one row of ``metrics.csv``), counted."""
        super().log_metrics(metrics, step)
        self.logged_rows += 1

    @rank_zero_only
    def rewind(self, env_steps: int, rows_kept: int | None = None) -> None:
        """Keep the rows logged up to ``env_steps``, where a fit starts (a checkpoint's count; 0: a fresh fit), and of
        them the first ``rows_kept`` (the checkpoint's :attr:`logged_rows`): rows at that env step logged after it was
        written (an evaluation a resume reruns, a final test) would come twice."""
        writer = self.experiment
        fs = get_filesystem(writer.metrics_file_path)
        if not fs.isfile(writer.metrics_file_path):
            return
        with fs.open(writer.metrics_file_path, "r", newline="") as file:
            rows = list(csv.DictReader(file))
        if env_steps == 0 and rows:  # a fresh fit where an earlier one logged: its rows are kept aside, not deleted
            stamp, k = writer.metrics_file_path[: -len(".csv")] + time.strftime("-before-%Y%m%d-%H%M%S"), 1
            while fs.exists(aside := f"{stamp}{f'-{k}' if k > 1 else ''}.csv"):  # fresh fits within a second: each
                k += 1
            fs.mv(writer.metrics_file_path, aside)
            writer.metrics_keys, self.logged_rows = [], 0
            warnings.warn(f"{writer.metrics_file_path} held {len(rows)} rows of an earlier fit: this fresh fit (no "
                          f"ckpt_path) starts it over and keeps them in {aside}. To continue that run instead, fit "
                          "from its checkpoint (ckpt_path).", stacklevel=2)  # fmt: skip
            return
        kept = [row for row in rows[:rows_kept] if float(row["step"]) <= env_steps]  # rows_kept None: all
        self.logged_rows = len(kept)
        if not kept:
            fs.rm_file(writer.metrics_file_path)
            writer.metrics_keys = []
        elif len(kept) < len(rows):
            with fs.open(writer.metrics_file_path, "w", newline="") as file:
                csv_writer = csv.DictWriter(file, fieldnames=writer.metrics_keys)
                csv_writer.writeheader()
                csv_writer.writerows(kept)


class TensorBoardLogger(_LightningTensorBoardLogger):
    """Lightning's ``TensorBoardLogger``; a resumed run hides what the earlier run logged after its checkpoint.

    Event files are only ever added to a log directory, so a resumed run writes its own beside the interrupted run's and
    TensorBoard draws them as one curve. At fit start a resume writes TensorBoard's restart marker (a
    ``SessionLog.START`` event at the checkpoint's env step + 1, what ``SummaryWriter(purge_step=...)`` writes), which
    makes TensorBoard drop the earlier events from that step on: steps logged before an older checkpoint was picked are
    not drawn twice. Same arguments as Lightning's, except that ``default_hp_metric`` is off: Lightning's placeholder
    ``hp_metric`` (-1 at step 0, logged again by every resume) means nothing here; the runs' own metric is
    ``eval/return_mean``.
    """

    def __init__(self, *args: Any, default_hp_metric: bool = False, **kwargs: Any):
        super().__init__(*args, default_hp_metric=default_hp_metric, **kwargs)

    @rank_zero_only
    def rewind(self, env_steps: int) -> None:
        """Hide what was logged after ``env_steps``, where a fit starts (a checkpoint's count; 0: a fresh fit)."""
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog

        writer = self.experiment
        # torch's SummaryWriter writes this same pair for purge_step (torch/utils/tensorboard/writer.py).
        writer.file_writer.add_event(Event(step=env_steps + 1, file_version="brain.Event:2"))
        writer.file_writer.add_event(Event(step=env_steps + 1, session_log=SessionLog(status=SessionLog.START)))
        writer.flush()


#: The checkpoint entry where the loggers' ids are kept (a W&B run id), so a resume can continue them.
LOGGERS_KEY = "loggers"


def logger_state(loggers: Iterable[Logger]) -> dict[str, Any]:
    """What a checkpoint keeps of ``loggers`` to continue them on a resume: the W&B run id, the CSV rows so far."""
    state: dict[str, Any] = {}
    for logger in loggers:
        if isinstance(logger, _LightningWandbLogger) and logger.version:
            state["wandb_run_id"] = str(logger.version)
        elif isinstance(logger, CSVLogger):
            state["csv_rows"] = logger.logged_rows
    return state


def continue_loggers(loggers: Iterable[Logger], state: Mapping[str, Any]) -> None:
    """Point ``loggers`` at the runs a resumed checkpoint's :func:`logger_state` names (before ``fit``)."""
    run_id = state.get("wandb_run_id")
    for logger in loggers:
        if run_id and isinstance(logger, WandbLogger):
            logger.continue_run(run_id)


def rewind_loggers(loggers: Iterable[Logger], env_steps: int, state: Mapping[str, Any] | None = None) -> None:
    """At fit start: make every logger continue the run's history at ``env_steps`` (a resumed checkpoint's; 0: fresh).

    Loggers of this module keep their rows up to ``env_steps`` (see :class:`CSVLogger` and :class:`TensorBoardLogger`;
    ``state``: the checkpoint's :func:`logger_state`); a resume with Lightning's own CSV logger, which has already
    deleted the earlier rows, gets a warning naming the fix.
    """
    for logger in loggers:
        if isinstance(logger, CSVLogger):
            logger.rewind(env_steps, (state or {}).get("csv_rows"))
        elif isinstance(logger, TensorBoardLogger):
            logger.rewind(env_steps)
        elif env_steps > 0 and isinstance(logger, _LightningCSVLogger):
            warnings.warn(
                "Lightning's CSVLogger deleted the metrics.csv of the run being resumed: it holds only the rows "
                "from here on. Use rl_lightning.loggers.CSVLogger (same arguments), which keeps them.",
                stacklevel=2,
            )
