"""BestCheckpoint keeps the state of the best evaluation, and only evaluations count."""

from __future__ import annotations

import os

import lightning.pytorch as pl
import pytest
import torch
from torch.utils.data import DataLoader

from rl_lightning.callbacks import BestCheckpoint

# eval/return_mean of the epochs that evaluate; None: no evaluation that epoch.
RETURNS = [1.0, None, 3.0, 2.0, None, 5.0, 4.0]


class _ScriptedModule(pl.LightningModule):
    """Logs a scripted eval/return_mean at validation and a marker of the epoch in its weights."""

    def __init__(self):
        super().__init__()
        self.marker = torch.nn.Parameter(torch.zeros(()))

    def training_step(self, batch, batch_idx):
        return (self.marker * 0).sum()

    def on_train_epoch_start(self):
        with torch.no_grad():
            self.marker.fill_(self.current_epoch)

    def validation_step(self, batch, batch_idx):
        value = RETURNS[self.current_epoch]
        if value is not None:
            self.log("eval/return_mean", value)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_best_checkpoint_holds_the_epoch_of_the_highest_evaluation(tmp_path):
    """Test that best.ckpt is the epoch whose eval/return_mean was highest (5.0, epoch 5), a single file."""
    data = DataLoader(torch.zeros(2, 1), batch_size=1)
    trainer = pl.Trainer(
        max_epochs=len(RETURNS),
        default_root_dir=tmp_path,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[BestCheckpoint()],
    )
    trainer.fit(_ScriptedModule(), data, data)
    files = os.listdir(tmp_path / "checkpoints")
    assert files == ["best.ckpt"]
    state = torch.load(tmp_path / "checkpoints" / "best.ckpt", weights_only=True)
    assert state["epoch"] == 5 and state["state_dict"]["marker"].item() == 5.0


def test_best_checkpoint_takes_a_score_only_at_the_collection_it_evaluated(tmp_path):
    """Test that a score left in callback_metrics by an earlier evaluation (the one a resume reruns, say) is not
    saved with the weights of a later, unevaluated collection, and that a later lower score does not replace it."""
    from types import SimpleNamespace

    from rl_lightning.data.collection import DataCounters

    saved = []
    counters = DataCounters(env_steps=256, iterations=2, evaluated=1)
    trainer = SimpleNamespace(
        datamodule=SimpleNamespace(counters=counters),
        callback_metrics={"eval/return_mean": torch.tensor(10.0)},
        sanity_checking=False,
        save_checkpoint=lambda path, weights_only=False: saved.append(path),
        is_global_zero=True,
        loggers=[],
    )
    callback = BestCheckpoint(dirpath=str(tmp_path))
    callback.on_train_epoch_end(trainer, None)
    assert saved == [] and callback.best_model_score is None  # collection 2 was not evaluated: the score is older
    counters.evaluated = 2
    callback.on_train_epoch_end(trainer, None)
    assert saved == [str(tmp_path / "best.ckpt")] and callback.best_model_score == 10.0
    counters.iterations = counters.evaluated = 3
    trainer.callback_metrics["eval/return_mean"] = torch.tensor(5.0)
    callback.on_train_epoch_end(trainer, None)
    assert len(saved) == 1 and callback.best_model_path == str(tmp_path / "best.ckpt")


# ---------------------------------------------------------------- atomic writes, keep_last, resume errors
def _fit_ppo(tmp_path, **model_kwargs):
    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    pl.seed_everything(0)
    model = tiny_ppo(total_timesteps=10_000, save_interval=1, **model_kwargs)
    data = tiny_rollout_data(eval_interval=100)
    trainer = quiet_trainer(tmp_path, max_epochs=5)
    trainer.fit(model, data)
    return trainer, model, data


