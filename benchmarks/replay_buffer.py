"""One replay write and one draw: our ``ReplayBuffer`` against torchrl's ``TensorDictReplayBuffer``.

    python -m benchmarks.replay_buffer [--repeats 5] [--steps 2000] [--batch 64] [--threads 1]

Both hold 100k-row buffers of CartPole transitions (``obs``, ``next_obs``, int64 ``action``,
``reward``, ``terminated``), filled with 2,000 rows first. Timed per call, alternating rounds
(``benchmarks/timing.py``): writing one row (what each env step of one env costs at
Stable-Baselines3's 1/1 schedule) and sampling one batch (each gradient step). torchrl's buffer is
the one the library used before ``rl_lightning/data/replay_buffer.py`` (uniform ``RandomSampler``
over a ``LazyTensorStorage``).
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable

import torch
from tensordict import TensorDict

from benchmarks.timing import alternate, print_table
from rl_lightning.data.replay_buffer import ReplayBuffer

CAPACITY = 100_000


def rows(count: int) -> TensorDict:
    """``count`` CartPole transitions."""
    fields = {"obs": torch.randn(count, 4), "next_obs": torch.randn(count, 4), "reward": torch.ones(count)}
    fields |= {"action": torch.zeros(count, dtype=torch.long), "terminated": torch.zeros(count, dtype=torch.bool)}
    return TensorDict(fields, batch_size=[count])


def variants(batch: int) -> tuple[dict[str, Callable[[], object]], ReplayBuffer, object]:
    """The timed calls, and the two filled buffers (ours, torchrl's) they act on."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
        from torchrl.data.replay_buffers.samplers import RandomSampler

        theirs = TensorDictReplayBuffer(storage=LazyTensorStorage(CAPACITY), sampler=RandomSampler(), batch_size=batch)
    ours = ReplayBuffer(CAPACITY, batch)
    row = rows(1)
    for buffer in (ours, theirs):
        buffer.extend(rows(2000))
    calls = {
        "ours: extend one row": lambda: ours.extend(row),
        "torchrl: extend one row": lambda: theirs.extend(row),
        f"ours: sample {batch}": ours.sample,
        f"torchrl: sample {batch}": theirs.sample,
    }
    return calls, ours, theirs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    medians = print_table(alternate(variants(args.batch)[0], args.repeats, args.steps))
    for what in ("extend one row", f"sample {args.batch}"):
        print(f"{what}: torchrl / ours {medians[f'torchrl: {what}'] / medians[f'ours: {what}']:.2f}x")


if __name__ == "__main__":
    main()
