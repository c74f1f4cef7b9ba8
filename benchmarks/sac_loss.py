"""Cost of one SAC update step and its parts: the loss as a pure function (``sac_loss``) against torchrl's ``SACLoss``.

    python -m benchmarks.sac_loss [--repeats 5] [--steps 100] [--batch 256] [--threads 1]

Update steps (loss, one backward, the fused Adam steps, the Polyak update of the target
critics) compute the same thing in both variants (``tests/algos/test_sac_loss.py``) on
Pendulum's 256x256 networks (the ``sac`` experiment's). The parts: the twin critics' forward and
backward as one ``QEnsemble``, as two separate networks and through ``torch.func.vmap``
(torchrl's way); one reparameterized action sample with its log-probability, on tensors and
through torchrl's ``TanhNormal``; the Polyak update of the stacked critics against SB3's
per-tensor loop over two networks; a replay batch through ``buffer.sample()``; a
one-transition ``extend`` with and without the storage's device on the TensorDict. Repeats
alternate all variants; the table reports medians and ranges.
"""

from __future__ import annotations

import argparse
import copy
import json
import warnings

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict
from tensordict.nn import TensorDictModule

from benchmarks.dqn_loss import to_torchrl_batch
from benchmarks.timing import alternate, print_table
from rl_lightning.algos.sac_loss import sac_loss
from rl_lightning.algos.update import adam
from rl_lightning.data.replay import make_replay_buffer
from rl_lightning.nets.sac import QEnsemble, QNetwork, SquashedGaussianActor, squashed_gaussian_sample

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate, ValueEstimators

OBS_SPACE = gym.spaces.Box(-8.0, 8.0, (3,), np.float32)
ACTION_SPACE = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
HIDDEN = (256, 256)
TAU, GAMMA = 0.005, 0.99


def make_batch(n: int) -> TensorDict:
    return TensorDict(
        {
            "obs": torch.randn(n, 3),
            "action": torch.rand(n, 1) * 4 - 2,
            "reward": torch.randn(n),
            "next_obs": torch.randn(n, 3),
            "terminated": torch.zeros(n, dtype=torch.bool),
        },
        batch_size=[n],
    )


def plain_update(batch: TensorDict):
    policy = SquashedGaussianActor(OBS_SPACE, ACTION_SPACE, HIDDEN)
    critics = QEnsemble(3, 1, HIDDEN)
    targets = copy.deepcopy(critics).requires_grad_(False)
    log_alpha = torch.nn.Parameter(torch.zeros(()))
    optimizers = [adam(policy.parameters(), 1e-3), adam(critics.parameters(), 1e-3), adam([log_alpha], 1e-3)]
    target_params, online_params = list(targets.parameters()), list(critics.parameters())

    def step():
        for optimizer in optimizers:
            optimizer.zero_grad()
        terms = sac_loss(policy, critics, targets, log_alpha, batch, GAMMA, -1.0)
        (terms.loss_qvalue + terms.loss_actor + terms.loss_alpha).backward()
        for optimizer in optimizers:
            optimizer.step()
        with torch.no_grad():
            for target, online in zip(target_params, online_params, strict=True):
                target.lerp_(online, TAU)

    return step


