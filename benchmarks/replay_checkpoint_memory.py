"""Peak memory added by writing a full replay buffer into a checkpoint, as a share of the buffer's own bytes.

    python -m benchmarks.replay_checkpoint_memory [--mib 512] [--repeats 3]

Each measurement runs in a fresh process: it fills a buffer of Breakout's 4x84x84 uint8 frame stacks
(``replay_memory.OBS_SPACE``; ``--mib`` of rows, memory or memmap storage, written in 16 chunks), then writes
``{"rows": buffer.state_dict()}`` to a file with ``torch.save``, as a checkpoint with ``save_replay_buffer=true``
does. The figure is the growth of the process's peak resident set (``ru_maxrss``) during that write,
divided by the buffer's bytes: about 1.0 when the rows are copied before they are written,
about 0 when the storage itself is written. A memmap buffer's pages, read as the file is
written, are counted in the resident set too (they are the page cache's, not the process's).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile

from benchmarks.replay_memory import OBS_SPACE

FRAME = math.prod(OBS_SPACE.shape)  # bytes of one uint8 frame stack


def measure(mib: int, storage: str) -> float:
    """In this process: the peak-RSS growth of one checkpoint write, over the buffer's bytes."""
    import torch
    from tensordict import TensorDict

    from rl_lightning.data.replay_buffer import ReplayBuffer

    capacity = mib * 2**20 // FRAME
    with tempfile.TemporaryDirectory() as scratch:
        buffer = ReplayBuffer(capacity, 32, storage, scratch_dir=scratch)
        chunk = capacity // 16  # filled in chunks: the fill's own peak stays near the buffer's size
        for start in range(0, capacity, chunk):
            k = min(chunk, capacity - start)
            buffer.extend(TensorDict({"obs": torch.randint(0, 256, (k, *OBS_SPACE.shape), dtype=torch.uint8)}, [k]))
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        torch.save({"rows": buffer.state_dict()}, os.path.join(scratch, "ckpt.pt"))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return (after - before) / (capacity * FRAME)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", nargs=2, metavar=("MIB", "STORAGE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(int(args.child[0]), args.child[1])))
        return
    results = {}
    for storage in ("memory", "memmap"):
        shares = []
        for _ in range(args.repeats):
            cmd = [sys.executable, "-m", "benchmarks.replay_checkpoint_memory", "--child", str(args.mib), storage]
            shares.append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
        results[storage] = shares
        print(f"{storage:>6}: peak RSS growth {statistics.median(shares):.2f}x the buffer's {args.mib} MiB "
              f"(repeats {', '.join(f'{s:.2f}' for s in shares)})")  # fmt: skip


if __name__ == "__main__":
    main()
