"""The arithmetic of one gradient step: floating-point operations of ours against Stable-Baselines3's, same settings.

    python -m benchmarks.update_flops

At SAC's and DQN's 1/1 schedule the update is most of a run, and on a CPU its matrix products are
most of the update, so the ratio of the two libraries' operation counts is what a faster update
loop alone cannot beat. Counted with torch's ``FlopCounterMode`` (matrix products, ``torch.utils.flop_counter``):
ours, the loss and its one backward (:meth:`~rl_lightning.algos.SAC.update` and
:meth:`~rl_lightning.algos.DQN.training_step` add the gradient clipping and Adam, elementwise);
Stable-Baselines3's, one ``train(gradient_steps=1)`` call on a buffer filled by ``learn``. Settings
as ``python -m benchmarks.run --suites offpolicy`` times them (``benchmarks/sac_vs_sb3.py``,
``benchmarks/throughput.py``): SAC on Pendulum-v1, 256x256 networks, batch 256; DQN on CartPole-v1,
256x256, batch 64. Needs ``pip install stable-baselines3``.
"""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import torch
from tensordict import TensorDict
from torch.utils.flop_counter import FlopCounterMode

from rl_lightning import DQN, SAC


def flops(step) -> int:
    """Floating-point operations ``step()`` runs (matrix products; elementwise work is not counted)."""
    with FlopCounterMode(display=False) as counter:
        step()
    return counter.get_total_flops()


def batch(env: gym.Env, size: int) -> TensorDict:
    """``size`` random transitions of ``env``'s spaces, as our replay buffer hands them to a loss."""
    obs, next_obs = (torch.as_tensor(env.observation_space.sample()).expand(size, -1).clone() for _ in range(2))
    action = torch.stack([torch.as_tensor(env.action_space.sample()) for _ in range(size)])
    fields = {"obs": obs.float(), "next_obs": next_obs.float(), "action": action, "reward": torch.randn(size)}
    return TensorDict({**fields, "terminated": torch.zeros(size, dtype=torch.bool)}, [size])


def ours(algo: str) -> int:
    """Operations of one of our gradient steps: ``loss`` and ``backward``."""
    if algo == "SAC":
        env, model, size = gym.make("Pendulum-v1"), SAC(actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3), 256
    else:
        env, model, size = gym.make("CartPole-v1"), DQN(lr=2.3e-3, max_grad_norm=10.0), 64
    model.policy = model.build_policy(env.observation_space, env.action_space)
    data = batch(env, size)

    def step() -> None:
        terms = model.loss(data)
        total = terms.loss_qvalue + terms.loss_actor + terms.loss_alpha if algo == "SAC" else terms.loss
        total.backward()

    return flops(step)


def sb3(algo: str) -> int:
    """Operations of one of Stable-Baselines3's gradient steps (``train(gradient_steps=1)``)."""
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3 import SAC as SB3SAC

    kwargs = {"policy_kwargs": {"net_arch": [256, 256]}, "device": "cpu", "learning_starts": 0, "verbose": 0}
    if algo == "SAC":
        model = SB3SAC("MlpPolicy", gym.make("Pendulum-v1"), batch_size=256, ent_coef="auto", **kwargs)
    else:
        model = SB3DQN("MlpPolicy", gym.make("CartPole-v1"), batch_size=64, max_grad_norm=10.0, **kwargs)
    model.learn(8)  # a few transitions to sample from (a batch draws with replacement)
    return flops(lambda: model.train(gradient_steps=1, batch_size=model.batch_size))


def main() -> None:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    rows = []
    print("| algorithm | ours (MFLOP) | Stable-Baselines3 (MFLOP) | SB3 / ours |\n| --- | --- | --- | --- |")
    for algo in ("SAC", "DQN"):
        a, b = ours(algo), sb3(algo)
        rows.append({"algorithm": algo, "ours": a, "sb3": b})
        print(f"| {algo} | {a / 1e6:.1f} | {b / 1e6:.1f} | {b / a:.3f} |")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
