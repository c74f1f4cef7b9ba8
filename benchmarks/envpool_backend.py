"""PPO on CartPole with ``env.backend=envpool`` (EnvPool's C++ batch) against the gymnasium backend.

One invocation, contenders alternating over repeats: rl_lightning's PPO inside ``Trainer.fit``
at CleanRL's ``ppo.py`` settings (``throughput.PPO_SETTINGS``: 4 envs x 128 steps, 4 epochs
of 4 minibatches), and the same with 64 envs (64 x 128 steps, still 4 minibatches), each once
on the gymnasium backend (one gymnasium env per index) and once on EnvPool
(``rl_lightning.envs.envpool_env``, EnvPool's C++ batch on the CPU). No evaluation, no observation
normalization; env-steps/s, medians and per-repeat ratios.

Usage::

    python -m benchmarks.envpool_backend             # 3 repeats (about 3 minutes on 2 cores)
    python -m benchmarks.envpool_backend --quick     # 1 repeat, short runs
"""

from __future__ import annotations

import argparse
import dataclasses

import lightning.pytorch as pl

from benchmarks.plain_ppo import PPOSettings
from benchmarks.run import alternate, finish, machine, paired, summarize, table
from benchmarks.throughput import PPO_SETTINGS, bare_trainer, ppo_model, timed_fit, timed_rollout_data


def ours(s: PPOSettings, env_steps: int, seed: int, backend: str) -> dict[str, float]:
    """rl_lightning's PPO at ``s`` on ``backend``, envs built before the clock starts."""
    pl.seed_everything(seed, verbose=False)
    data = timed_rollout_data(s.env_id, s.num_envs, s.rollout_steps, seed, backend=backend)
    data.setup("fit")
    return timed_fit(bare_trainer(), ppo_model(s, env_steps, normalize_obs=False), data)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--env-steps", type=int, default=65_536, help="env steps per run at 4 envs (x4 at 64 envs)")
    parser.add_argument("--quick", action="store_true", help="1 repeat, short runs (a smoke run)")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.env_steps = 1, 8 * PPO_SETTINGS.num_envs * PPO_SETTINGS.rollout_steps
    info = machine()
    print(f"envpool_backend: {info}", flush=True)
    report: dict = {"machine": info}
    lines = []
    wide = dataclasses.replace(PPO_SETTINGS, num_envs=64)
    for name, s, steps in (("cleanrl", PPO_SETTINGS, args.env_steps), ("64_envs", wide, 4 * args.env_steps)):
        results = alternate(
            {
                "envpool": lambda seed, s=s, steps=steps: ours(s, steps, seed, "envpool"),
                "gymnasium": lambda seed, s=s, steps=steps: ours(s, steps, seed, "gymnasium"),
            },
            args.repeats,
        )
        summary = summarize(results, "env_steps_per_second")
        report[name] = {"settings": dataclasses.asdict(s), "env_steps": steps, "runs": results, "summary": summary}
        lines += [
            f"### PPO, CartPole-v1, {s.num_envs} envs x {s.rollout_steps} steps, {s.num_minibatches} minibatches "
            f"({steps} env steps per run, {args.repeats} alternating repeats)",
            table("PPO", summary, "env-steps/s", ["gymnasium"]),
            "",
            paired(results, "env_steps_per_second", "envpool", "gymnasium"),
            "",
        ]
    return finish(lines, report, args.json)


if __name__ == "__main__":
    main()
