"""Interruption: a signal mid-rollout or mid-update writes a checkpoint that resumes to the same budget."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import zipfile

import pytest
import torch

from rl_lightning import PPO
from rl_lightning.callbacks import Interruption
from rl_lightning.faults import TrainingInterrupted, interrupt_request
from tests.callbacks import interrupt_probe as probe

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _probe(root, phase: str, ckpt: str | None = None, send: signal.Signals | None = None):
    """Run the probe; when it prints ``PAUSED``, send ``send``. Returns (returncode, stdout lines)."""
    args = [sys.executable, "-m", "tests.callbacks.interrupt_probe", str(root), phase, *([ckpt] if ckpt else [])]
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line.strip())
        if line.startswith("PAUSED") and send is not None:
            proc.send_signal(send)
    stderr = proc.stderr.read()
    proc.wait(timeout=120)
    assert lines, stderr
    return proc.returncode, lines, stderr


def _checkpoints_load(directory) -> list[str]:
    names = sorted(os.listdir(directory))
    for name in names:
        path = os.path.join(directory, name)
        assert name.endswith(".ckpt"), f"a stray file was left behind: {name}"
        assert zipfile.is_zipfile(path)
        assert PPO.load_from_checkpoint(path, map_location="cpu").policy is not None
    return names


@pytest.mark.parametrize(
    ("phase", "expected_steps"),
    [
        # The third rollout is cut short: its steps are not counted (2 rollouts of 128 done).
        ("rollout", 2 * 128),
        # The third rollout was collected and counted; its update phase stopped after the minibatch
        # step during which the signal came (the 5th of 16).
        ("update", 3 * 128),
    ],
)
def test_sigterm_then_resume_spends_the_budget_once(tmp_path, phase, expected_steps):
    """Test that SIGTERM mid-rollout / mid-update writes a loadable last.ckpt and that resuming ends at the budget."""
    code, lines, stderr = _probe(tmp_path, phase, send=signal.SIGTERM)
    assert lines[0] == f"PAUSED {phase}" and code == 3, stderr
    word, env_steps, global_step, ckpt = lines[-1].split()
    assert word == "INTERRUPTED" and int(env_steps) == expected_steps
    # Each completed update phase is 16 optimizer steps; a cut one keeps the ones it took.
    assert int(global_step) == (2 * 16 if phase == "rollout" else 2 * 16 + 5)
    assert ckpt == os.path.join(str(tmp_path), "checkpoints", "last.ckpt")
    assert "Received SIGTERM" in stderr
    assert "weights_only" not in stderr  # the checkpoint is whole on purpose: no "defaulting to False" notice
    saved = torch.load(ckpt, weights_only=False)
    assert saved["datamodule_hyper_parameters"]["num_envs"] == probe.NUM_ENVS
    assert _checkpoints_load(tmp_path / "checkpoints")

    code, lines, stderr = _probe(tmp_path, "none", ckpt=ckpt)
    assert code == 0, stderr
    word, env_steps, global_step = lines[-1].split()
    assert word == "FINISHED" and int(env_steps) == probe.BUDGET
    # keep_last=2 numbered checkpoints, plus last.ckpt: every one loads, no temporary file is left.
    # (Epoch numbers differ by phase: Lightning counts an epoch stopped inside its batch as done.)
    names = _checkpoints_load(tmp_path / "checkpoints")
    assert sorted(n.split("-env_steps=")[-1] for n in names) == ["1408.ckpt", "1536.ckpt", "last.ckpt"]
    final = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert final["RolloutDataModule"]["env_steps"] == probe.BUDGET


def test_signal_handlers_are_restored_and_a_second_sigint_aborts():
    """Test that the handler records the first SIGINT, raises KeyboardInterrupt on the second, and is removed."""
    callback = Interruption(signals=("SIGINT",))
    before = signal.getsignal(signal.SIGINT)

    class FakeTrainer:
        world_size = 1

    try:
        callback.on_train_start(FakeTrainer(), None)
        assert signal.getsignal(signal.SIGINT) == callback._handle
        callback._handle(signal.SIGINT, None)
        assert interrupt_request.signal_name == "SIGINT"
        with pytest.raises(TrainingInterrupted, match="SIGINT"):
            interrupt_request.check()
        with pytest.raises(KeyboardInterrupt):
            callback._handle(signal.SIGINT, None)
    finally:
        callback.on_train_end(FakeTrainer(), None)  # before Lightning's teardown restores its own
    assert signal.getsignal(signal.SIGINT) == before
    callback.setup(FakeTrainer(), None, "fit")  # the next fit starts without the stale request
    assert interrupt_request.signal_name is None


def test_unknown_signal_name_is_refused():
    """Test that a misspelt signal name is refused with the names to use."""
    with pytest.raises(ValueError, match="SIGTREM"):
        Interruption(signals=("SIGTREM",))


def test_an_env_beyond_its_restart_limit_stops_the_run_with_a_checkpoint(tmp_path):
    """Test that EnvFault (an env failing every episode, max_env_restarts=1) ends fit with a loadable last.ckpt."""
    import lightning.pytorch as pl

    from rl_lightning.faults import EnvFault
    from tests.envs.faulty_env import FAULTY_ID, faulty_sets
    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    pl.seed_everything(0)
    # Every episode of every instance raises at step 3: the recreated env fails again before finishing one.
    data = tiny_rollout_data(env_id=FAULTY_ID, obj_sets=faulty_sets(fault="step", at=3), max_env_restarts=1)
    model = tiny_ppo(total_timesteps=10_000)
    with pytest.raises(EnvFault) as info:
        quiet_trainer(tmp_path, max_epochs=-1).fit(model, data)
    data.close()
    last = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    message = str(info.value)
    assert "Faulty-v0" in message and "max_env_restarts" in message and f"Saved {last}" in message
    assert info.value.checkpoint == last
    assert PPO.load_from_checkpoint(last).policy is not None


def test_replay_interrupted_mid_epoch_resumes_the_rest_of_that_epoch(tmp_path):
    """Test that SIGTERM inside an off-policy epoch resumes only its remaining env steps: the budget is exact."""
    import lightning.pytorch as pl

    from rl_lightning import DQN
    from tests.helpers import REPLAY_STEPS, quiet_trainer, tiny_replay_data

    class SigtermAt(pl.Callback):
        def on_before_optimizer_step(self, trainer, module, optimizer):
            if trainer.global_step == 30:  # second epoch: learning started at env step 40
                os.kill(os.getpid(), signal.SIGTERM)

    pl.seed_everything(0)
    budget = 3 * REPLAY_STEPS
    data = tiny_replay_data("CartPole-v1", eval_interval=100)
    with pytest.raises(TrainingInterrupted) as info:
        quiet_trainer(tmp_path, max_epochs=-1, callbacks=[SigtermAt()]).fit(DQN(total_timesteps=budget), data)
    stopped_at = data.env_steps
    assert REPLAY_STEPS < stopped_at < 2 * REPLAY_STEPS  # inside the second epoch
    saved = torch.load(info.value.checkpoint, weights_only=False)["ReplayDataModule"]
    assert saved["ranks"][0]["epoch_steps"] == stopped_at - REPLAY_STEPS

    pl.seed_everything(0)
    resumed = tiny_replay_data("CartPole-v1", eval_interval=100)
    quiet_trainer(tmp_path, max_epochs=-1).fit(DQN(total_timesteps=budget), resumed, ckpt_path=info.value.checkpoint)
    assert resumed.env_steps == budget


def test_a_forked_env_worker_ignores_ctrl_c_and_dies_on_sigterm():
    """Test that the handler inherited by a forked async worker does not act as the trainer's."""
    import multiprocessing

    callback = Interruption(signals=("SIGINT", "SIGTERM"))

    class FakeTrainer:
        world_size = 1

    def worker(ignored, survived):  # runs in a forked child, where the handler is inherited
        callback._handle(signal.SIGINT, None)  # the group's Ctrl+C: ignored in the worker
        ignored.value = interrupt_request.signal_name is None
        callback._handle(signal.SIGTERM, None)  # EnvGroup stopping the worker: it dies as by default
        survived.value = 1

    callback.on_train_start(FakeTrainer(), None)
    try:
        context = multiprocessing.get_context("fork")
        ignored, survived = context.Value("i", 0), context.Value("i", 0)
        child = context.Process(target=worker, args=(ignored, survived))
        child.start()
        child.join(10)
        assert ignored.value == 1 and survived.value == 0 and child.exitcode == -signal.SIGTERM
    finally:
        callback.on_train_end(FakeTrainer(), None)
    assert interrupt_request.signal_name is None


