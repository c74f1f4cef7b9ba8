"""PPO on the device-native CartPole (``env.backend=torch``): throughput, the no-framework ceiling, time to solve.

One invocation measures, alternating the contenders over repeats (``benchmarks/run.py``'s
``alternate``):

1. **Throughput.** rl_lightning's PPO inside ``Trainer.fit`` on the batched torch CartPole
   (``RolloutDataModule(backend="torch")``: rollout, GAE, minibatches and update on one
   device) against the plain PyTorch loop on the same batched env
   (``benchmarks/plain_ppo.py``'s ``train_batched``, the "no framework" ceiling), both at
   :data:`SETTINGS` (``conf/experiment/ppo_batched.yaml``'s update: 1024 envs x 16 steps,
   4 epochs of 16 minibatches, lr 1e-3 annealed, no entropy bonus, clipped value loss), without
   observation normalization (the plain loop has none) or evaluation. Env-steps/s, medians
   and per-repeat ratios.
2. **Time to solve** (``benchmarks/solve_cartpole.py``'s watch: 10 deterministic episodes of
   plain CartPole-v1 reach a mean of 475, evaluation time excluded): ``+experiment=ppo_batched``
   against our gymnasium backend (``+experiment=ppo``, RL-Zoo's settings) and Stable-Baselines3
   with RL-Zoo's preset, over seeds.
3. **TensorDict's per-step cost** at this batch: writing one step's seven tensors into
   preallocated buffers, plain tensors against a ``TensorDict`` (what the rollout would pay per
   env step to keep its buffer as one), in microseconds per step and as a share of our
   measured step time.

Usage::

    python -m benchmarks.device_envs                 # 3 repeats, 3 seeds (about 3 minutes on 2 cores)
    python -m benchmarks.device_envs --quick         # 1 repeat, 1 seed, a short run
    python -m benchmarks.device_envs --device cuda   # the throughput part on a GPU
    python -m benchmarks.device_envs --compile       # ours with PPO(compile=True) (compiling inside the timed fit)
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time

import lightning.pytorch as pl
import torch

from benchmarks.plain_ppo import PPOSettings, train_batched
from benchmarks.run import alternate, finish, machine, paired, solve_table, summarize, table
from benchmarks.solve_cartpole import solve_ours, solve_sb3
from benchmarks.throughput import bare_trainer, ppo_model, timed_fit, timed_rollout_data

#: ``conf/experiment/ppo_batched.yaml``'s sizes and update.
SETTINGS = PPOSettings(num_envs=1024, rollout_steps=16, num_minibatches=16, update_epochs=4, lr=1e-3, ent_coef=0.0)


def ours(s: PPOSettings, env_steps: int, seed: int, device: str = "cpu", **extra) -> dict[str, float]:
    """rl_lightning's PPO through ``Trainer.fit`` on the batched torch env of ``s.env_id`` on ``device``; ``extra``:
    more of ``PPO``'s arguments (``compile=True``)."""
    pl.seed_everything(seed, verbose=False)
    data = timed_rollout_data(s.env_id, s.num_envs, s.rollout_steps, seed, backend="torch")
    trainer = bare_trainer(accelerator="gpu" if device.startswith("cuda") else "cpu", devices=1)
    if device == "cpu":
        data.setup("fit")  # envs built before the clock starts, as the plain loop's
    return timed_fit(trainer, ppo_model(s, env_steps, normalize_obs=False, **extra), data)


def plain(s: PPOSettings, env_steps: int, seed: int, device: str = "cpu") -> dict[str, float]:
    """The plain PyTorch loop on the same batched env."""
    return train_batched(s, env_steps, seed, device)


