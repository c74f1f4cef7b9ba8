"""Cost of one DQN update step: the plain loss (``dqn_loss``) against torchrl's ``DQNLoss``.

    python -m benchmarks.dqn_loss [--repeats 5] [--steps 300] [--batch 64] [--threads 1]

Both variants compute the same loss (``tests/algos/test_dqn_loss.py``) on CartPole's
256x256 Q-network (the ``dqn`` experiment's) and batch, with and without double DQN;
each step includes backward and an Adam step. Repeats alternate the variants; the table
reports medians, ranges and the ratio.
"""

from __future__ import annotations

import argparse
import copy
import json
import warnings

import gymnasium as gym
import torch
from tensordict import TensorDict

from benchmarks.timing import alternate, print_table
from rl_lightning.algos.dqn_loss import dqn_loss
from rl_lightning.nets import QValueNetwork

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.data import Categorical
    from torchrl.modules import QValueActor
    from torchrl.objectives import DQNLoss, ValueEstimators


def to_torchrl_batch(batch: TensorDict) -> TensorDict:
    """A replay batch (``obs``, ``next_obs``, ...) in the keys torchrl's losses read (SAC, DQN): the references
    these benchmarks and ``tests/algos/test_*_loss.py`` compare the library's losses with.

    ``done`` is ``terminated``: a truncated transition keeps bootstrapping from its stored
    true final observation (TD(0) only stops at ``terminated`` anyway).
    """
    terminated = batch["terminated"].unsqueeze(-1)
    return TensorDict(
        {
            "observation": batch["obs"],
            "action": batch["action"],
            "next": {
                "observation": batch["next_obs"],
                "reward": batch["reward"].unsqueeze(-1),
                "terminated": terminated,
                "done": terminated,
            },
        },
        batch_size=batch.batch_size,
    )


def make_batch(n: int) -> TensorDict:
    return TensorDict(
        {
            "obs": torch.randn(n, 4),
            "action": torch.randint(2, (n,)),
            "reward": torch.ones(n),
            "next_obs": torch.randn(n, 4),
            "terminated": torch.rand(n) < 0.05,
        },
        batch_size=[n],
    )


def plain_variant(batch: TensorDict, double_dqn: bool):
    net = QValueNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    target = copy.deepcopy(net).requires_grad_(False)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-4)

    def step():
        loss = dqn_loss(net, target, batch, gamma=0.99, double_dqn=double_dqn).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def torchrl_variant(batch: TensorDict, double_dqn: bool):
    net = QValueNetwork(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss_module = DQNLoss(
            QValueActor(net, in_keys=["observation"], spec=Categorical(2)),
            loss_function="smooth_l1",
            delay_value=True,
            double_dqn=double_dqn,
        )
    loss_module.make_value_estimator(ValueEstimators.TD0, gamma=0.99)
    optimizer = torch.optim.Adam(loss_module.parameters(), lr=1e-4)
    td = to_torchrl_batch(batch)

    def step():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loss = loss_module(td)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch = make_batch(args.batch)
    variants = {}
    for double_dqn in (False, True):
        suffix = " (double)" if double_dqn else ""
        variants[f"plain dqn_loss{suffix}"] = plain_variant(batch, double_dqn)
        variants[f"torchrl DQNLoss{suffix}"] = torchrl_variant(batch, double_dqn)
    times = alternate(variants, args.repeats, args.steps)
    print(
        f"torch {torch.__version__}, threads {args.threads}, batch {args.batch}, "
        f"{args.repeats} alternating repeats of {args.steps} steps"
    )
    medians = print_table(times)
    ratios = {
        "dqn": medians["torchrl DQNLoss"] / medians["plain dqn_loss"],
        "double_dqn": medians["torchrl DQNLoss (double)"] / medians["plain dqn_loss (double)"],
    }
    print(f"DQNLoss / plain: {ratios['dqn']:.2f}x, with double DQN: {ratios['double_dqn']:.2f}x")
    print(json.dumps({"medians_ms": medians, "ratios": ratios}))


if __name__ == "__main__":
    main()
