"""``rl-lightning play`` and ``rl-lightning export`` on checkpoints of finished runs."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest

from rl_lightning import DQN
from rl_lightning.algos import load_checkpoint
from rl_lightning.envs import SHIPPED_OBJ_SETS
from rl_lightning.launch import export as export_cli
from rl_lightning.launch import play
from tests.helpers import count_frames, quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data
from tests.test_export import score_margin

RL_LIGHTNING = os.path.join(os.path.dirname(sys.executable), "rl-lightning")
TEST_VARIATIONS = {v["name"] for v in SHIPPED_OBJ_SETS["CartPole-v1"]["test"]}
ROW = re.compile(r"^\s+(\d+)\s+(\S+)\s+([-\d.]+)\s+(\d+)\s+(yes|no|-)$")


@pytest.fixture(scope="module")
def ppo_checkpoint(tmp_path_factory):
    root = tmp_path_factory.mktemp("ppo")
    trainer = quiet_trainer(root, max_epochs=2)
    trainer.fit(tiny_ppo(hidden_sizes=[16, 16]), tiny_rollout_data(eval_max_episode_steps=None))
    path = str(root / "last.ckpt")
    trainer.save_checkpoint(path)
    return path


def digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_play_on_the_test_object_set_prints_each_episode_and_films_them(ppo_checkpoint, tmp_path, capsys):
    """Test that play runs deterministic episodes of the test set, reproducibly, into one video."""
    before = digest(ppo_checkpoint)
    video = str(tmp_path / "play.mp4")
    episodes = play.main([ppo_checkpoint, "--obj-set", "test", "--episodes", "3", "--video", video])
    out = capsys.readouterr().out
    rows = [ROW.match(line) for line in out.splitlines() if ROW.match(line)]
    assert [int(r[1]) for r in rows] == [1, 2, 3]
    assert "PPO on CartPole-v1, object set 'test'" in out
    for row, episode in zip(rows, episodes, strict=True):
        assert row[2] in TEST_VARIATIONS and row[2] == episode.variation
        assert float(row[3]) == episode.ret == int(row[4]) == episode.length  # CartPole: reward 1 per step
        assert row[5] == "-"  # CartPole reports no success
    assert count_frames(video) == sum(e.length + 1 for e in episodes)
    assert f"Wrote {video} ({sum(e.length + 1 for e in episodes)} frames, 50 fps)" in out
    again = play.main([ppo_checkpoint, "--obj-set", "test", "--episodes", "3"])
    assert [(e.ret, e.variation) for e in again] == [(e.ret, e.variation) for e in episodes]  # same seed
    assert digest(ppo_checkpoint) == before


def test_play_console_script_on_the_training_set(ppo_checkpoint, tmp_path):
    """Test that the installed `rl-lightning play` dispatches to play and exits with 0."""
    proc = subprocess.run(
        [RL_LIGHTNING, "play", ppo_checkpoint, "--episodes", "2"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "object set 'train'" in proc.stdout
    assert len([line for line in proc.stdout.splitlines() if ROW.match(line)]) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--obj-set", "tset"], "--obj-set tset: CartPole-v1 has no such object set in this run; available: ['test',"),
        (["--episodes", "0"], "--episodes: expected a positive integer, got '0'"),
        (["--seed", "-1"], "--seed: expected an integer in [0, 2**32), got '-1'"),
        (["--video", "out.gif"], "--video out.gif: videos are written as mp4; name a file ending in .mp4."),
    ],
)
def test_play_refuses_bad_arguments_with_the_fix(ppo_checkpoint, args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        play.main([ppo_checkpoint, *args])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_play_and_export_refuse_a_missing_or_torn_checkpoint(tmp_path, capsys):
    """Test that play and export name a missing file, a directory given for a checkpoint and a torn file."""
    torn = tmp_path / "torn.ckpt"
    torn.write_bytes(b"PK\x03\x04 half a checkpoint")
    for main in (play.main, lambda a: export_cli.main([*a, "--format", "onnx"])):
        cases = ((tmp_path / "none.ckpt", "does not exist"), (tmp_path, "is a directory"), (torn, "not a complete"))
        for path, message in cases:
            with pytest.raises(SystemExit) as exit_info:
                main([str(path)])
            assert exit_info.value.code == 2
            err = capsys.readouterr().err
            assert message in err and str(path) in err
    assert torn.read_bytes() == b"PK\x03\x04 half a checkpoint"
    assert sorted(os.listdir(tmp_path)) == ["torn.ckpt"]  # nothing written


@pytest.mark.parametrize(
    ("fmt", "out", "fix"), [("onnx", "policy.pt", "policy.onnx"), ("torchscript", "p.onnx", "p.pt")]
)
def test_export_refuses_a_file_named_as_the_other_format(ppo_checkpoint, fmt, out, fix, tmp_path, capsys):
    """Test that --out named for the other format is refused, the file there untouched (an ONNX export replaced a
    TorchScript one under its .pt name)."""
    (tmp_path / out).write_bytes(b"an earlier export")
    with pytest.raises(SystemExit) as exit_info:
        export_cli.main([ppo_checkpoint, "--format", fmt, "--out", str(tmp_path / out)])
    assert exit_info.value.code == 2
    assert f"but --format {fmt} writes {fmt}: name it {tmp_path / fix}" in capsys.readouterr().err
    assert (tmp_path / out).read_bytes() == b"an earlier export"


def test_export_refuses_to_write_over_a_checkpoint_named_through_a_link_or_another_one(
    ppo_checkpoint, tmp_path, capsys
):
    """Test that --out naming the checkpoint through a symlinked directory, or another run's .ckpt, is refused and
    both files are left as they were (each was replaced by the export: the run's resumable state lost)."""
    os.symlink(os.path.dirname(ppo_checkpoint), tmp_path / "latest")
    other = tmp_path / "best.ckpt"
    other.write_bytes(b"another checkpoint")
    before = open(ppo_checkpoint, "rb").read()
    for out, what in ((tmp_path / "latest" / os.path.basename(ppo_checkpoint), "is the checkpoint itself"),
                      (other, "is named as a checkpoint (a run's would be replaced)")):  # fmt: skip
        with pytest.raises(SystemExit) as exit_info:
            export_cli.main([ppo_checkpoint, "--format", "torchscript", "--out", str(out)])
        assert exit_info.value.code == 2 and f"--out {out} {what}; name another file" in capsys.readouterr().err
    assert open(ppo_checkpoint, "rb").read() == before and other.read_bytes() == b"another checkpoint"


@pytest.mark.parametrize("fmt", ["onnx", "torchscript"])
def test_export_command_writes_a_file_that_acts_as_the_checkpoint(ppo_checkpoint, fmt, tmp_path, capsys):
    out = str(tmp_path / f"policy.{fmt}")
    contract = export_cli.main([ppo_checkpoint, "--format", fmt, "--out", out])
    printed = capsys.readouterr().out
    assert f"Wrote {out} ({fmt}, PPO on CartPole-v1): obs float32 [batch, 4] -> action int64 [batch]" in printed
    assert contract["env_id"] == "CartPole-v1" and "env" not in contract
    model = load_checkpoint(ppo_checkpoint)
    obs = np.random.default_rng(1).standard_normal((100, 4)).astype(np.float32)
    if fmt == "onnx":
        session = onnxruntime.InferenceSession(out, providers=["CPUExecutionProvider"])
        actions = session.run(["action"], {"obs": obs})[0]
        assert json.loads(session.get_modelmeta().custom_metadata_map["rl_lightning"])["env_id"] == "CartPole-v1"
    else:
        import torch

        actions = torch.jit.load(out)(torch.from_numpy(obs)).numpy()
    decisive = score_margin(model, obs) > 1e-5  # ONNX Runtime may round a near-tie the other way
    assert decisive.sum() >= 90
    np.testing.assert_array_equal(actions[decisive], model.predict(obs)[decisive])


def test_export_defaults_to_the_checkpoints_name_and_exports_dqn(tmp_path, capsys):
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(DQN(hidden_sizes=[16]), tiny_replay_data("CartPole-v1"))
    ckpt = str(tmp_path / "dqn.ckpt")
    trainer.save_checkpoint(ckpt)
    export_cli.main([ckpt, "--format", "torchscript"])
    assert os.path.isfile(tmp_path / "dqn.pt")
    assert "(torchscript, DQN on CartPole-v1)" in capsys.readouterr().out


def test_export_of_a_recurrent_policy_names_its_state_in_and_state_out(tmp_path, capsys):
    """Test that the printed contract of a recurrent policy's file names the state input and output beside obs
    and action (it printed obs -> action only, though the file takes and returns the state)."""
    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(tiny_ppo(recurrent=True, recurrent_size=8, hidden_sizes=[8], total_timesteps=64), tiny_rollout_data())
    ckpt = str(tmp_path / "lstm.ckpt")
    trainer.save_checkpoint(ckpt)
    export_cli.main([ckpt, "--format", "torchscript"])
    printed = capsys.readouterr().out
    assert "obs float32 [batch, 4], state_in float32 [batch, 2, 1, 8] -> action int64 [batch], state_out float32 " \
        "[batch, 2, 1, 8]" in printed  # fmt: skip
