"""Cost of one PPO update step: rl_lightning's ``minibatch_loss`` against torchrl's ``ClipPPOLoss``.

    python -m benchmarks.ppo_loss [--repeats 5] [--steps 300] [--batch 128] [--threads 1]

Both variants compute the same loss (``tests/algos/test_ppo_loss.py``) on the same
CartPole-sized actor-critic and batch, and each step includes backward (through autograd's
engine) and the same (unfused) Adam step. With the default networks ``minibatch_loss`` takes
its written-out path (networks, distribution and objective as one autograd node).
Repeats alternate the two variants; the table reports medians and the ratio.
"""

from __future__ import annotations

import argparse
import json
import warnings

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule
from torch.distributions import Categorical

from benchmarks.timing import alternate, print_table
from rl_lightning.algos.ppo_loss import minibatch_loss
from rl_lightning.nets import ActorCritic

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss


def make_batch(policy: ActorCritic, n: int) -> TensorDict:
    obs = torch.randn(n, 4)
    with torch.no_grad():
        action, log_prob, value = policy.act(obs)
    return TensorDict(
        {
            "obs": obs,
            "action": action,
            "log_prob": log_prob,
            "value": value,
            "advantage": torch.randn(n),
            "return": value + torch.randn(n),
        },
        batch_size=[n],
    )


def our_step(policy, optimizer, batch):
    terms = minibatch_loss(policy, batch, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5)
    optimizer.zero_grad()
    terms.loss.backward()
    optimizer.step()


def make_torchrl(policy):
    actor = ProbabilisticActor(
        TensorDictModule(policy.actor, in_keys=["obs"], out_keys=["logits"]),
        in_keys=["logits"],
        distribution_class=Categorical,
        return_log_prob=True,
    )
    loss = ClipPPOLoss(
        actor,
        ValueOperator(policy.critic, in_keys=["obs"]),
        clip_epsilon=0.2,
        entropy_coeff=0.01,
        critic_coeff=0.25,
        loss_critic_type="l2",
        normalize_advantage=True,
    )
    return loss


def torchrl_step(loss_module, optimizer, td):
    out = loss_module(td)
    total = out["loss_objective"] + out["loss_critic"] + out["loss_entropy"]
    optimizer.zero_grad()
    total.backward()
    optimizer.step()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), normalize_obs=False)
    optimizer = torch.optim.Adam(policy.parameters(), lr=1e-4, eps=1e-5)
    batch = make_batch(policy, args.batch)
    loss_module = make_torchrl(policy)
    td = TensorDict(
        {
            "obs": batch["obs"],
            "action": batch["action"],
            loss_module.tensor_keys.sample_log_prob: batch["log_prob"],
            "advantage": batch["advantage"].unsqueeze(-1),
            "value_target": batch["return"].unsqueeze(-1),
            "state_value": batch["value"].unsqueeze(-1),
        },
        batch_size=[args.batch],
    )
    variants = {
        "minibatch_loss": lambda: our_step(policy, optimizer, batch),
        "torchrl ClipPPOLoss": lambda: torchrl_step(loss_module, optimizer, td),
    }
    times = alternate(variants, args.repeats, args.steps)
    print(
        f"torch {torch.__version__}, threads {args.threads}, batch {args.batch}, "
        f"{args.repeats} alternating repeats of {args.steps} steps"
    )
    medians = print_table(times)
    ratio = medians["torchrl ClipPPOLoss"] / medians["minibatch_loss"]
    print(f"ClipPPOLoss / minibatch_loss: {ratio:.2f}x")
    print(json.dumps({"medians_ms": medians, "ratio": ratio}))


if __name__ == "__main__":
    main()