def test_a_write_killed_midway_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch):
    """Test that a write failing halfway raises, leaves no partial or temporary file, and the old file loads."""
    from rl_lightning import PPO
    from rl_lightning.callbacks import AtomicCheckpointIO
    from rl_lightning.callbacks import checkpoint as checkpoint_module

    trainer, model, _ = _fit_ppo(tmp_path, keep_last=None)
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    last = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    before = open(last, "rb").read()
    good = PPO.load_from_checkpoint(last).state_dict()

    def torn_save(obj, f):
        f.write(b"PK\x03\x04 half a checkpoint")  # the start of a zip archive, then the process dies
        raise OSError("No space left on device")

    monkeypatch.setattr(checkpoint_module.torch, "save", torn_save)
    with torch.no_grad():
        model.policy.actor[0].weight.add_(1.0)  # what the failed write would have stored
    with pytest.raises(OSError, match="No space left"):
        trainer.save_checkpoint(last)
    monkeypatch.undo()
    assert open(last, "rb").read() == before
    assert sorted(f for f in os.listdir(tmp_path / "checkpoints") if not f.endswith(".ckpt")) == []
    restored = PPO.load_from_checkpoint(last).state_dict()
    assert all(torch.equal(restored[k], good[k]) for k in good)


def test_keep_last_bounds_the_interval_checkpoints(tmp_path):
    """Test that keep_last=2 leaves the two newest numbered checkpoints (and last.ckpt), deleting older ones."""
    _fit_ppo(tmp_path, keep_last=2)
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    # 5 epochs of 2 envs x 16 steps: checkpoints at 32 ... 160 env steps; the last two stay.
    assert names == ["epoch=3-env_steps=128.ckpt", "epoch=4-env_steps=160.ckpt", "last.ckpt"]


def test_resuming_an_older_checkpoint_of_the_run_warns_of_what_it_overwrites(tmp_path):
    """Test that a resume from last.ckpt says nothing, and one from an older checkpoint of the same run directory
    names the later checkpoints it will overwrite before it overwrites any."""
    import warnings

    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    def resume(name: str, max_epochs: int) -> None:
        model, data = tiny_ppo(total_timesteps=10_000, save_interval=1), tiny_rollout_data(eval_interval=100)
        quiet_trainer(tmp_path, max_epochs=max_epochs).fit(model, data, ckpt_path=str(tmp_path / "checkpoints" / name))

    _fit_ppo(tmp_path)  # checkpoints at 32 ... 160 env steps, last.ckpt at 160
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        resume("last.ckpt", max_epochs=6)
    assert not [w for w in caught if "later env steps" in str(w.message)]
    later = r"4 checkpoint\(s\) of later env steps \(epoch=2-env_steps=96.ckpt to epoch=5-env_steps=192.ckpt\)"
    with pytest.warns(UserWarning, match=rf"env step 64 in .*{later}: this run overwrites them"):
        resume("epoch=1-env_steps=64.ckpt", max_epochs=3)


def test_keep_last_prunes_the_run_s_own_checkpoints_after_a_resume_from_an_older_one(tmp_path):
    """Test that keep_last, after a resume from an older checkpoint, keeps the checkpoints the resumed run writes:
    the later files of the earlier run are not counted (they stay until overwritten)."""
    import shutil

    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    _fit_ppo(tmp_path, keep_last=2)  # leaves epoch=3 (128) and epoch=4 (160)
    older = tmp_path / "older.ckpt"
    pl.seed_everything(0)
    quiet_trainer(tmp_path / "first", max_epochs=2).fit(
        tiny_ppo(total_timesteps=10_000, save_interval=1), tiny_rollout_data(eval_interval=100)
    )
    shutil.copy(tmp_path / "first" / "checkpoints" / "epoch=1-env_steps=64.ckpt", older)
    with pytest.warns(UserWarning, match="later env steps"):
        quiet_trainer(tmp_path, max_epochs=4).fit(
            tiny_ppo(total_timesteps=10_000, save_interval=1, keep_last=2), tiny_rollout_data(eval_interval=100),
            ckpt_path=str(older),
        )  # fmt: skip
    names = sorted(os.listdir(tmp_path / "checkpoints"))
    # The resumed run's 96 and 128 (the earlier 128 overwritten) and the earlier run's 160, until overwritten. Before,
    # 96 was pruned as soon as it was written: the earlier run's 128 and 160 counted as the newest two.
    assert names == [
        "epoch=2-env_steps=96.ckpt",
        "epoch=3-env_steps=128.ckpt",
        "epoch=4-env_steps=160.ckpt",
        "last.ckpt",
    ]


