"""``python train.py``: end-to-end runs in subprocesses, asserting on the files and metrics they write."""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys

import pytest
import torch
import yaml

from rl_lightning.launch.curves import read_curves
from tests.launch.conftest import TINY, TRAIN, read_summary, run, run_train


def _metrics(run_dir: str) -> list[dict[str, str]]:
    with open(os.path.join(run_dir, "metrics.csv"), newline="") as f:
        return list(csv.DictReader(f))


def test_run_with_overrides_writes_everything_under_one_run_dir(tmp_path):
    """Test that an overridden run trains, evaluates both sets, checkpoints, logs (W&B offline, CSV), summarizes;
    with the video switch on, it films evaluations too."""
    videos = "callbacks.video.video_interval=2"
    proc = run_train([*TINY, "algo.lr=5e-4", "env.num_envs=4", "seed=3", videos, "hydra.run.dir=runs/one"], tmp_path)
    run_dir = tmp_path / "runs" / "one"
    summary = read_summary(run_dir)
    # 4 envs x 32 steps = 128 per epoch: the 512-step budget is 4 epochs.
    assert summary["env_steps"] == 512 and summary["seed"] == 3
    assert summary["eval_return"] is not None and summary["eval_ood_return"] is not None
    assert summary["generalization_gap"] == pytest.approx(summary["eval_return"] - summary["eval_ood_return"], abs=1e-3)
    assert summary["checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt")
    assert "Run summary:" in proc.stdout and "generalization gap" in proc.stdout and "env steps/s" in proc.stdout
    # The timing profiler's table ends fit.
    assert "env stepping" in proc.stdout + proc.stderr and "optimization" in proc.stdout + proc.stderr
    # Overrides reached the objects: the checkpoint holds them.
    ckpt = torch.load(summary["checkpoint"], weights_only=True)
    assert ckpt["hyper_parameters"]["lr"] == 5e-4 and ckpt["datamodule_hyper_parameters"]["num_envs"] == 4
    assert sorted(os.listdir(run_dir / "checkpoints")) == [
        "best.ckpt",
        *(f"epoch={e}-env_steps={128 * (e + 1)}.ckpt" for e in range(4)),
        "last.ckpt",
    ]
    # Every evaluation of both object sets is in the CSV log against env steps.
    curves = read_curves(str(run_dir))
    assert list(curves["eval/return_mean"][0]) == [128, 256, 384, 512]
    assert list(curves["eval_ood/return_mean"][0]) == [128, 256, 384, 512]
    rows = _metrics(run_dir)
    assert any(r["train/policy_loss"] for r in rows) and any(r["time/env_seconds"] for r in rows)
    # The resolved config is saved and logged.
    with open(run_dir / "config.yaml") as f:
        config = yaml.safe_load(f)
    assert config["algo"]["lr"] == 5e-4 and config["run_dir"] == str(run_dir.resolve())
    with open(run_dir / "hparams.yaml") as f:
        assert yaml.safe_load(f)["config"]["env"]["num_envs"] == 4
    # With no API key and no network, W&B wrote an offline run in the run dir.
    wandb_files = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(wandb_files) == 1 and os.path.getsize(wandb_files[0]) > 0
    # The video switch: every 2nd of the 4 evaluations filmed on both sets, as files and in W&B.
    for obj_set in ("train", "test"):
        assert sorted(os.listdir(run_dir / "videos" / obj_set)) == ["env_steps=256.mp4", "env_steps=512.mp4"]
    for key in ("eval", "eval_ood"):
        media = run_dir / "wandb" / "offline-run-*" / "files" / "media" / "videos" / key
        assert len(glob.glob(str(media / "*.mp4"))) == 2


def test_ddp_two_cpu_processes_share_the_budget(tmp_path):
    """Test that trainer=ddp trainer.devices=2 runs two ranks sharing the env-step budget, logging to TensorBoard."""
    proc = run_train(
        [*TINY, "trainer=ddp", "trainer.devices=2", "logger=tensorboard", "hydra.run.dir=runs/ddp"], tmp_path
    )
    run_dir = tmp_path / "runs" / "ddp"
    summary = read_summary(run_dir)
    # 2 ranks x 8 envs x 32 steps = 512 per epoch: one epoch spends the budget.
    assert summary["env_steps"] == 512
    assert "Starting with 2 processes" in proc.stdout + proc.stderr
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert ckpt["RolloutDataModule"]["world_size"] == 2
    # TensorBoard's x-axis is env steps.
    curves = read_curves(str(run_dir))
    assert list(curves["eval/return_mean"][0]) == [512]
    assert glob.glob(str(run_dir / "events.out.tfevents.*"))