def torchrl_update(batch: TensorDict):
    """The update SAC ran before the plain loss (``SACLoss`` built as its ``build_policy`` did)."""
    policy = SquashedGaussianActor(OBS_SPACE, ACTION_SPACE, HIDDEN)
    actor = ProbabilisticActor(
        TensorDictModule(policy.net, in_keys=["observation"], out_keys=["loc", "scale"]),
        in_keys=["loc", "scale"],
        distribution_class=TanhNormal,
        distribution_kwargs={"low": policy.low, "high": policy.high},
        return_log_prob=True,
    )
    critics = [ValueOperator(QNetwork(3, 1, HIDDEN), in_keys=["observation", "action"]) for _ in range(2)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loss = SACLoss(actor, critics, num_qvalue_nets=2, loss_function="l2", target_entropy=-1.0)
        loss.make_value_estimator(ValueEstimators.TD0, gamma=GAMMA)
        updater = SoftUpdate(loss, tau=TAU)
    optimizers = [
        adam(loss.actor_network_params.values(True, True), 1e-3),
        adam(loss.qvalue_network_params.values(True, True), 1e-3),
        adam([loss.log_alpha], 1e-3),
    ]
    td = to_torchrl_batch(batch)

    def step():
        terms = loss(td)
        for optimizer in optimizers:
            optimizer.zero_grad()
        (terms["loss_qvalue"] + terms["loss_actor"] + terms["loss_alpha"]).backward()
        for optimizer in optimizers:
            optimizer.step()
        updater.step()

    return step


def critic_variants(batch: TensorDict) -> dict:
    """Forward and backward of both critics on (obs, action), three ways."""
    obs, action = batch["obs"], batch["action"]
    ensemble = QEnsemble(3, 1, HIDDEN)
    nets = [QNetwork(3, 1, HIDDEN) for _ in range(2)]
    base = copy.deepcopy(nets[0]).to("meta")
    params = {k: torch.stack([n.state_dict()[k] for n in nets]).requires_grad_() for k in nets[0].state_dict()}

    def call(p, o, a):
        return torch.func.functional_call(base, p, (o, a))

    vmapped = torch.func.vmap(call, (0, None, None))

    def stacked():
        ensemble(obs, action).sum().backward()

    def separate():
        sum(net(obs, action).sum() for net in nets).backward()

    def vmap():
        vmapped(params, obs, action).sum().backward()

    return {
        "critics: QEnsemble": stacked,
        "critics: two QNetworks": separate,
        "critics: torch.func.vmap": vmap,
    }


def sample_variants(batch: TensorDict) -> dict:
    """One reparameterized sample and its log-probability (forward and backward), two ways."""
    n = batch.batch_size[0]
    loc, scale = torch.zeros(n, 1, requires_grad=True), torch.ones(n, 1, requires_grad=True)
    low, high = torch.tensor([-2.0]), torch.tensor([2.0])

    def plain():
        action, log_prob = squashed_gaussian_sample(loc, scale, torch.empty_like(loc).normal_(), low, high)
        (action.sum() + log_prob.sum()).backward()

    def torchrl():
        action, log_prob = TanhNormal(loc, scale, low=low, high=high).rsample_and_log_prob()
        (action.sum() + log_prob.sum()).backward()

    return {"sample: squashed_gaussian_sample": plain, "sample: torchrl TanhNormal": torchrl}


def polyak_variants() -> dict:
    online, target = QEnsemble(3, 1, HIDDEN), QEnsemble(3, 1, HIDDEN)
    online_params, target_params = list(online.parameters()), list(target.parameters())
    loop_online = [p for c in (QNetwork(3, 1, HIDDEN), QNetwork(3, 1, HIDDEN)) for p in c.parameters()]
    loop_target = [p.detach().clone() for p in loop_online]

    def stacked():  # SAC.update_targets: a lerp_ per stacked tensor
        with torch.no_grad():
            for target, online in zip(target_params, online_params, strict=True):
                target.lerp_(online, TAU)

    def per_tensor():  # SB3's polyak_update: a mul_ and an add per tensor of the two separate critics
        with torch.no_grad():
            for p, t in zip(loop_online, loop_target, strict=True):
                t.mul_(1 - TAU).add_(p, alpha=TAU)

    return {"polyak: lerp_ per stacked tensor": stacked, "polyak: per-tensor loop (two nets)": per_tensor}


def replay_variants(batch_size: int) -> dict:
    """Sampling a batch and storing one transition (two ways) in a filled 1M-transition buffer."""
    buffers = [make_replay_buffer(1_000_000, batch_size, device="cpu") for _ in range(3)]

    def transition(device=None) -> TensorDict:
        data = {"obs": torch.randn(1, 3), "action": torch.randn(1, 1), "reward": torch.randn(1)}
        data |= {"next_obs": torch.randn(1, 3), "terminated": torch.zeros(1, dtype=torch.bool)}
        return TensorDict(data, batch_size=[1], device=device)

    for buffer in buffers:
        buffer.extend(make_batch(5000).update({"action": torch.zeros(5000, 1)}))
    return {
        "replay: buffer.sample()": buffers[0].sample,
        "replay: extend (TensorDict without device)": lambda: buffers[1].extend(transition()),
        "replay: extend (TensorDict on the storage's device)": lambda: buffers[2].extend(transition("cpu")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    batch = make_batch(args.batch)
    variants = {
        "update: plain sac_loss": plain_update(batch),
        "update: torchrl SACLoss": torchrl_update(batch),
    }
    variants |= critic_variants(batch) | sample_variants(batch) | polyak_variants() | replay_variants(args.batch)
    times = alternate(variants, args.repeats, args.steps, warmup=10)
    print(
        f"torch {torch.__version__}, threads {args.threads}, batch {args.batch}, hidden {HIDDEN}, "
        f"{args.repeats} alternating repeats of {args.steps} calls"
    )
    medians = print_table(times)
    ratio = medians["update: torchrl SACLoss"] / medians["update: plain sac_loss"]
    print(f"SACLoss update / plain update: {ratio:.2f}x")
    summary = {"ratio": round(ratio, 3)}
    print(json.dumps({"medians_ms": {k: round(v, 4) for k, v in medians.items()}} | summary))


if __name__ == "__main__":
    main()
