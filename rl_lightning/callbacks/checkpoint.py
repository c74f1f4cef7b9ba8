"""Interval checkpoints (the last ``keep_last`` kept), a ``last.ckpt`` that always holds the final state,
``best.ckpt``, and atomic checkpoint writes."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import tempfile
import weakref
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_warn

from rl_lightning.checks import check_positive_int


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
        with contextlib.suppress(OSError):  # the rename itself survives a power loss (Windows: no directory to open)
            fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            os.remove(tmp)  # gone already after the rename


def run_checkpoint_dir(trainer: pl.Trainer) -> str:
    """``<trainer.log_dir>/checkpoints``: the same for every logger kind (ModelCheckpoint's own
    default nests a W&B run under project/run-id), so a run keeps its checkpoints in one place."""
    return os.path.join(trainer.log_dir or trainer.default_root_dir, "checkpoints")


#: The checkpoint entry holding the algorithm's name, the data module's class and the spaces (``algos/ckpt.py``).
CHECKPOINT_KEY = "rl_lightning"
#: ``epoch=E-env_steps=S.ckpt``, the names ``IntervalCheckpoint`` writes (``-vN`` when a name repeats).
_NUMBERED = re.compile(r"epoch=(\d+)-env_steps=(\d+)(?:-v\d+)?\.ckpt")


class RunCheckpoint(ModelCheckpoint):
    """A ``ModelCheckpoint`` whose directory is the run's (:func:`run_checkpoint_dir`) unless ``dirpath`` is given."""

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.dirpath = run_checkpoint_dir(trainer) if self.dirpath is None else self.dirpath
        super().setup(trainer, pl_module, stage)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # From another directory: a copied or moved run's best.ckpt and last.ckpt are read here, with the best score
        # (Lightning keeps only the old best path); else the earlier files stay; a best found nowhere is written anew.
        if state_dict.get("dirpath") not in (None, self.dirpath):
            state_dict = {**state_dict, "dirpath": self.dirpath}
            for key in ("best_model_path", "last_model_path"):
                here = os.path.join(self.dirpath, os.path.basename(state_dict.get(key) or ""))
                state_dict[key] = here if os.path.isfile(here) else state_dict.get(key)
            if state_dict.get("best_model_path") and not os.path.isfile(state_dict["best_model_path"]):
                state_dict["best_model_score"] = None
        super().load_state_dict(state_dict)