def test_multirun_sweeps_seeds_and_plot_draws_them(tmp_path):
    """Test that -m seed=1,2 writes one run per seed, that rl-lightning plot draws the sweep to a PNG, and that the
    sweep rerun with ckpt_path=last skips the finished jobs and starts the new one, and with a larger budget resumes
    the jobs from their last.ckpt."""
    run_train(["-m", *TINY, "seed=1,2", "logger=csv", "hydra.sweep.dir=multirun/sweep"], tmp_path)
    sweep = tmp_path / "multirun" / "sweep"
    summaries = [read_summary(sweep / str(i)) for i in (0, 1)]
    assert [s["seed"] for s in summaries] == [1, 2]
    assert all(s["env_steps"] == 512 for s in summaries)
    # Different seeds, different episodes.
    assert _metrics(sweep / "0") != _metrics(sweep / "1")
    out = tmp_path / "curves.png"
    proc = run(["-m", "rl_lightning.launch.cli", "plot", str(sweep), "--out", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "2 run(s)" in proc.stdout
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    # The sweep again with one more seed, ckpt_path=last: the finished jobs are skipped, their results kept as they
    # were (their final test reran and their summaries were replaced), and the new one starts (it was refused: no
    # last.ckpt in its directory); with a larger budget they resume from their last.ckpt.
    metrics = _metrics(sweep / "0")
    run_train(["-m", *TINY, "seed=1,2,3", "logger=csv", "hydra.sweep.dir=multirun/sweep", "ckpt_path=last"], tmp_path)
    assert [read_summary(sweep / str(i)) for i in (0, 1)] == summaries and _metrics(sweep / "0") == metrics
    assert read_summary(sweep / "2")["seed"] == 3 and read_summary(sweep / "2")["env_steps"] == 512
    more = ["-m", *TINY, "algo.total_timesteps=1024", "seed=1", "logger=csv", "hydra.sweep.dir=multirun/sweep"]
    # A rerun with the larger budget that was cut short left config.yaml saying 1024 beside the 512-step summary:
    # the summary's own budget decides (config.yaml's skipped the job, its budget never spent).
    config = (sweep / "0" / "config.yaml").read_text()
    assert "total_timesteps: 512" in config
    (sweep / "0" / "config.yaml").write_text(config.replace("total_timesteps: 512", "total_timesteps: 1024"))
    run_train([*more, "ckpt_path=last"], tmp_path)
    assert read_summary(sweep / "0")["env_steps"] == 1024 and read_summary(sweep / "0")["resumed_from_env_steps"] == 512
    assert read_summary(sweep / "0")["total_timesteps"] == 1024


def test_a_sweep_rerun_skips_a_finished_job_that_keeps_no_checkpoint(tmp_path):
    """Test that a sweep rerun with ckpt_path=last skips a job that finished with checkpointing off (it was refused
    as an earlier run in the way, which ended the sweep), keeping its summary, also one a trainer limit ended before
    total_timesteps, and runs the new job."""
    sweep, off = tmp_path / "multirun" / "off", ["algo.save_interval=null", "trainer.max_epochs=1"]
    run_train(["-m", *TINY, *off, "seed=1", "logger=csv", f"hydra.sweep.dir={sweep}"], tmp_path)
    finished = read_summary(sweep / "0")
    rerun = [*TINY, *off, "seed=1,2", "logger=csv", f"hydra.sweep.dir={sweep}", "ckpt_path=last"]
    proc = run_train(["-m", *rerun], tmp_path)
    assert "finished this budget (its summary.json): skipped." in proc.stdout
    assert read_summary(sweep / "0") == finished and finished["checkpoint"] is None
    # max_epochs=1 ended each job short of total_timesteps: finished all the same.
    assert finished["env_steps"] == read_summary(sweep / "1")["env_steps"] == 256


def test_debug_warm_up_runs_first_then_a_fresh_run(tmp_path):
    """Test that debug=true reports a warm-up (without advice about its one epoch), then the real run starts from zero
    env steps with its own seeds."""
    proc = run_train([*TINY, "debug=true", "logger=csv", "hydra.run.dir=runs/debug"], tmp_path)
    assert "Warm-up passed" in proc.stdout
    assert "stops after" not in proc.stderr  # the warm-up's one epoch is on purpose: no advice about max_epochs
    run_dir = tmp_path / "runs" / "debug"
    assert read_summary(run_dir)["env_steps"] == 512
    # The real run's first logged rollout is at 256 env steps (8 x 32), not after the warm-up's steps.
    steps = [float(r["time/env_steps"]) for r in _metrics(run_dir) if r["train/policy_loss"]]
    assert steps == [256.0, 512.0]
    # The same seed without the warm-up gives the same run: the warm-up left no trace.
    run_train([*TINY, "logger=csv", "hydra.run.dir=runs/plain"], tmp_path)
    plain = _metrics(tmp_path / "runs" / "plain")
    debug = _metrics(run_dir)
    assert [r["train/policy_loss"] for r in plain] == [r["train/policy_loss"] for r in debug]


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["algo.lrr=1e-3"], ["'algo.lrr'", "Did you mean 'lr'", "+algo.lrr"]),
        (["algo.lr=fast"], ["'algo.lr'", "positive number", "algo.lr=..."]),
        (["env.env_id=CartPol-v1"], ["'env.env_id'", "CartPole-v1"]),
        (["logger=tensorbord"], ["Unknown logger 'tensorbord'", "Did you mean 'tensorboard'", "logger=[wandb,csv]"]),
        (["test_ckpt=worst"], ["test_ckpt", "'worst'", "test_ckpt=best"]),
        (["trainer=fsdp_offload"], ["cannot run here", "trainer=default"]),
    ],
)
def test_bad_config_ends_with_one_paragraph_naming_key_and_fix(tmp_path, overrides, expected):
    """Test that a typo'd key, a wrong type, an unknown env or an unknown logger exits with one clear paragraph."""
    proc = run([TRAIN, *overrides], tmp_path)
    assert proc.returncode != 0
    message = proc.stderr.strip()
    assert "Traceback" not in proc.stderr
    assert message.startswith("Config error:") and "\n" not in message, message
    for text in expected:
        assert text in message, message
    assert not os.path.exists(tmp_path / "runs") or not glob.glob(str(tmp_path / "runs" / "*" / "checkpoints"))


