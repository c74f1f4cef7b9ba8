"""DDP on CPU (gloo), 2 processes: identical weights, distinct env seeds, global counters, reduced metrics."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

NUM_ENVS_X_STEPS = 2 * 16  # probe.py: NUM_ENVS x ROLLOUT_STEPS per rank per epoch
PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "probe.py")


def run_probe(out, *args, timeout=300):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        # Every rank prints its stacks and exits before the timeout if it hangs (probe.py --watchdog).
        [sys.executable, PROBE, str(out), *args, f"--watchdog={timeout - 60}"],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.load(open(os.path.join(out, f"rank{r}.json"))) for r in range(2)]


def check_invariants(ranks, local_transitions_per_epoch, epochs=3):
    """The scale-out issue's invariants over a 2-rank run."""
    r0, r1 = ranks
    assert (r0["rank"], r1["rank"]) == (0, 1) and r0["world_size"] == r1["world_size"] == 2
    # Distinct env seeds: seed + rank * num_envs + i.
    assert r0["env_seeds"] == [0, 1] and r1["env_seeds"] == [2, 3]
    assert len(r0["epochs"]) == len(r1["epochs"]) == epochs
    for e, (a, b) in enumerate(zip(r0["epochs"], r1["epochs"], strict=True)):
        # Bit-identical weights after every update phase.
        assert a["weights"] == b["weights"], f"epoch {e}: weights differ across ranks"
        # The env-step count is global: the sum of both ranks' transitions so far.
        assert a["env_steps"] == b["env_steps"] == (e + 1) * (a["local_transitions"] + b["local_transitions"])
        assert a["local_transitions"] == local_transitions_per_epoch
    # Episode statistics are over both ranks' episodes (logged at epoch e, read at epoch e + 1).
    for e in range(1, epochs):
        returns = r0["epochs"][e - 1]["local_returns"] + r1["epochs"][e - 1]["local_returns"]
        if returns:
            expected = sum(returns) / len(returns)
            assert r0["epochs"][e]["reduced_return"] == r1["epochs"][e]["reduced_return"] == pytest.approx(expected)
    # Evaluation episodes are split (3 = 2 + 1) and the metric is their mean over both ranks.
    assert r0["eval_share"] + r1["eval_share"] == 3
    for a, b in zip(r0["eval"], r1["eval"], strict=True):
        assert len(a["local_returns"]) == 2 and len(b["local_returns"]) == 1
        returns = a["local_returns"] + b["local_returns"]
        assert a["reduced"] == b["reduced"] == pytest.approx(sum(returns) / 3)


def test_ppo_ddp_two_processes(tmp_path):
    """Test PPO with devices=2, strategy=ddp on CPU against every invariant, filming every evaluation.

    Rank 0 films while rank 1 goes on to the next collective: neither waits on the other's
    video, and the weights stay identical.
    """
    check_invariants(run_probe(tmp_path, "--algo", "ppo", "--devices", "2", "--video"), local_transitions_per_epoch=32)
    for obj_set in ("train", "test"):
        steps = [2 * NUM_ENVS_X_STEPS * epoch for epoch in (1, 2, 3)]
        assert sorted(os.listdir(tmp_path / "videos" / obj_set)) == sorted(f"env_steps={s}.mp4" for s in steps)


@pytest.mark.parametrize("algo, local_transitions", [("ppo", 32), ("dqn", 40)])
def test_the_invariants_hold_on_the_torch_backend(algo, local_transitions, tmp_path):
    """Test that with batched torch envs (env.backend=torch) each rank steps its own batch from its own seed, the
    env-step count is global, the weights stay bit-identical and the metrics are reduced over both ranks."""
    ranks = run_probe(tmp_path, "--algo", algo, "--devices", "2", "--backend", "torch")
    check_invariants(ranks, local_transitions_per_epoch=local_transitions)


def test_recurrent_ppo_under_ddp_replays_each_ranks_own_whole_sequences(tmp_path):
    """Test recurrent PPO with 2 DDP processes: the invariants hold, and each rank's update replays its own
    rollout's whole env sequences (every env once per epoch, from its first step), never the other rank's."""
    ranks = run_probe(tmp_path, "--algo", "ppo", "--devices", "2", "--recurrent")
    check_invariants(ranks, local_transitions_per_epoch=32)
    for r in ranks:
        assert len(r["sequences"]) == 3
        for e, seen in enumerate(r["sequences"]):
            assert seen["rollout_shape"] == [16, 2]  # this rank's 2 envs x 16 steps, nothing split or gathered
            epochs = [sorted(sum(seen["minibatches"][k : k + 2], [])) for k in (0, 2)]
            assert epochs == [[0, 1], [0, 1]]  # 2 epochs x 2 minibatches of one whole env sequence
            if e == 0:
                assert seen["first_step_starts"] == [True, True]  # every env starts from the initial state
    # Different seeds, so different experience: the ranks did not replay one shared rollout.
    assert ranks[0]["sequences"][0]["obs"] != ranks[1]["sequences"][0]["obs"]


def test_dqn_ddp_two_processes_fill_their_own_buffer_shards(tmp_path):
    """Test DQN with 2 DDP processes: the invariants hold and each rank's buffer holds its own transitions."""
    ranks = run_probe(tmp_path, "--algo", "dqn", "--devices", "2")
    check_invariants(ranks, local_transitions_per_epoch=40)
    assert [e["buffer_size"] for e in ranks[0]["epochs"]] == [40, 80, 120]


def test_dqn_ddp_resume_gives_every_rank_its_own_buffer_shard(tmp_path):
    """Test a 2-rank DQN checkpoint with replay buffers: on resume each rank holds exactly its own shard again."""
    first = run_probe(tmp_path / "first", "--algo", "dqn", "--devices", "2", "--epochs", "2", "--save")
    shards = [rank["epochs"][-1]["buffer"] for rank in first]
    assert shards[0] != shards[1]  # each rank stored its own envs' transitions
    last = tmp_path / "first" / "checkpoints" / "last.ckpt"
    resumed = run_probe(tmp_path / "second", "--algo", "dqn", "--devices", "2", "--epochs", "3", "--resume", str(last))
    assert [rank["buffer_at_start"] for rank in resumed] == shards
    assert [e["env_steps"] for e in resumed[0]["epochs"]] == [240]  # the third epoch continues the count


def test_sigterm_to_rank_zero_stops_both_ranks_at_the_same_batch_and_resumes(tmp_path):
    """Test that SIGTERM to rank 0 alone stops both DDP ranks after the same batch, one last.ckpt, then resumes."""
    ranks = run_probe(tmp_path / "stopped", "--sigterm-epoch", "1", "--epochs", "3")
    r0, r1 = (r["interrupted"] for r in ranks)
    # The ranks agreed at the end of epoch 1's batch (its update phase done): 2 epochs of 2 x 2 x 16 steps.
    assert r0["env_steps"] == r1["env_steps"] == 2 * 2 * NUM_ENVS_X_STEPS
    assert r0["global_step"] == r1["global_step"] and r0["weights"] == r1["weights"]
    assert r0["checkpoint"] == r1["checkpoint"] == str(tmp_path / "stopped" / "checkpoints" / "last.ckpt")
    resumed = run_probe(tmp_path / "resumed", "--resume", r0["checkpoint"], "--epochs", "3")
    a, b = resumed[0]["epochs"][-1], resumed[1]["epochs"][-1]
    assert "interrupted" not in resumed[0] and a["weights"] == b["weights"]
    assert a["env_steps"] == b["env_steps"] == 3 * 2 * NUM_ENVS_X_STEPS