@pytest.mark.parametrize("keep_last", [0, -1, 2.5, True])
def test_impossible_keep_last_is_refused(keep_last):
    """Test that keep_last must be a positive integer or None, named in the error."""
    from rl_lightning import PPO

    with pytest.raises(ValueError, match="keep_last must be a positive integer"):
        PPO(keep_last=keep_last)


@pytest.mark.parametrize(
    "content", [b"", b"\0" * 4096 + b"PK", b"not a checkpoint at all", None], ids=["empty", "zeroed", "text", "none"]
)
def test_resuming_from_a_corrupt_or_missing_checkpoint_names_the_file_before_any_step(tmp_path, content):
    """Test that fit(ckpt_path=...) on a torn, foreign or missing file stops before an env step, naming the file."""
    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    path = tmp_path / "last.ckpt"
    if content is not None:
        path.write_bytes(content)
    data = tiny_rollout_data()
    torn = content is not None and not content.strip(b"\0PK")  # empty, or a head zeroed by the disk
    expected = "does not exist" if content is None else "not a complete" if torn else "another kind of file"
    with pytest.raises((ValueError, FileNotFoundError), match=expected) as info:
        quiet_trainer(tmp_path).fit(tiny_ppo(total_timesteps=64), data, ckpt_path=str(path))
    assert str(path) in str(info.value) and data.env_steps == 0
    if content is not None:
        assert path.read_bytes() == content


def test_a_plain_torch_save_file_is_refused_by_load_and_by_a_resume_naming_it(tmp_path):
    """Test that a file of weights saved with ``torch.save`` (a zip archive, but no rl_lightning checkpoint) is refused
    with the fix by ``load_from_checkpoint`` and by ``fit(ckpt_path=...)`` (Lightning raised ``KeyError``)."""
    from rl_lightning import PPO
    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    path = str(tmp_path / "policy_weights.pt")
    torch.save({"actor.0.weight": torch.zeros(2, 2)}, path)
    with pytest.raises(ValueError, match="policy_weights.pt' was not written by rl_lightning .* checkpoints/"):
        PPO.load_from_checkpoint(path)
    with pytest.raises(ValueError, match="policy_weights.pt' was not written by rl_lightning"):
        quiet_trainer(max_epochs=1).fit(tiny_ppo(total_timesteps=64), tiny_rollout_data(), ckpt_path=path)


def test_interval_checkpoints_follow_collections_while_the_optimizer_has_not_stepped(tmp_path):
    """Test that DQN before learning_starts (global_step still 0) writes a numbered checkpoint every collection,
    named with the module's env steps, and a last.ckpt holding the end: Lightning's trigger skipped every save while
    global_step had not moved, so a crash lost the warm-up and last.ckpt was stale."""
    from rl_lightning import DQN
    from tests.helpers import REPLAY_STEPS, quiet_trainer, tiny_replay_data

    trainer = quiet_trainer(tmp_path, max_epochs=3)
    trainer.fit(DQN(hidden_sizes=[8], save_interval=1), tiny_replay_data("CartPole-v1", learning_starts=10_000))
    assert trainer.global_step == 0
    names = sorted(os.listdir(tmp_path / "checkpoints"), key=lambda n: len(n))
    expected = [f"epoch={e}-env_steps={(e + 1) * REPLAY_STEPS}.ckpt" for e in range(3)]
    assert sorted(n for n in names if n.startswith("epoch=")) == sorted(expected)
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert last["ReplayDataModule"]["env_steps"] == 3 * REPLAY_STEPS


def test_a_checkpoint_whose_weights_were_zeroed_on_disk_is_refused_naming_the_entry(tmp_path):
    """Test that bytes zeroed inside a checkpoint's weights (a disk that corrupted it: torch.load reads them
    silently) are refused by load_from_checkpoint, naming the file and the damaged entry."""
    import struct
    import zipfile

    from rl_lightning import PPO
    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    quiet_trainer(tmp_path, max_epochs=1).fit(tiny_ppo(total_timesteps=64, save_interval=1), tiny_rollout_data())
    path = tmp_path / "checkpoints" / "last.ckpt"
    PPO.load_from_checkpoint(path)  # whole, it loads
    with zipfile.ZipFile(path) as archive:
        entry = max(archive.infolist(), key=lambda info: info.file_size)  # the largest tensor's bytes
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[entry.header_offset + 26 : entry.header_offset + 30])
    start = entry.header_offset + 30 + name_len + extra_len
    data[start : start + 64] = bytes(64)
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=f"{entry.filename} is damaged") as info:
        PPO.load_from_checkpoint(path)
    assert str(path) in str(info.value) and "earlier checkpoint" in str(info.value)


