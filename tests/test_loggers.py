"""``rl_lightning.loggers``: W&B offline unless a key is configured; logs that run on across a resume."""

from __future__ import annotations

import csv
import os
import signal
import time

import lightning.pytorch as pl
import pytest
from lightning.pytorch.loggers import CSVLogger as LightningCSVLogger

from rl_lightning import DQN
from rl_lightning.callbacks import PhaseTimer
from rl_lightning.faults import TrainingInterrupted
from rl_lightning.loggers import (
    CSVLogger,
    TensorBoardLogger,
    WandbLogger,
    continue_loggers,
    logger_state,
    rewind_loggers,
    wandb_api_key_configured,
)
from tests.helpers import REPLAY_STEPS, quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data


@pytest.fixture
def no_key(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    return tmp_path


def test_auto_mode_is_offline_without_a_key(no_key):
    """Test that mode='auto' logs offline when no API key is configured."""
    assert not wandb_api_key_configured()
    logger = WandbLogger(save_dir=str(no_key), mode="auto")
    assert logger.mode == "offline" and logger._offline


def test_auto_mode_is_online_with_a_key_in_env_or_netrc(no_key, monkeypatch):
    """Test that a WANDB_API_KEY or a netrc entry for the W&B host makes mode='auto' online."""
    (no_key / "netrc").write_text("machine api.wandb.ai login user password abc123\n")
    assert wandb_api_key_configured()
    assert WandbLogger(save_dir=str(no_key)).mode == "online"
    (no_key / "netrc").unlink()
    monkeypatch.setenv("WANDB_API_KEY", "abc123")
    assert WandbLogger(save_dir=str(no_key)).mode == "online"


def test_online_without_a_key_fails_early_with_the_fix(no_key):
    """Test that mode='online' with no key raises before any run starts, naming wandb login and offline mode."""
    with pytest.raises(ValueError, match="wandb login.*offline"):
        WandbLogger(save_dir=str(no_key), mode="online")


def test_unknown_mode_is_refused(no_key):
    """Test that a mode outside auto/online/offline is refused with the choices."""
    with pytest.raises(ValueError, match="auto.*online.*offline"):
        WandbLogger(save_dir=str(no_key), mode="cloud")


def test_a_resumed_wandb_run_continues_under_the_stored_id(no_key, monkeypatch):
    """Test that continue_loggers points a W&B logger at a checkpoint's run id, also where W&B was set up earlier in
    the process (with another WANDB_RUN_ID), that logger_state reads it back, and that a started run refuses another."""
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_RUN_ID", "set-up-before")
    earlier = WandbLogger(save_dir=str(no_key), mode="offline").experiment
    earlier.finish()
    logger = WandbLogger(save_dir=str(no_key), mode="offline")
    continue_loggers([logger], {"wandb_run_id": "abc123xyz"})
    run = logger.experiment
    try:
        assert run.id == "abc123xyz" and logger_state([logger]) == {"wandb_run_id": "abc123xyz"}
        with pytest.raises(RuntimeError, match="before the W&B run starts"):
            logger.continue_run("another")
    finally:
        run.finish()


# ---------------------------------------------------------------- logs across a resume
def _csv_steps(run_dir) -> dict[str, list[int]]:
    """Per metric, the env steps of its rows in ``run_dir/metrics.csv``."""
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as file:
        rows = list(csv.DictReader(file))
    steps: dict[str, list[int]] = {}
    for row in rows:
        for key, value in row.items():
            if value != "" and key != "step":
                steps.setdefault(key, []).append(int(float(row["step"])))
    return steps


def _tensorboard_steps(run_dir) -> dict[str, list[int]]:
    """Per scalar tag, the env steps TensorBoard draws from the event files in ``run_dir`` (restart markers applied)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return {tag: [event.step for event in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


EPISODE_KEYS = ("rollout/episode_return", "rollout/episode_length")


def _without(steps: dict[str, list[int]], keys) -> dict[str, list[int]]:
    return {key: value for key, value in steps.items() if key not in keys}


class _SigtermAt(pl.Callback):
    """Sends SIGTERM to this process at ``hook`` of epoch ``epoch`` (the Interruption callback handles it)."""

    def __init__(self, hook: str, epoch: int):
        self.hook, self.epoch = hook, epoch

    def _maybe(self, trainer, hook):
        if hook == self.hook and trainer.current_epoch == self.epoch:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_epoch_start(self, trainer, module):
        self._maybe(trainer, "rollout")  # the rollout that follows is cut short

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._maybe(trainer, "update")  # PPO: the rollout is complete, the update stops after one minibatch

    def on_before_optimizer_step(self, trainer, module, optimizer):
        if self.hook == "replay" and trainer.global_step == 30:  # DQN: inside the second epoch of 60 steps
            os.kill(os.getpid(), signal.SIGTERM)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self._maybe(trainer, "batch_end")  # the update is complete; its evaluation has not run

    def on_validation_start(self, trainer, module):
        self._maybe(trainer, "evaluation")  # the evaluation stops between its steps


#: Tiny runs of each kind: 12 rollouts of 32 steps (PPO), 4 replay epochs of 60 (DQN); evaluated every 2 epochs.
EPOCH_STEPS, EPOCHS = {"ppo": 32, "dqn": REPLAY_STEPS}, {"ppo": 12, "dqn": 4}


def _fit(run_dir, algo="ppo", callbacks=(), ckpt_path=None, **model_args):
    """A tiny run of ``algo`` with both loggers of this module in ``run_dir``."""
    if ckpt_path is not None:
        # TensorBoard reads a directory's event files in name order, and a name holds the second it was
        # created plus a per-process counter (".9" sorts after ".10"): a resumed run started in the same
        # second by the same process could be read first. Separate runs never share a second and a pid.
        time.sleep(1.0)
    pl.seed_everything(0)
    loggers = [CSVLogger(run_dir, name="", version=""), TensorBoardLogger(run_dir, name="", version="")]
    trainer = quiet_trainer(run_dir, max_epochs=-1, logger=loggers, callbacks=[PhaseTimer(False), *callbacks])
    budget = EPOCHS[algo] * EPOCH_STEPS[algo]
    if algo == "ppo":
        model, data = tiny_ppo(total_timesteps=budget, **model_args), tiny_rollout_data(eval_interval=2)
    else:
        model, data = DQN(total_timesteps=budget, **model_args), tiny_replay_data("CartPole-v1", eval_interval=2)
    trainer.fit(model, data, ckpt_path=ckpt_path)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Per algorithm, the (CSV, TensorBoard) env steps of each metric of an uninterrupted run."""
    runs = {}
    for algo in EPOCHS:
        run_dir = tmp_path_factory.mktemp(f"uninterrupted_{algo}")
        _fit(str(run_dir), algo)
        runs[algo] = _csv_steps(run_dir), _tensorboard_steps(run_dir)
    return runs


def _assert_same_rows(run_dir, expected_runs):
    for resumed, expected in zip((_csv_steps(run_dir), _tensorboard_steps(run_dir)), expected_runs, strict=True):
        # Episode statistics are logged in the epochs where an episode ended, and a resume restarts the
        # episodes: those rows may fall in other epochs, but only at an epoch's end. Everything else matches.
        epoch_ends = set(expected["time/rollout_seconds"])
        assert all(set(resumed.get(key, ())) <= epoch_ends for key in EPISODE_KEYS)
        assert _without(resumed, EPISODE_KEYS) == _without(expected, EPISODE_KEYS)


@pytest.mark.parametrize(
    ("algo", "cut"),
    [("ppo", "rollout"), ("ppo", "update"), ("ppo", "batch_end"), ("ppo", "evaluation"), ("dqn", "replay")],
)
def test_a_resumed_run_logs_the_same_env_steps_as_an_uninterrupted_one(tmp_path, uninterrupted, algo, cut):
    """Test that SIGTERM anywhere in an epoch, then a resume, leaves metrics.csv and TensorBoard with every
    metric at exactly the env steps an uninterrupted run of the same seed logs it (no row lost, none twice),
    and the evaluations on the same grid."""
    run_dir = str(tmp_path)
    with pytest.raises(TrainingInterrupted) as stopped:
        _fit(run_dir, algo, callbacks=[_SigtermAt(cut, epoch=3)])
    _fit(run_dir, algo, ckpt_path=stopped.value.checkpoint)
    _assert_same_rows(run_dir, uninterrupted[algo])
    evaluated = uninterrupted[algo][0]["eval/return_mean"]
    grid = 2 * EPOCH_STEPS[algo]
    assert evaluated == list(range(grid, EPOCHS[algo] * EPOCH_STEPS[algo] + 1, grid))


def test_resuming_from_an_older_checkpoint_drops_the_rows_logged_after_it(tmp_path, uninterrupted):
    """Test that a finished run resumed from an interval checkpoint halfway logs the second half once:
    metrics.csv loses the first run's rows after the checkpoint, TensorBoard no longer draws them."""
    run_dir = str(tmp_path)
    _fit(run_dir, save_interval=1, keep_last=None)
    halfway = os.path.join(run_dir, "checkpoints", "epoch=5-env_steps=192.ckpt")
    _fit(run_dir, ckpt_path=halfway, save_interval=1, keep_last=None)
    _assert_same_rows(run_dir, uninterrupted["ppo"])


def test_two_resumes_from_one_interruption_and_a_second_final_test_log_each_csv_row_once(tmp_path, uninterrupted):
    """Test that rows logged at a checkpoint's env step after it was written (the evaluation a resume owed, which a
    second resume from the same file reruns; a finished run's final test, tested again) are not kept by the rewind:
    they came twice, and the plot read the final test's return as the evaluation's."""
    import shutil

    run_dir = str(tmp_path)
    with pytest.raises(TrainingInterrupted) as stopped:
        _fit(run_dir, "ppo", callbacks=[_SigtermAt("batch_end", epoch=3)])
    cut = shutil.copy(stopped.value.checkpoint, tmp_path / "cut.ckpt")  # the first resume rewrites last.ckpt
    for _ in range(2):  # the first resume may have died before a newer checkpoint: the same file again
        _fit(run_dir, "ppo", ckpt_path=cut)
    resumed, expected = _csv_steps(run_dir), uninterrupted["ppo"][0]
    assert _without(resumed, EPISODE_KEYS) == _without(expected, EPISODE_KEYS)
    last = os.path.join(run_dir, "checkpoints", "last.ckpt")
    for _ in range(2):  # a finished run's final test, and the same again after resuming it
        data = tiny_rollout_data(eval_interval=2)
        trainer = quiet_trainer(run_dir, max_epochs=-1, logger=CSVLogger(run_dir, name="", version=""))
        trainer.fit(tiny_ppo(total_timesteps=EPOCHS["ppo"] * EPOCH_STEPS["ppo"]), data, ckpt_path=last)
        trainer.test(ckpt_path=None, datamodule=data)
    final = EPOCHS["ppo"] * EPOCH_STEPS["ppo"]
    assert _csv_steps(run_dir)["eval/return_mean"].count(final) == 2  # the last evaluation, and one final test


def test_a_resume_with_lightnings_csv_logger_warns_that_its_history_is_gone(tmp_path):
    """Test that rewinding Lightning's own CSVLogger on a resume warns and names this module's CSVLogger."""
    with pytest.warns(UserWarning, match="rl_lightning.loggers.CSVLogger"):
        rewind_loggers([LightningCSVLogger(str(tmp_path))], env_steps=128)


def test_a_fresh_fit_in_a_logged_directory_keeps_the_earlier_rows_aside_and_says_where(tmp_path):
    """Test that a fresh fit (env step 0) where an earlier fit wrote metrics.csv moves those rows to a file of their
    own and warns naming it (they were deleted without a word: Lightning's warning was silenced for resumes)."""
    earlier = CSVLogger(str(tmp_path), name="", version="")
    earlier.log_metrics({"eval/return_mean": 21.0}, step=128)
    earlier.save()
    before = (tmp_path / "metrics.csv").read_text()
    fresh = CSVLogger(str(tmp_path), name="", version="")
    with pytest.warns(UserWarning, match=r"metrics.csv held 1 rows of an earlier fit.*keeps them in .*metrics-before-"):
        rewind_loggers([fresh], env_steps=0)
    (aside,) = tmp_path.glob("metrics-before-*.csv")
    assert aside.read_text() == before and not (tmp_path / "metrics.csv").exists()
    fresh.log_metrics({"eval/return_mean": 9.0}, step=64)
    fresh.save()
    assert [row["step"] for row in csv.DictReader(open(tmp_path / "metrics.csv"))] == ["64"]
    with pytest.warns(UserWarning, match="keeps them in"):  # again within the same second: a file of its own
        rewind_loggers([CSVLogger(str(tmp_path), name="", version="")], env_steps=0)
    kept = sorted(path.read_text() for path in tmp_path.glob("metrics-before-*.csv"))
    assert kept == sorted([before, "eval/return_mean,step\n9.0,64\n"])