def tensordict_cost(num_envs: int, steps: int = 2000, repeats: int = 5) -> dict[str, float]:
    """Microseconds per env step to store one step (obs, action, log-prob, value, reward, terminated, truncated)
    into ``[steps, num_envs]`` buffers: as plain tensors, and as one ``TensorDict`` (median of ``repeats``)."""
    from tensordict import TensorDict

    obs, action = torch.randn(num_envs, 4), torch.randint(0, 2, (num_envs,))
    floats = [torch.randn(num_envs) for _ in range(3)]
    flags = [torch.zeros(num_envs, dtype=torch.bool) for _ in range(2)]
    step = {"obs": obs, "action": action, "log_prob": floats[0], "value": floats[1], "reward": floats[2]}
    step |= {"terminated": flags[0], "truncated": flags[1]}
    buffers = {k: torch.empty((steps, *v.shape), dtype=v.dtype) for k, v in step.items()}
    td = TensorDict({k: v.clone() for k, v in buffers.items()}, batch_size=[steps, num_envs])

    def write_plain():
        for t in range(steps):
            for k, v in step.items():
                buffers[k][t] = v

    def write_td():
        for t in range(steps):
            td[t] = TensorDict(step, batch_size=[num_envs])

    times = {"plain_us": [], "tensordict_us": []}
    for _ in range(repeats):
        for name, fn in (("plain_us", write_plain), ("tensordict_us", write_td)):
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) / steps * 1e6)
    return {k: statistics.median(v) for k, v in times.items()}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the time-to-solve part")
    parser.add_argument("--env-steps", type=int, default=30 * 16384, help="env steps per throughput run")
    parser.add_argument("--num-envs", type=int, default=SETTINGS.num_envs)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch intra-op threads")
    parser.add_argument("--quick", action="store_true", help="1 repeat, 1 seed, 4 rollouts: a smoke run")
    parser.add_argument("--skip-solve", action="store_true", help="throughput and TensorDict cost only")
    parser.add_argument("--compile", action="store_true", help="the throughput part's rl_lightning with compile=True")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.seeds = 1, 1
        args.env_steps = 4 * args.num_envs * SETTINGS.rollout_steps
    torch.set_num_threads(args.threads)
    s = dataclasses.replace(SETTINGS, num_envs=args.num_envs)
    info = machine()
    print(f"device_envs: {s.num_envs} envs on {args.device}, {args.env_steps} env steps per run, {args.threads} "
          f"torch thread(s); {info}", flush=True)  # fmt: skip
    report: dict = {"machine": info, "settings": dataclasses.asdict(s), "device": args.device, "threads": args.threads}
    report["compile"] = args.compile
    results = alternate(
        {
            "rl_lightning": lambda seed: ours(s, args.env_steps, seed, args.device, compile=args.compile),
            "plain_pytorch": lambda seed: plain(s, args.env_steps, seed, args.device),
        },
        args.repeats,
    )
    summary = summarize(results, "env_steps_per_second")
    report["throughput"] = {"runs": results, "env_steps_per_second": summary}
    lines = [
        f"### PPO, batched torch CartPole-v1, {s.num_envs} envs x {s.rollout_steps} steps on {args.device} "
        f"({args.env_steps} env steps per run, {args.repeats} alternating repeats, {args.threads} thread(s)"
        + (", rl_lightning with compile=True)" if args.compile else ")"),
        table("PPO", summary, "env-steps/s", ["plain_pytorch"]),
        "",
        paired(results, "env_steps_per_second", "rl_lightning", "plain_pytorch"),
    ]
    cost = tensordict_cost(s.num_envs)
    step_us = 1e6 / summary["rl_lightning"]["median"] * s.num_envs  # one batched step's share of our wall time
    report["tensordict"] = cost | {"our_step_us": step_us}
    lines += [
        "",
        f"Storing one step of {s.num_envs} envs: plain tensors {cost['plain_us']:.1f} us, TensorDict "
        f"{cost['tensordict_us']:.1f} us (+{cost['tensordict_us'] - cost['plain_us']:.1f} us, "
        f"{(cost['tensordict_us'] - cost['plain_us']) / step_us:.1%} of our {step_us:.0f} us per batched step).",
    ]
    if not args.skip_solve:
        print(f"solve: {args.seeds} seed(s)", flush=True)
        solved = alternate(
            {
                "rl_lightning_torch": lambda seed: solve_ours(seed, experiment="ppo_batched"),
                "rl_lightning": solve_ours,
                "stable_baselines3": solve_sb3,
            },
            args.seeds,
        )
        report["solve"] = {"runs": solved}
        lines += ["", *solve_table(f"Time to solve CartPole-v1 ({{}}; {args.seeds} seed(s))", solved, report)]
        lines += [
            "",
            "`rl_lightning_torch` is `+experiment=ppo_batched` (1024 batched torch envs); `rl_lightning` is "
            "`+experiment=ppo` (8 gymnasium envs, RL-Zoo's settings); `stable_baselines3` is RL-Zoo's preset.",
        ]
    return finish(lines, report, args.json)


if __name__ == "__main__":
    main()
