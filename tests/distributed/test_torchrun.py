"""Two "nodes" of one process each, launched by torchrun over loopback, keep the DDP invariants."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

from tests.distributed.test_ddp import PROBE, check_invariants

# Seconds: each worker dumps its stacks and exits 1 after WATCHDOG (a run takes 10-30 s);
# the test stops both nodes after DEADLINE.
WATCHDOG, DEADLINE = 180, 240


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_nodes(nodes: list[subprocess.Popen], deadline: float) -> str | None:
    """Wait for every node; stop them all as soon as one fails or the deadline passes.

    torchrun's agent waits up to 300 s at its exit barrier for agents that are not coming
    (a node whose worker failed skips the barrier), so a failure on one node would
    otherwise look like a hang of the other.
    """
    end = time.monotonic() + deadline
    while True:
        codes = [node.poll() for node in nodes]  # poll every node: returncode is set by poll
        if None not in codes:
            return None
        failed = any(code not in (None, 0) for code in codes)
        if failed or time.monotonic() > end:
            for node in nodes:  # the agent and its worker: each node runs in its own session
                try:
                    os.killpg(node.pid, signal.SIGKILL)
                except ProcessLookupError:  # that session has ended already
                    pass
                node.wait()
            return "a node failed" if failed else f"still running after {deadline} s"
        time.sleep(0.2)


def test_two_nodes_over_loopback_with_torchrun(tmp_path):
    """Test that torchrun --nnodes 2 (node ranks 0 and 1 on this machine) trains PPO with every invariant."""
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    logs = [tmp_path / f"node{node}.log" for node in (0, 1)]
    nodes = []
    for node, log in enumerate(logs):
        with open(log, "w") as out:  # the child keeps its own copy of the descriptor
            nodes.append(
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
                        f"--watchdog={WATCHDOG}",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                )
            )
    problem = _wait_for_nodes(nodes, DEADLINE)
    outputs = "\n".join(
        f"--- node {n} (exit {p.returncode}):\n{log.read_text()[-3000:]}"
        for n, (p, log) in enumerate(zip(nodes, logs, strict=True))
    )
    assert problem is None and all(p.returncode == 0 for p in nodes), f"{problem}\n{outputs}"
    ranks = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    check_invariants(ranks, local_transitions_per_epoch=32)