class IntervalCheckpoint(RunCheckpoint):
    """A numbered checkpoint every ``save_interval`` collections, and a ``last.ckpt`` that always holds the end.

    Counted in the data module's collections (``counters.iterations``) and named by the module's env steps, as
    evaluations are: a resumed run saves on the uninterrupted run's grid under the same names (Lightning counts an epoch
    a stop cut as done), and a run whose optimizer has not stepped (DQN before ``learning_starts``) is saved too.
    ``ModelCheckpoint``'s own triggers, which count epochs and skip while ``global_step`` stands still, are off; it
    gives the file names, ``last_model_path`` and the directory Lightning's ``ckpt_path="last"`` searches.

    ``last.ckpt`` is written with each numbered checkpoint and when training ends, so a resume and
    the final evaluation see the final state. Files are ``epoch=E-env_steps=S.ckpt`` (``E`` counts
    collections from 0); only the ``keep_last`` newest stay (``last.ckpt`` and ``best.ckpt`` on top).

    Args:
        save_interval: Collections (epochs of an uninterrupted run) between numbered checkpoints.
        keep_last: Numbered checkpoints kept (the newest); ``None`` keeps all of them.
        dirpath: Directory; ``None`` uses ``<trainer.log_dir>/checkpoints``: the first
            logger's directory (a W&B logger's ``save_dir``), or ``default_root_dir``.
        **kwargs: Passed to ``ModelCheckpoint``.
    """

    def __init__(self, save_interval: int = 1, dirpath: str | None = None, keep_last: int | None = None, **kwargs):
        check_positive_int(keep_last=keep_last, none="None (keep all)")
        check_positive_int(save_interval=save_interval)
        self.save_interval, self.keep_last = save_interval, keep_last
        #: The env steps of the state ``last.ckpt`` holds (``None``: not written by this fit).
        self.saved_env_steps: int | None = None
        kwargs.setdefault("filename", "epoch={epoch}-env_steps={step}")
        kwargs.setdefault("auto_insert_metric_name", False)
        super().__init__(dirpath=dirpath, every_n_epochs=0, **kwargs)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        counters = getattr(trainer.datamodule, "counters", None)
        collections = counters.iterations if counters is not None else trainer.current_epoch + 1
        if trainer.sanity_checking or collections % self.save_interval:
            return
        for best in (c for c in trainer.checkpoint_callbacks if isinstance(c, BestCheckpoint)):
            best.on_train_epoch_end(trainer, pl_module)  # the epoch's best first: the files below hold its score
        env_steps = int(getattr(pl_module, "env_steps", trainer.global_step))
        metrics = {"epoch": torch.tensor(collections - 1), "step": torch.tensor(env_steps)}
        save_and_tell_loggers(self, trainer, self.format_checkpoint_name(metrics))
        self._write_last(trainer, env_steps)
        if self.keep_last is None or not trainer.is_global_zero:
            return
        # Read from the directory, so a resumed run prunes what the interrupted one wrote too; files of later env
        # steps (a resume from an older checkpoint) are not this run's: they stay until it overwrites them.
        for *_, name in [entry for entry in self._numbered() if entry[0] <= env_steps][: -self.keep_last]:
            trainer.strategy.remove_checkpoint(os.path.join(self.dirpath, name))

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        # A resume from an older checkpoint of this run goes on over the newer files: said before they are replaced.
        env_steps = int(getattr(pl_module, "env_steps", trainer.global_step))
        if trainer.ckpt_path and (later := [name for steps, _, name in self._numbered() if steps > env_steps]):
            rank_zero_warn(
                f"Resuming at env step {env_steps:,} in {self.dirpath}, which holds {len(later)} checkpoint(s) of "
                f"later env steps ({later[0]} to {later[-1]}): this run overwrites them and last.ckpt as it reaches "
                "them (best.ckpt when an evaluation beats the resumed best), and its logs replace the earlier run's "
                "from here on. To keep them, copy the run directory before resuming."
            )

    def _numbered(self) -> list[tuple[int, int, str]]:
        """``(env_steps, epoch, name)`` of the numbered checkpoints here, oldest first (none in a remote directory)."""
        if "://" in str(self.dirpath) or not os.path.isdir(self.dirpath):
            return []
        return sorted((int(m.group(2)), int(m.group(1)), name) for name in os.listdir(self.dirpath)
                      if (m := _NUMBERED.fullmatch(name)))  # fmt: skip

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.fast_dev_run or self.dirpath is None:
            return
        env_steps = int(getattr(pl_module, "env_steps", trainer.global_step))
        if self.saved_env_steps != env_steps or not os.path.exists(self.last_model_path):
            self._write_last(trainer, env_steps)

    def _write_last(self, trainer: pl.Trainer, env_steps: int) -> None:
        # Set before saving: it is part of the callback's state in the file.
        self.last_model_path = os.path.join(self.dirpath, self.CHECKPOINT_NAME_LAST + self.FILE_EXTENSION)
        save_and_tell_loggers(self, trainer, self.last_model_path)
        self.saved_env_steps = env_steps


def save_and_tell_loggers(callback: ModelCheckpoint, trainer: pl.Trainer, path: str) -> None:
    """``trainer.save_checkpoint``, then the loggers' ``after_save_checkpoint`` (W&B's and MLflow's ``log_model``
    upload from it), as ``ModelCheckpoint``'s own saves do."""
    trainer.save_checkpoint(path, weights_only=callback.save_weights_only)
    if trainer.is_global_zero:
        for logger in trainer.loggers:
            logger.after_save_checkpoint(weakref.proxy(callback))


class BestCheckpoint(RunCheckpoint):
    """Keeps ``best.ckpt``: the state with the highest ``eval/return_mean`` seen so far.

    The selection reads the ``train`` object set's evaluation only, never ``eval_ood/``: the held-out set stays out of
    every choice, so its return measured on ``best.ckpt`` is still an honest out-of-distribution figure. Written at the
    end of an epoch whose collection was evaluated (the data module's counters say so) when it beats every earlier
    evaluation: a score left in ``trainer.callback_metrics`` by an earlier evaluation is never paired with later
    weights. ``ModelCheckpoint``'s own triggers are off; it keeps ``best_model_score`` and ``best_model_path`` across a
    resume.

    Args:
        dirpath: Directory; ``None`` uses ``<trainer.log_dir>/checkpoints`` like ``IntervalCheckpoint``.
        monitor: The metric to maximize.
    """

    def __init__(self, dirpath: str | None = None, monitor: str = "eval/return_mean"):
        super().__init__(dirpath=dirpath, monitor=monitor, mode="max", every_n_epochs=0, filename="best")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        counters = getattr(trainer.datamodule, "counters", None)
        if counters is None or counters.evaluated == counters.iterations:
            self.offer(trainer, trainer.callback_metrics.get(self.monitor))

    def offer(self, trainer: pl.Trainer, score: torch.Tensor | float | None) -> None:
        """Write the trainer's state as ``best.ckpt`` if ``score``, its evaluation's, beats every earlier one (also
        called for the evaluation a resume reruns, ``RLModule._evaluate_cut``, outside the validation loop)."""
        score = None if score is None else torch.as_tensor(score, dtype=torch.float32)
        if trainer.sanity_checking or score is None or not torch.isfinite(score):
            return
        if self.best_model_score is None or score > self.best_model_score:
            # Set before saving: they are part of the callback's state in the file.
            self.best_model_score = score.detach().clone()
            self.best_model_path = os.path.join(self.dirpath, "best" + self.FILE_EXTENSION)
            save_and_tell_loggers(self, trainer, self.best_model_path)


