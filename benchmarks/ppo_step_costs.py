"""Where one PPO env step and one PPO update go at CleanRL's CartPole settings, piece by piece.

    python -m benchmarks.ppo_step_costs [--repeats 5] [--threads 1] [--num-envs 4]

Tight loops of the pieces one env step of ``RolloutDataset.collect`` runs on 4 CartPole-v1
envs (``ActorCritic.act`` on 4 observations, under ``no_grad`` and under ``inference_mode``, which the rollout's
steps run in; gymnasium's own ``SyncVectorEnv.step``; the
gymnasium backend's ``GymnasiumVectorEnv.step`` over it; ``EnvGroup.step`` over that, with
``pop_stats`` once per 128 steps as a rollout calls it; Stable-Baselines3's ``DummyVecEnv.step``
of the same envs, what its algorithms step), then one minibatch of the update
(``PPO.loss`` on 128 transitions, backward, Adam). Alternating repeats, medians. A tight
loop keeps its code and data in the CPU's caches; inside a fit, where acting, stepping and
learning take turns, each piece costs more (see ``docs/speed.md``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import gymnasium as gym
import torch

from benchmarks.throughput import PLAIN, PPO_SETTINGS, ppo_model
from benchmarks.timing import alternate, print_table
from rl_lightning import PPO
from rl_lightning.envs import EnvGroup


def pieces(num_envs: int = PPO_SETTINGS.num_envs) -> tuple[dict[str, Callable[[], None]], PPO, Callable[[], None]]:
    """The timed pieces (name -> one call) on ``num_envs`` envs, the PPO model whose policy they run, and a function
    closing the envs."""
    from stable_baselines3.common.env_util import make_vec_env

    group = EnvGroup("CartPole-v1", num_envs, obj_sets=PLAIN)
    group.reset(seed=0)
    raw = gym.make_vec("CartPole-v1", num_envs, vectorization_mode="sync")
    raw.reset(seed=0)
    sb3 = make_vec_env("CartPole-v1", n_envs=num_envs, seed=0)
    sb3.reset()
    model = ppo_model(PPO_SETTINGS, 10**6, normalize_obs=False)
    model.policy = policy = model.build_policy(group.observation_space, group.action_space)
    optimizer = torch.optim.Adam(policy.parameters(), lr=PPO_SETTINGS.lr, eps=1e-5, fused=True)
    actions = torch.zeros(num_envs, dtype=torch.int64)
    steps = {"n": 0}

    def group_step() -> None:
        group.step(actions)
        steps["n"] += 1
        if steps["n"] % 128 == 0:  # a rollout's 128 steps, then the statistics read
            group.pop_stats()

    batch = 128  # CleanRL's minibatch: 4 envs x 128 steps / 4 minibatches
    minibatch = {
        "obs": torch.randn(1, batch, 4),
        "action": torch.randint(2, (1, batch)),
        "episode_start": torch.zeros(1, batch, dtype=torch.bool),
        **{key: torch.randn(1, batch) for key in ("log_prob", "value", "advantage", "return")},
    }

    def update() -> None:
        terms = model.loss(minibatch)
        optimizer.zero_grad(set_to_none=True)
        terms.loss.backward()
        optimizer.step()

    @torch.no_grad()
    def act() -> None:
        policy.act(group.obs)

    @torch.inference_mode()  # what RolloutDataset.collect steps in
    def act_inference() -> None:
        policy.act(group.obs)

    def close() -> None:
        group.close()
        raw.close()
        sb3.close()

    return (
        {
            f"ActorCritic.act ({num_envs} observations)": act,
            "the same under inference_mode": act_inference,
            "gymnasium SyncVectorEnv.step": lambda: raw.step(actions.numpy()),
            "GymnasiumVectorEnv.step": lambda: group.env.step(actions),
            "EnvGroup.step": group_step,
            "Stable-Baselines3 DummyVecEnv.step": lambda: sb3.step(actions.numpy()),
            "PPO minibatch: loss, backward, Adam (128)": update,
        },
        model,
        close,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--num-envs", type=int, default=PPO_SETTINGS.num_envs, help="CartPoles stepped together")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    variants, _, close = pieces(args.num_envs)
    times = alternate(variants, args.repeats, steps=1000)
    print(f"torch {torch.__version__}, threads {args.threads}, {args.num_envs} envs, {args.repeats} alternating "
          "repeats of 1000 calls")  # fmt: skip
    medians = print_table(times)
    raw, adapter, env = (
        medians[k] * 1e3 for k in ("gymnasium SyncVectorEnv.step", "GymnasiumVectorEnv.step", "EnvGroup.step")
    )  # us
    print(
        f"EnvGroup.step over gymnasium's step: +{env - raw:.1f} us (the adapter +{adapter - raw:.1f} us, "
        f"the group +{env - adapter:.1f} us)"
    )
    close()


if __name__ == "__main__":
    main()