@pytest.mark.parametrize(
    ("experiment", "loss_key", "schedule"),
    [("sac", "train/loss_qvalue", []), ("dqn", "train/loss", ["data.train_freq=10", "data.gradient_steps=5"])],
)
def test_off_policy_experiment_runs_with_its_warm_up(experiment, loss_key, schedule, tmp_path):
    """Test that +experiment=sac / dqn (replay data) runs end to end from train.py, warm-up included (dqn in
    smaller chunks than its 256 env steps, which a 100-step epoch cannot hold)."""
    overrides = [
        f"+experiment={experiment}",
        *schedule,
        "debug=true",
        "algo.total_timesteps=200",
        "algo.hidden_sizes=[16,16]",
        "data.steps_per_epoch=100",
        "data.learning_starts=50",
        "data.batch_size=32",
        "env.eval_episodes=1",
        "env.eval_interval=1",
        "env.eval_max_episode_steps=20",
        "logger=csv",
        "test_ckpt=best",
        f"hydra.run.dir=runs/{experiment}",
    ]
    proc = run_train(overrides, tmp_path)
    assert "Warm-up passed" in proc.stdout
    summary = read_summary(tmp_path / "runs" / experiment)
    assert summary["env_steps"] == 200 and summary["eval_return"] is not None
    # The final test evaluated best.ckpt (the summary still reports the run's own env steps and its last.ckpt, which
    # read as none: loading best.ckpt for the test put back its checkpoint callbacks' state).
    assert summary["tested_checkpoint"] == str(tmp_path / "runs" / experiment / "checkpoints" / "best.ckpt")
    assert summary["checkpoint"] == str(tmp_path / "runs" / experiment / "checkpoints" / "last.ckpt")
    rows = _metrics(tmp_path / "runs" / experiment)
    assert any(r.get(loss_key) for r in rows) and any(r.get("eval_ood/return_mean") for r in rows)