def test_a_checkpoint_written_without_crcs_loads(tmp_path, monkeypatch):
    """Test that a checkpoint torch wrote without CRC-32s (its compute_crc32=False, a documented speed option: each
    entry's CRC is 0) is not taken for a damaged one."""
    import torch.utils.serialization

    from rl_lightning import PPO
    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    monkeypatch.setattr(torch.utils.serialization.config.save, "compute_crc32", False)
    quiet_trainer(tmp_path, max_epochs=1).fit(tiny_ppo(total_timesteps=64, save_interval=1), tiny_rollout_data())
    path = tmp_path / "checkpoints" / "last.ckpt"
    assert PPO.load_from_checkpoint(path).policy is not None


def test_checkpoint_writes_reach_the_loggers_after_save_checkpoint_hook(tmp_path):
    """Test that every interval, last and best checkpoint write calls the loggers' after_save_checkpoint (W&B's and
    MLflow's log_model upload from it), as ModelCheckpoint's own saves do."""
    from lightning.pytorch.loggers import CSVLogger

    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    class Recording(CSVLogger):
        def after_save_checkpoint(self, checkpoint_callback):
            calls.append(checkpoint_callback.__class__.__name__)  # a weakref.proxy, as Lightning passes

    calls = []
    trainer = quiet_trainer(tmp_path, max_epochs=2, logger=Recording(tmp_path))
    trainer.fit(tiny_ppo(total_timesteps=10_000, save_interval=1), tiny_rollout_data())
    assert calls.count("IntervalCheckpoint") == 4 and calls.count("BestCheckpoint") >= 1  # 2 numbered, 2 last


def test_a_copied_or_moved_run_resumes_with_its_own_best_and_last_checkpoints(tmp_path):
    """Test that a resume from another directory than the checkpoint's reads best.ckpt and last.ckpt in the new place
    when they are there (a copied or moved run), keeps the best score (Lightning kept only the old best path, so a worse
    evaluation overwrote best.ckpt), keeps the earlier run's files otherwise, and forgets a best found nowhere."""
    old, new = tmp_path / "old" / "checkpoints", tmp_path / "new" / "checkpoints"
    saved = {"dirpath": str(old), "best_model_path": str(old / "best.ckpt"), "last_model_path": str(old / "last.ckpt"),
             "best_model_score": torch.tensor(119.8), "monitor": "eval/return_mean", "current_score": None,
             "best_k_models": {}, "kth_best_model_path": "", "kth_value": None}  # fmt: skip

    def restored(*files: os.PathLike) -> BestCheckpoint:
        for file in files:
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(b"")
        callback = BestCheckpoint(dirpath=str(new))
        callback.load_state_dict(dict(saved))
        return callback

    copied = restored(old / "best.ckpt", new / "best.ckpt", new / "last.ckpt")  # copied: both directories hold files
    assert copied.best_model_path == str(new / "best.ckpt") and copied.last_model_path == str(new / "last.ckpt")
    assert float(copied.best_model_score) == pytest.approx(119.8)
    (old / "best.ckpt").unlink()  # moved: only the new directory holds them
    assert restored().best_model_path == str(new / "best.ckpt") and float(restored().best_model_score) > 119
    for file in new.iterdir():
        file.unlink()
    (old / "best.ckpt").write_bytes(b"")  # resumed into a new directory: the earlier run's best stays the best
    elsewhere = restored()
    assert elsewhere.best_model_path == str(old / "best.ckpt") and float(elsewhere.best_model_score) > 119
    (old / "best.ckpt").unlink()  # a best file found nowhere: the next evaluation writes one
    assert restored().best_model_score is None
