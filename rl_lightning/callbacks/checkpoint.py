"""Interval checkpoints (the last ``keep_last`` kept), a ``last.ckpt`` that always holds the final state,
``best.ckpt``, and atomic checkpoint writes."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import zipfile
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.fabric.utilities.types import _PATH
from lightning.pytorch.callbacks import ModelCheckpoint


def plain_file_mode() -> int:
    """The permissions ``open(path, "w")`` would give a new file under the current umask.

    Files written through ``tempfile.mkstemp`` (private, 0600) and renamed get these instead.
    """
    umask = os.umask(0)  # reading the umask means setting it: put it back at once
    os.umask(umask)
    return 0o666 & ~umask


@contextlib.contextmanager
def atomic_file(path: str) -> Iterator[str]:
    """A temporary file beside ``path`` for the block to write, then moved over ``path`` (``os.replace``, atomic on
    POSIX and Windows) with the permissions a plain ``open`` gives; an error leaves ``path`` as it was."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    # Not ending in .ckpt: nothing that globs the directory for checkpoints picks it up.
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, plain_file_mode())  # mkstemp made it private (0600)
        os.replace(tmp, path)
        _fsync_directory(directory)  # the rename itself survives a power loss
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # gone already after the rename


def run_checkpoint_dir(trainer: pl.Trainer) -> str:
    """``<trainer.log_dir>/checkpoints``: the same for every logger kind (ModelCheckpoint's own
    default nests a W&B run under project/run-id), so a run keeps its checkpoints in one place."""
    return os.path.join(trainer.log_dir or trainer.default_root_dir, "checkpoints")


#: The checkpoint entry holding the algorithm's name, the data module's class and the spaces (``algos/compat.py``).
CHECKPOINT_KEY = "rl_lightning"
#: ``epoch=E-env_steps=S.ckpt``, the names ``IntervalCheckpoint`` writes (``-vN`` when a name repeats).
_NUMBERED = re.compile(r"epoch=(\d+)-env_steps=(\d+)(?:-v\d+)?\.ckpt")


class IntervalCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` every ``save_interval`` epochs, keeping ``last.ckpt`` current.

    Lightning writes ``last.ckpt`` only when an interval checkpoint is due, so a run whose
    budget ends between intervals would leave a stale ``last.ckpt``. This callback also
    writes it when training ends, so ``fit(ckpt_path="last")`` and the final evaluation
    always see the final weights, optimizer state and counters.

    Files are named ``epoch=E-env_steps=S.ckpt``: the modules log ``step`` as the env-step
    count (the x-axis of every logger), which ``ModelCheckpoint`` reads for ``{step}``.
    Only the ``keep_last`` most recent numbered checkpoints stay on disk (``last.ckpt`` and
    ``best.ckpt`` are not counted), so a long run's disk use is bounded.

    Args:
        save_interval: Epochs between numbered checkpoints.
        keep_last: Numbered checkpoints kept (the newest); ``None`` keeps all of them.
        dirpath: Directory; ``None`` uses ``<trainer.log_dir>/checkpoints``: the first
            logger's directory (a W&B logger's ``save_dir``), or ``default_root_dir``.
        **kwargs: Passed to ``ModelCheckpoint``.
    """

    def __init__(self, save_interval: int = 1, dirpath: str | None = None, keep_last: int | None = None, **kwargs):
        if keep_last is not None and (not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last <= 0):
            raise ValueError(f"keep_last must be a positive integer or None (keep all), got {keep_last!r}.")
        self.keep_last = keep_last
        kwargs.setdefault("save_top_k", -1)
        # One last.ckpt, overwritten: a resumed run (whose last.ckpt the interruption wrote)
        # must not start a last-v1.ckpt beside it.
        kwargs.setdefault("enable_version_counter", False)
        kwargs.setdefault("filename", "epoch={epoch}-env_steps={step}")
        kwargs.setdefault("auto_insert_metric_name", False)
        super().__init__(dirpath=dirpath, every_n_epochs=save_interval, save_last=True, **kwargs)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = run_checkpoint_dir(trainer)
        self.module = pl_module  # its env steps name the checkpoints
        super().setup(trainer, pl_module, stage)

    def format_checkpoint_name(self, metrics: dict, filename: str | None = None, ver: int | None = None,
                               prefix: str | None = None) -> str:  # fmt: skip
        """The file name, ``env_steps`` the module's count at saving: Lightning's own ``step`` is ``global_step``
        where no evaluation set it (a resume that reruns an epoch's end), which ``keep_last`` would prune by."""
        if getattr(self, "module", None) is not None and hasattr(self.module, "env_steps"):
            metrics = {**metrics, "step": torch.tensor(self.module.env_steps)}
        return super().format_checkpoint_name(metrics, filename, ver, prefix)

    def _save_none_monitor_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict) -> None:
        super()._save_none_monitor_checkpoint(trainer, monitor_candidates)
        if self.keep_last is None or not trainer.is_global_zero or "://" in str(self.dirpath):
            return  # (remote directories: pruning is left to the store's own retention rules)
        # Read from the directory rather than kept in memory, so a resumed run prunes what
        # the interrupted one wrote too.
        numbered = sorted(
            (int(m.group(2)), int(m.group(1)), name)
            for name in os.listdir(self.dirpath)
            if (m := _NUMBERED.fullmatch(name))
        )
        for _, _, name in numbered[: -self.keep_last]:
            self._remove_checkpoint(trainer, os.path.join(self.dirpath, name))

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.fast_dev_run or trainer.sanity_checking or self.dirpath is None:
            return
        last = os.path.join(self.dirpath, self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION)
        if self._last_global_step_saved != trainer.global_step or not os.path.exists(last):
            trainer.save_checkpoint(last, weights_only=self.save_weights_only)
            self.last_model_path = last
            self._last_global_step_saved = trainer.global_step


class BestCheckpoint(ModelCheckpoint):
    """Keeps ``best.ckpt``: the state with the highest ``eval/return_mean`` seen so far.

    The selection reads the ``train`` object set's evaluation only, never ``eval_ood/``: the
    held-out set stays out of every choice, so its return measured on ``best.ckpt`` is still
    an honest out-of-distribution figure. Written after an evaluation that beats every earlier
    one (epochs without evaluation leave it alone).

    Args:
        dirpath: Directory; ``None`` uses ``<trainer.log_dir>/checkpoints`` like ``IntervalCheckpoint``.
        monitor: The metric to maximize.
    """

    def __init__(self, dirpath: str | None = None, monitor: str = "eval/return_mean"):
        super().__init__(
            dirpath=dirpath,
            monitor=monitor,
            mode="max",
            save_top_k=1,
            filename="best",
            auto_insert_metric_name=False,
            enable_version_counter=False,
        )

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.dirpath is None:
            self.dirpath = run_checkpoint_dir(trainer)
        super().setup(trainer, pl_module, stage)

    def _save_topk_checkpoint(self, trainer: pl.Trainer, monitor_candidates: dict) -> None:
        # Before the first evaluation there is nothing to compare (ModelCheckpoint would warn).
        if self.monitor in monitor_candidates:
            super()._save_topk_checkpoint(trainer, monitor_candidates)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoint files that are either the previous version or the complete new one, never a torn write.

    The checkpoint is serialized to a temporary file next to its destination, flushed to
    disk (``fsync``) and renamed over it (``os.replace``, atomic on POSIX and Windows). A
    crash or a kill at any moment leaves the previous file intact. Lightning's own writer
    stages the bytes in the system temp directory and moves them: when the run directory is
    on another filesystem (a scratch or network disk), that move is a copy, and a kill
    during it leaves a partial file under the checkpoint's name.

    Loading names the file and the fix when it is missing or is not a complete archive.
    Remote paths (``s3://...``) go through Lightning's writer unchanged.

    Installed by :func:`install_atomic_checkpoint_io` when an algorithm is set up.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: _PATH, storage_options: Any = None) -> None:
        path = os.fspath(path)
        if "://" in path or storage_options is not None:
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        with atomic_file(path) as tmp, open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())

    def load_checkpoint(
        self, path: _PATH, map_location: Any = lambda storage, loc: storage, weights_only: bool | None = None
    ) -> dict[str, Any]:
        check_checkpoint_file(path)
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # e.g. Windows, where directories cannot be opened
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_checkpoint_file(path: _PATH) -> dict[str, Any] | None:
    """Raise a clear error unless ``path`` is an existing, complete checkpoint archive written by rl_lightning (local
    paths only); the checkpoint, memory-mapped (only its metadata is read: not the weights or a replay buffer).

    Raises:
        FileNotFoundError: The file does not exist.
        ValueError: It is not a zip archive (``torch.save``'s format) whose entries match their checksums (a torn
            or corrupted write, another kind of file); torch cannot read it; or it has no :data:`CHECKPOINT_KEY`
            entry (a plain ``torch.save`` of weights, another library's checkpoint), which Lightning would fail on
            with a ``KeyError``.
    """
    path = os.fspath(path)
    if "://" in path:
        return None
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"Checkpoint '{path}' does not exist. Pass the path of a .ckpt file from a run's checkpoints/ directory."
        )
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()  # every entry read against its CRC-32: torch.load does not check them
    except (zipfile.BadZipFile, OSError, EOFError):
        damaged = "its end"
    if damaged:
        raise ValueError(
            f"Cannot read checkpoint '{path}': it is not a complete checkpoint archive ({damaged} is damaged: a "
            "write may have been interrupted, the disk corrupted it, or it is another kind of file). Use an earlier "
            "checkpoint from the same directory."
        )
    try:
        checkpoint = torch.load(path, weights_only=True, map_location="cpu", mmap=True)
    except Exception as err:  # a zip archive that torch cannot read, or one holding arbitrary objects
        raise ValueError(
            f"Cannot read checkpoint '{path}': {str(err).strip().splitlines()[0]} Pass a .ckpt file written "
            "by an rl_lightning run (its checkpoints/ directory)."
        ) from None
    if not isinstance(checkpoint, dict) or CHECKPOINT_KEY not in checkpoint:
        raise ValueError(
            f"Checkpoint '{path}' was not written by rl_lightning (it has no '{CHECKPOINT_KEY}' entry), so "
            "its algorithm and env cannot be rebuilt from it. Load it with the class that wrote it, or pass a .ckpt "
            "file from an rl_lightning run's checkpoints/ directory."
        )
    return checkpoint


def install_atomic_checkpoint_io(trainer: pl.Trainer) -> None:
    """Make the trainer's strategy write checkpoints atomically, unless the user chose a checkpoint IO.

    Only Lightning's default (``TorchCheckpointIO``) is replaced; strategies that write their
    own sharded checkpoints (DeepSpeed, FSDP) keep theirs.
    """
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()
