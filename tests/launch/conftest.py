"""Helpers for the front-door tests: run ``train.py`` and the ``rl-lightning`` script in a temp dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(REPO, "train.py")
# A few seconds of training: 2 epochs of 8 envs x 32 steps, evaluation after each.
TINY = [
    "+experiment=ppo",
    "algo.total_timesteps=512",
    "env.eval_interval=1",
    "env.eval_episodes=2",
    "algo.save_interval=1",
]


def offline_env(home: str) -> dict[str, str]:
    """An environment with no W&B key and no reachable network (every proxy points at a closed port)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    closed = "http://127.0.0.1:9"
    env.update(
        HOME=home,
        NETRC=os.path.join(home, "no-netrc"),
        WANDB_BASE_URL=closed,
        HTTP_PROXY=closed,
        HTTPS_PROXY=closed,
        http_proxy=closed,
        https_proxy=closed,
        NO_PROXY="",
        WANDB_CONFIG_DIR=os.path.join(home, ".config", "wandb"),
        WANDB_CACHE_DIR=os.path.join(home, ".cache", "wandb"),
        WANDB_DATA_DIR=os.path.join(home, ".local", "wandb"),
        WANDB_SILENT="true",
        PYTHONUNBUFFERED="1",
    )
    return env


def run(args: list[str], cwd: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """Run a command with the test interpreter in ``cwd``, offline; returns the completed process."""
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=offline_env(str(cwd)), capture_output=True, text=True, timeout=timeout
    )


def run_train(overrides: list[str], cwd: str, timeout: int = 300) -> subprocess.CompletedProcess:
    """``python train.py OVERRIDES`` in ``cwd``; fails the test with the output if it fails."""
    proc = run([TRAIN, *overrides], cwd, timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def read_summary(run_dir: str) -> dict:
    with open(os.path.join(run_dir, "summary.json")) as f:
        return json.load(f)


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """Run the test with the temp dir as working directory (runs/ and multirun/ land there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def signal_after_first_checkpoint(command: list[str], cwd: str, checkpoints: str, sig=None, timeout: int = 120):
    """Start ``command``; once an interval checkpoint appears in ``checkpoints`` (training is under way),
    send ``sig`` (SIGTERM). Returns the finished process with its ``stdout`` and ``stderr`` read."""
    import glob
    import signal
    import time

    proc = subprocess.Popen(
        command, cwd=cwd, env=offline_env(str(cwd)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + timeout
    while not glob.glob(os.path.join(checkpoints, "epoch=*.ckpt")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(sig or signal.SIGTERM)
    proc.stdout_text, proc.stderr_text = proc.communicate(timeout=timeout)
    return proc