def test_a_sigterm_before_training_starts_stops_with_a_checkpoint_to_resume_from(tmp_path):
    """Test a SIGTERM during the sanity check, caught by Lightning's handler before ours is installed: the run stops
    as at any safe point (``TrainingInterrupted``, ``last.ckpt``), not with Lightning's bare exception one epoch on."""
    import lightning.pytorch as pl

    from tests.helpers import tiny_ppo, tiny_rollout_data

    class SignalDuringSanityCheck(pl.Callback):
        def on_sanity_check_start(self, trainer, pl_module):
            os.kill(os.getpid(), signal.SIGTERM)

    data = tiny_rollout_data()
    trainer = pl.Trainer(max_epochs=-1, default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[SignalDuringSanityCheck()])  # fmt: skip
    with pytest.raises(TrainingInterrupted) as info:
        trainer.fit(tiny_ppo(total_timesteps=256, save_interval=1), data)
    assert info.value.checkpoint and os.path.isfile(info.value.checkpoint) and data.env_steps == 0


def test_a_resumed_fit_without_interval_checkpoints_leaves_its_end_in_last_ckpt(tmp_path):
    """Test that the last.ckpt an interruption wrote holds the end of the fit that resumed from it when nothing else
    writes last.ckpt (save_interval=None): it kept the interrupted state, so `play`, `export` and `test` of last.ckpt
    used a half-trained policy and a second resume redid the steps since, silently."""
    import lightning.pytorch as pl

    from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data

    class StopAtEpoch(pl.Callback):
        def on_train_epoch_end(self, trainer, pl_module):
            if trainer.current_epoch == 2:
                interrupt_request.request("SIGTERM")

    pl.seed_everything(0)
    last = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    with pytest.raises(TrainingInterrupted):
        quiet_trainer(tmp_path, max_epochs=-1, callbacks=[StopAtEpoch()]).fit(tiny_ppo(total_timesteps=256),
                                                                               tiny_rollout_data())  # fmt: skip
    assert torch.load(last, weights_only=False)["RolloutDataModule"]["env_steps"] == 3 * 32
    data = tiny_rollout_data()
    quiet_trainer(tmp_path, max_epochs=-1).fit(tiny_ppo(total_timesteps=256), data, ckpt_path=last)
    assert data.env_steps == 256
    assert torch.load(last, weights_only=False)["RolloutDataModule"]["env_steps"] == 256
