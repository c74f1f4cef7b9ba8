"""Resuming a run from ``train.py``: a refused resume leaves the run directory byte for byte as it was."""

from __future__ import annotations

import os

import pytest

from tests.launch.conftest import TINY, TRAIN, run, run_train


def _snapshot(root) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes)."""
    files = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                files[os.path.relpath(path, root)] = f.read()
    return files


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A finished CartPole PPO run (W&B offline and CSV logs, interval checkpoints, summary) and its files."""
    cwd = tmp_path_factory.mktemp("resume")
    run_train([*TINY, "hydra.run.dir=runs/done"], str(cwd))
    run_dir = cwd / "runs" / "done"
    assert (run_dir / "metrics.csv").stat().st_size > 0 and (run_dir / "checkpoints" / "last.ckpt").exists()
    return cwd, run_dir


@pytest.mark.parametrize(
    "overrides, expected",
    [
        ([*TINY, "env.env_id=Acrobot-v1"], ["trained on CartPole-v1", "built for Acrobot-v1"]),
        (["+experiment=dqn"], ["holds a PPO model, not a DQN one"]),
        # A larger budget and another interval may change on a resume: only the network setting is named, with its fix.
        (
            [*TINY, "algo.hidden_sizes=[32]", "algo.total_timesteps=1024", "algo.save_interval=2"],
            ["hidden_sizes: checkpoint [64, 64], this model [32]). Build the model with the checkpoint's settings"],
        ),
        # The same env id with a wrapper that drops entries: the setting that differs is named, not the id.
        (
            [*TINY, "env.wrappers=[{wrapper:rl_lightning.envs.wrappers.KeepEntries,indices:[0,2]}]"],
            ["trained on CartPole-v1 (Box(4,)", "built for CartPole-v1 (Box(2,)", "trained on (wrappers=[])"],
        ),
    ],
    ids=["other-env", "other-algorithm", "other-settings", "other-wrappers"],
)
def test_a_refused_resume_touches_nothing_in_the_run_directory(finished_run, overrides, expected):
    """Test that resuming with another env, algorithm or network stops with the reason, files byte-identical."""
    cwd, run_dir = finished_run
    before = _snapshot(run_dir)
    proc = run([TRAIN, *overrides, f"hydra.run.dir={run_dir}", "ckpt_path=last"], str(cwd))
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("Config error:") and str(run_dir / "checkpoints" / "last.ckpt") in last, last
    for text in expected:
        assert text in last, last
    after = _snapshot(run_dir)
    assert sorted(after) == sorted(before)  # no new file (no W&B run, no .hydra rewrite, no log)
    assert after == before  # metrics.csv, config.yaml, hparams.yaml, checkpoints: byte for byte


def test_a_torn_last_checkpoint_in_the_named_run_directory_is_not_blamed_on_the_directory(finished_run, tmp_path):
    """Test that a truncated last.ckpt, with hydra.run.dir given, is called torn and not a wrong run directory."""
    cwd, run_dir = finished_run
    torn = tmp_path / "torn"
    (torn / "checkpoints").mkdir(parents=True)
    good = (run_dir / "checkpoints" / "last.ckpt").read_bytes()
    (torn / "checkpoints" / "last.ckpt").write_bytes(good[:1000])
    before = _snapshot(torn)
    proc = run([TRAIN, *TINY, f"hydra.run.dir={torn}", "ckpt_path=last"], str(cwd))
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and "not a complete checkpoint archive" in last, proc.stderr[-3000:]
    assert "hydra.run.dir" not in last
    assert _snapshot(torn) == before


DQN_TINY = ["+experiment=dqn", "algo.hidden_sizes=[16,16]", "algo.total_timesteps=200", "data.steps_per_epoch=100",
            "data.learning_starts=50", "data.batch_size=16", "data.train_freq=10", "data.gradient_steps=5",
            "data.save_replay_buffer=true", "env.eval_episodes=1", "env.eval_interval=1",
            "env.eval_max_episode_steps=20", "logger=csv"]  # fmt: skip


@pytest.mark.parametrize(
    "override, expected",
    [
        ("data.buffer_size=5000", "has buffer_size=100,000 and this run 5,000"),
        ("data.optimize_memory_usage=true", "saved with optimize_memory_usage=false, and this run has true"),
    ],
)
def test_a_resume_refused_for_its_replay_state_touches_nothing_in_the_run_directory(tmp_path, override, expected):
    """Test that a replay state the run cannot take (a buffer of another size, stored the other way) is refused before
    config.yaml, hparams.yaml and .hydra/ are rewritten with the refused settings (it was refused inside the fit)."""
    run_train([*DQN_TINY, "hydra.run.dir=runs/dqn"], str(tmp_path))
    run_dir = tmp_path / "runs" / "dqn"
    before = _snapshot(run_dir)
    proc = run([TRAIN, *DQN_TINY, override, f"hydra.run.dir={run_dir}", "ckpt_path=last"], str(tmp_path))
    last = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode != 0 and last.startswith("Config error:") and expected in last, proc.stderr[-3000:]
    assert _snapshot(run_dir) == before
