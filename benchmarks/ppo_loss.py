"""Cost of one PPO update step: rl_lightning's ``ppo_loss`` against torchrl's ``ClipPPOLoss``, and Adam's kernels.

    python -m benchmarks.ppo_loss [--repeats 5] [--steps 300] [--batch 128] [--threads 1]

The loss variants compute the same loss (``tests/algos/test_ppo_loss.py``) on the same
CartPole-sized actor-critic and batch, and each step includes backward and the same Adam
step. The Adam variants time ``torch.optim.Adam``'s step alone on the same gradients: its
``for``-loop, ``foreach`` and ``fused`` kernels (``rl_lightning.algos.update.adam`` takes the fused
one). Repeats alternate the variants; the table reports medians and the ratios.
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
from rl_lightning.algos.ppo_loss import ppo_loss
from rl_lightning.nets import ActorCritic

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.modules import ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss


def make_batch(policy: ActorCritic, n: int) -> TensorDict:
    obs = torch.randn(n, 4)
    with torch.no_grad():
        action, log_prob, value, _ = policy.act(obs)
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
    log_prob, entropy, value = (x[0] for x in policy.evaluate_actions(batch["obs"][None], batch["action"][None]))
    old = (batch[key] for key in ("log_prob", "value", "advantage", "return"))
    terms = ppo_loss(log_prob, entropy, value, *old, clip_coef=0.2, ent_coef=0.01, vf_coef=0.5)
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
    our_step(policy, optimizer, batch)  # gradients for the Adam variants
    adams = {
        f"Adam step, {kind}": torch.optim.Adam(policy.parameters(), lr=1e-4, eps=1e-5, **{kind: True})
        for kind in ("foreach", "fused")
    }
    adams["Adam step, for-loop"] = torch.optim.Adam(policy.parameters(), lr=1e-4, eps=1e-5, foreach=False)
    variants = {
        "ppo_loss": lambda: our_step(policy, optimizer, batch),
        "torchrl ClipPPOLoss": lambda: torchrl_step(loss_module, optimizer, td),
        **{name: adam.step for name, adam in adams.items()},
    }
    times = alternate(variants, args.repeats, args.steps)
    print(
        f"torch {torch.__version__}, threads {args.threads}, batch {args.batch}, "
        f"{args.repeats} alternating repeats of {args.steps} steps"
    )
    medians = print_table(times)
    ratio = medians["torchrl ClipPPOLoss"] / medians["ppo_loss"]
    print(f"ClipPPOLoss / ppo_loss: {ratio:.2f}x")
    for kind in ("foreach", "for-loop"):
        print(f"Adam {kind} / fused: {medians[f'Adam step, {kind}'] / medians['Adam step, fused']:.2f}x")
    print(json.dumps({"medians_ms": medians, "ratio": ratio}))


if __name__ == "__main__":
    main()
