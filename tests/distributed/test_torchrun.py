"""Two "nodes" of one process each, launched by torchrun over loopback, keep the DDP invariants."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

from tests.distributed.test_ddp import PROBE, check_invariants


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_over_loopback_with_torchrun(tmp_path):
    """Test that torchrun --nnodes 2 (node ranks 0 and 1 on this machine) trains PPO with every invariant."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nnodes=2",
                "--nproc-per-node=1",
                f"--node-rank={node}",
                "--master-addr=127.0.0.1",
                f"--master-port={port}",
                PROBE,
                str(tmp_path),
                "--devices=1",
                "--num-nodes=2",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for node in (0, 1)
    ]
    for node in nodes:
        _, stderr = node.communicate(timeout=300)
        assert node.returncode == 0, stderr[-3000:]
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    check_invariants(ranks, local_transitions_per_epoch=32)