def test_sigterm_prints_the_resume_command_and_it_finishes_the_budget(tmp_path):
    """Test that SIGTERM stops train.py with exit 143 and a command that resumes in the same run dir to the budget."""
    import shlex
    import signal

    from tests.launch.conftest import signal_after_first_checkpoint

    overrides = ["+experiment=ppo", "algo.total_timesteps=4096", "env.eval_interval=2", "algo.save_interval=1"]
    run_dir = tmp_path / "runs" / "stopped"
    proc = signal_after_first_checkpoint(
        [sys.executable, TRAIN, *overrides, f"hydra.run.dir={run_dir}"], tmp_path, str(run_dir / "checkpoints")
    )
    stderr = proc.stderr_text
    assert proc.returncode == 128 + signal.SIGTERM, proc.stdout_text[-2000:] + stderr[-2000:]
    assert "Training was interrupted by SIGTERM" in stderr and "Resume with:" in stderr
    command = stderr.split("Resume with:")[1].strip().splitlines()[0]
    assert f"hydra.run.dir={run_dir}" in command and command.endswith("ckpt_path=last")
    stopped_at = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["RolloutDataModule"]["env_steps"]
    assert 0 < stopped_at < 4096

    args = shlex.split(command)
    assert args[:2] == ["python", "train.py"]
    run_train(args[2:], tmp_path)
    summary = read_summary(run_dir)
    assert summary["env_steps"] == 4096 and summary["checkpoint"] == str(run_dir / "checkpoints" / "last.ckpt")
    # The resumed part's speed: only the steps it took, over its own wall time.
    assert summary["resumed_from_env_steps"] == stopped_at
    since = (4096 - stopped_at) / summary["wall_seconds"]
    assert summary["env_steps_per_second"] == pytest.approx(since, rel=1e-6)
    # Every epoch's timing after the resume is its own (not the time since the machine started).
    epochs = [float(r["time/epoch_seconds"]) for r in _metrics(run_dir) if r.get("time/epoch_seconds")]
    assert epochs and max(epochs) < summary["wall_seconds"], epochs
    # metrics.csv holds both parts: every epoch of 8 envs x 32 steps once, whichever phase the signal cut,
    # and the evaluations on the uninterrupted run's grid (every 2 epochs), then the final test.
    rows = _metrics(run_dir)
    assert [int(float(r["step"])) for r in rows if r.get("time/rollout_seconds")] == list(range(256, 4097, 256))
    evaluated = [int(float(r["step"])) for r in rows if r.get("eval/return_mean")]
    assert evaluated == [*range(512, 4097, 512), 4096], evaluated
    # The W&B run goes on under its id: both parts' offline runs carry the same one.
    runs = sorted(os.listdir(run_dir / "wandb"))
    ids = {name.rsplit("-", 1)[1] for name in runs if name.startswith("offline-run-")}
    assert len([name for name in runs if name.startswith("offline-run-")]) == 2 and len(ids) == 1, runs


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_a_custom_env_from_a_users_module_trains_from_both_front_doors(vectorization, tmp_path):
    """Test that env_id='module:id' trains an env a user's module registers, from train.py and rl-lightning."""
    from tests.launch.conftest import REPO, offline_env

    env_id = "tests.envs.custom_task:custom_task/Pole-v0"
    overrides = [*TINY, f"env.env_id={env_id}", f"env.vectorization={vectorization}", "env.num_envs=2"]
    run_train([*overrides, "hydra.run.dir=runs/custom", "logger=csv"], tmp_path)
    summary = read_summary(tmp_path / "runs" / "custom")
    assert summary["env_steps"] == 512 and summary["eval_return"] is not None
    ckpt = torch.load(summary["checkpoint"], weights_only=True)
    assert ckpt["datamodule_hyper_parameters"]["env_id"] == env_id

    args = ["fit", "--model", "PPO", "--data.env_id", env_id, "--data.vectorization", vectorization]
    args += [
        "--data.num_envs",
        "2",
        "--data.rollout_steps",
        "16",
        "--model.total_timesteps",
        "64",
        "--model.save_interval",
        "1",
    ]
    args += ["--data.eval_episodes", "1", "--trainer.logger", "false", "--trainer.default_root_dir", "cli"]
    env = {**offline_env(str(tmp_path)), "PYTHONPATH": REPO}  # the user's package is importable
    proc = subprocess.run(
        [sys.executable, "-m", "rl_lightning.launch.cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert glob.glob(str(tmp_path / "cli" / "**" / "last.ckpt"), recursive=True)


#: The tests' Dict task (a uint8 image and a position) with a CNN small enough for its 5x5 frames.
PIXEL = [
    "env.env_id=tests.envs.pixel_goal:pixel_goal/PixelGoal-v0",
    "env.num_envs=2",
    "algo.encoder.cnn_channels=[4]",
    "algo.encoder.cnn_kernels=[2]",
    "algo.encoder.cnn_strides=[1]",
    "algo.encoder.cnn_features=8",
]


def test_ppo_on_image_and_dict_observations_runs_under_ddp_with_debug(tmp_path):
    """Test that two DDP ranks with debug=true train PPO on a Dict of image and vector, evaluate both sets with
    success rates in the summary, and checkpoint both ranks' states."""
    proc = run_train(
        [*TINY, *PIXEL, "trainer=ddp", "trainer.devices=2", "debug=true", "hydra.run.dir=runs/p"], tmp_path
    )
    assert "Warm-up passed" in proc.stdout and "Starting with 2 processes" in proc.stdout + proc.stderr
    summary = read_summary(tmp_path / "runs" / "p")
    assert summary["env_steps"] == 512
    assert summary["eval_success_rate"] is not None and summary["eval_ood_success_rate"] is not None
    ckpt = torch.load(summary["checkpoint"], weights_only=True)
    assert ckpt["RolloutDataModule"]["world_size"] == 2
    assert ckpt["hyper_parameters"]["encoder"]["cnn_features"] == 8


def test_recurrent_ppo_with_truncated_bptt_runs_with_debug_and_resumes(tmp_path):
    """Test that +experiment=ppo_lstm with truncated BPTT warms up (debug=true), trains, tests both sets, and resumes
    from last.ckpt to a larger budget (its envs and states start afresh: states are not saved). Under DDP:
    tests/distributed/test_ddp.py::test_recurrent_ppo_under_ddp_replays_each_ranks_own_whole_sequences."""
    overrides = [
        "+experiment=ppo_lstm",
        "algo.recurrent_size=8",
        "algo.hidden_sizes=[8]",
        "algo.update_epochs=2",
        "algo.num_minibatches=2",
        "algo.bptt_length=16",
        "algo.save_interval=1",
        "env.num_envs=2",
        "env.eval_episodes=2",
        "env.eval_interval=2",
        "env.eval_max_episode_steps=50",
        "hydra.run.dir=runs/lstm",
    ]
    proc = run_train([*overrides, "debug=true", "algo.total_timesteps=256"], tmp_path)
    assert "Warm-up passed" in proc.stdout
    run_dir = tmp_path / "runs" / "lstm"
    summary = read_summary(run_dir)
    assert summary["env_steps"] == 256  # 2 envs x 32 steps per epoch, 4 epochs
    assert summary["eval_return"] is not None and summary["eval_ood_return"] is not None
    ckpt = torch.load(summary["checkpoint"], weights_only=True)
    assert ckpt["hyper_parameters"]["recurrent"] is True and ckpt["hyper_parameters"]["bptt_length"] == 16
    run_train([*overrides, "algo.total_timesteps=512", "ckpt_path=last"], tmp_path)
    resumed = read_summary(run_dir)
    assert resumed["env_steps"] == 512 and resumed["resumed_from_env_steps"] == 256


def test_dqn_on_image_observations_under_ddp_saves_and_resumes_its_compact_image_replay(tmp_path):
    """Test that two DDP ranks with debug=true train DQN on the Dict task with a compact replay buffer, save each
    rank's shard with the image key as uint8, and resume from it to the larger budget."""
    overrides = [
        "+experiment=dqn",
        *PIXEL,
        "trainer=ddp",
        "trainer.devices=2",
        "algo.hidden_sizes=[16]",
        "algo.save_interval=1",
        "data.steps_per_epoch=100",
        "data.train_freq=10",
        "data.gradient_steps=5",
        "data.learning_starts=50",
        "data.batch_size=16",
        "data.optimize_memory_usage=true",
        "data.save_replay_buffer=true",
        "env.eval_episodes=2",
        "env.eval_interval=1",
        "logger=csv",
        "hydra.run.dir=runs/d",
    ]
    proc = run_train([*overrides, "debug=true", "algo.total_timesteps=400"], tmp_path)
    assert "Warm-up passed" in proc.stdout
    assert "Replay buffer (memory): 100,000 transitions x 47 bytes" in proc.stdout + proc.stderr
    ckpt_path = tmp_path / "runs" / "d" / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt_path, weights_only=True)["ReplayDataModule"]
    assert state["world_size"] == 2 and state["env_steps"] == 400
    for rank in state["ranks"]:
        rows = rank["replay_buffer"]["rows"]
        assert rows["obs"]["image"].dtype == torch.uint8 and rows["obs"]["image"].shape == (200, 5, 5, 1)
        assert "next_obs" not in rows  # stored once: next observations come from the next row
        assert rank["replay_buffer"]["compact"]["sampleable"].sum() > 150
    run_train([*overrides, "algo.total_timesteps=600", "ckpt_path=last"], tmp_path)
    assert read_summary(tmp_path / "runs" / "d")["env_steps"] == 600


FLAKY_RUN = [
    "+experiment=ppo", "env.env_id=Count-v0", "env.backend=torch", "env.num_envs=4",
    "env.env_factory=tests.envs.batched_factory.make_flaky_count_envs", "env.obj_sets={train: [{}], test: [{}]}",
    "algo.total_timesteps=512", "env.eval_interval=1", "env.eval_episodes=2", "logger=csv",
]  # fmt: skip


def test_a_batched_simulator_that_raises_saves_the_run_and_the_resume_command_finishes(tmp_path, monkeypatch):
    """Test that a batched env raising in step (max_env_restarts=0) ends train.py with one message naming the env, the
    call and the error, no traceback, a last.ckpt of the last update, and a resume command that ends at the budget."""
    import shlex

    run_dir = tmp_path / "runs" / "crashed"
    monkeypatch.setenv("FLAKY_FAIL_AT", "80")  # in the third rollout of 32 steps
    proc = run([TRAIN, *FLAKY_RUN, "env.max_env_restarts=0", f"hydra.run.dir={run_dir}"], tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "The batched Count-v0 (object set 'train') (step)" in proc.stderr
    assert "RuntimeError: simulator lost its context at step 80" in proc.stderr and "Traceback" not in proc.stderr
    saved = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["RolloutDataModule"]["env_steps"]
    assert saved == 2 * 4 * 32  # the two rollouts whose updates finished
    command = proc.stderr.split("Resume with:")[1].strip().splitlines()[0]
    monkeypatch.setenv("FLAKY_FAIL_AT", "0")  # the simulator works again
    run_train(shlex.split(command)[2:], tmp_path)
    summary = read_summary(run_dir)
    assert (summary["env_steps"], summary["resumed_from_env_steps"]) == (512, saved)


def test_a_batched_simulator_that_raises_is_rebuilt_and_the_run_completes(tmp_path, monkeypatch):
    """Test that with max_env_restarts=1 the batched env that raised is rebuilt, the run ends at its budget and
    rollout/env_restarts counts the one rebuild."""
    run_dir = tmp_path / "runs" / "rebuilt"
    monkeypatch.setenv("FLAKY_FAIL_AT", "80")
    run_train([*FLAKY_RUN, "env.max_env_restarts=1", f"hydra.run.dir={run_dir}"], tmp_path)
    assert read_summary(run_dir)["env_steps"] == 512
    restarts = [float(r["rollout/env_restarts"]) for r in _metrics(run_dir) if r.get("rollout/env_restarts")]
    assert sum(restarts) == 1 and len(restarts) == 4


def test_a_sweep_job_that_faults_ends_that_job_and_the_sweep_goes_on(tmp_path, monkeypatch):
    """Test that in a sweep (-m) an env fault ends its job with its message and resume command while the next job
    runs to its budget, and that the command then exits 1 naming the failed job (the fault ended the whole sweep)."""
    sweep = tmp_path / "multirun" / "flaky"
    monkeypatch.setenv("FLAKY_FAIL_AT", "80")
    proc = run([TRAIN, "-m", *FLAKY_RUN, "env.max_env_restarts=0,1", f"hydra.sweep.dir={sweep}"], tmp_path)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "RuntimeError: simulator lost its context at step 80" in proc.stderr and "Resume with:" in proc.stderr
    assert "1 job(s) of the sweep failed: " in proc.stderr and "EnvFault (the others ran)" in proc.stderr
    assert f"{sweep / '0'} (" in proc.stderr and "env.max_env_restarts=0): EnvFault" in proc.stderr
    assert not (sweep / "0" / "summary.json").exists() and read_summary(sweep / "1")["env_steps"] == 512