class AtomicCheckpointIO(TorchCheckpointIO):
    """Checkpoint files that are either the previous version or the complete new one, never a torn write.

    Written by :func:`atomic_file` (a temporary file beside the destination, ``fsync``-ed and renamed over it), so a
    crash or a kill at any moment leaves the previous file intact. Lightning's own writer stages the bytes in the
    system temp directory and moves them: onto another filesystem (a scratch or network disk) that move is a copy,
    and a kill during it leaves a partial file under the checkpoint's name. Loading names the file and the fix when
    it is missing or not a complete archive. Remote paths (``s3://...``) go through Lightning's writer unchanged.
    Installed by :func:`install_atomic_checkpoint_io` when an algorithm is set up.
    """

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str | os.PathLike, storage_options: Any = None) -> None:
        path = os.fspath(path)
        if "://" in path or storage_options is not None:
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        with atomic_file(path) as tmp, open(tmp, "wb") as f:
            torch.save(checkpoint, f)
            f.flush()
            os.fsync(f.fileno())

    def load_checkpoint(self, path: str | os.PathLike, *args: Any, **kwargs: Any) -> dict[str, Any]:
        check_checkpoint_file(path)
        return super().load_checkpoint(path, *args, **kwargs)


def check_checkpoint_file(path: str | os.PathLike) -> dict[str, Any] | None:
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
        problem = "is a directory" if os.path.isdir(path) else "does not exist"
        raise FileNotFoundError(
            f"Checkpoint '{path}' {problem}. Pass the path of a .ckpt file from a run's checkpoints/ directory."
        )
    with open(path, "rb") as file:  # torch.save's zip archive begins so; an empty or zeroed head is a torn write
        if (head := file.read(4)).strip(b"\0") and not b"PK\x03\x04".startswith(head):
            raise ValueError(f"Cannot read checkpoint '{path}': it is not a checkpoint archive, but another kind of "
                             "file. Pass a .ckpt file from a run's checkpoints/ directory.")  # fmt: skip
    stat = os.stat(path)
    if damaged := _damaged_entry(os.path.abspath(path), stat.st_size, stat.st_mtime_ns):
        raise ValueError(
            f"Cannot read checkpoint '{path}': it is not a complete checkpoint archive ({damaged} is damaged: a "
            "write may have been interrupted, or the disk corrupted it). Use an earlier checkpoint from the same "
            "directory."
        )
    with zipfile.ZipFile(path) as archive:  # a TorchScript archive holds constants.pkl (as torch.load tells them)
        if any(name.endswith("/constants.pkl") for name in archive.namelist()):
            raise ValueError(f"'{path}' is an exported TorchScript policy (rl-lightning export), not a checkpoint: "
                             "load it with torch.jit.load, or pass the run's .ckpt file (checkpoints/).")  # fmt: skip
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


@functools.lru_cache(maxsize=4)
def _damaged_entry(path: str, size: int, mtime_ns: int) -> str | None:
    """The first entry of the archive whose bytes do not match its CRC-32 (``torch.load`` does not check them),
    ``"its end"`` when no archive can be read, else ``None``. Cached by size and modification time: a resume
    checks its file three or four times, and a replay buffer's can be gigabytes."""
    name = "its end"
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename
                if info.CRC:  # 0: written without one (torch.utils.serialization.config.save.compute_crc32)
                    with archive.open(info) as entry:
                        while entry.read(1 << 24):
                            pass
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error):
        return name
    return None


def install_atomic_checkpoint_io(trainer: pl.Trainer) -> None:
    """Make the trainer's strategy write checkpoints atomically, unless the user chose a checkpoint IO.

    Only Lightning's default (``TorchCheckpointIO``) is replaced; strategies that write their
    own sharded checkpoints (DeepSpeed, FSDP) keep theirs.
    """
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO()
