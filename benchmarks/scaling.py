"""PPO env-steps/s with 1 and 2 DDP processes on CPU (scaling efficiency), and the time per weight sync.

    python -m benchmarks.scaling [--repeats 3] [--epochs 12] [--num-envs 8]

Each repeat runs a 1-process fit and a 2-process DDP fit (gloo) of PPO on CartPole-v1
(``experiment=ppo``'s rollout: ``num_envs`` envs x 32 steps per rank, 20 update epochs of
one minibatch), alternating, each in its own Python process, one thread per process.
env-steps/s is the global env-step count over rank zero's wall time from the second epoch
to the end of ``fit`` (process start-up and the first epoch excluded).
Scaling efficiency = sps(2 processes) / (2 x sps(1 process)).

Weight sync: median time of ``ActorCopy.sync`` (learner -> acting copy, both on the CPU)
for PPO's 64x64 actor-critic and SAC's 256x256 actor, in float32 and bfloat16.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

import gymnasium as gym
import numpy as np
import torch


def worker(devices: int, epochs: int, num_envs: int) -> None:
    """One fit; rank zero prints its JSON result line."""
    import lightning.pytorch as pl

    from rl_lightning import PPO, RolloutDataModule

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    pl.seed_everything(0, verbose=False)
    data = RolloutDataModule(
        env_id="CartPole-v1",
        num_envs=num_envs,
        rollout_steps=32,
        eval_interval=10**6,
        eval_episodes=devices,
    )
    model = PPO(
        lr=1e-3,
        gamma=0.98,
        gae_lambda=0.8,
        update_epochs=20,
        num_minibatches=1,
        hidden_sizes=[64, 64],
        total_timesteps=10**9,
    )

    class SteadyClock(pl.Callback):
        """Env steps and time from the second epoch on: process start-up and the first rollout excluded."""

        def on_train_epoch_start(self, trainer, pl_module):
            if trainer.current_epoch == 1:
                self.start = (time.perf_counter(), data.env_steps)

        def on_train_end(self, trainer, pl_module):
            self.end = (time.perf_counter(), data.env_steps)

    clock = SteadyClock()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp" if devices > 1 else "auto",
        max_epochs=epochs,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[clock],
    )
    trainer.fit(model, data)
    if trainer.is_global_zero:
        steps, seconds = clock.end[1] - clock.start[1], clock.end[0] - clock.start[0]
        print(json.dumps({"devices": devices, "env_steps": steps, "seconds": seconds}))


def run_fit(devices: int, epochs: int, num_envs: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    cmd = [sys.executable, "-m", "benchmarks.scaling", "--worker", str(devices), "--epochs", str(epochs)]
    proc = subprocess.run([*cmd, "--num-envs", str(num_envs)], capture_output=True, text=True, env=env, check=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")][-1]
    result = json.loads(line)
    result["sps"] = result["env_steps"] / result["seconds"]
    return result


def sync_times(repeats: int = 200) -> dict[str, float]:
    from rl_lightning.nets import ActorCritic, SquashedGaussianActor
    from rl_lightning.nets.actor_copy import ActorCopy

    torch.set_num_threads(1)
    box = gym.spaces.Box(-np.inf, np.inf, (4,))
    policies = {
        "PPO 64x64 actor-critic": ActorCritic(box, gym.spaces.Discrete(2)),
        "SAC 256x256 actor": SquashedGaussianActor(
            gym.spaces.Box(-np.inf, np.inf, (17,)), gym.spaces.Box(-1.0, 1.0, (6,)), (256, 256)
        ),
    }
    out = {}
    for name, policy in policies.items():
        for dtype in ("float32", "bfloat16"):
            actor = ActorCopy(policy, "cpu", dtype)
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                actor.sync()
                times.append(time.perf_counter() - start)
            out[f"{name}, {dtype}"] = 1e3 * statistics.median(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.epochs, args.num_envs)
        return
    sps: dict[int, list[float]] = {1: [], 2: []}
    for _ in range(args.repeats):
        for devices in (1, 2):
            sps[devices].append(run_fit(devices, args.epochs, args.num_envs)["sps"])
    medians = {d: statistics.median(v) for d, v in sps.items()}
    efficiency = medians[2] / (2 * medians[1])
    syncs = sync_times()
    print(
        f"PPO CartPole-v1, {args.num_envs} envs x 32 steps per rank, {args.epochs} epochs, "
        f"{args.repeats} alternating repeats, 1 thread per process, {os.cpu_count()} cores"
    )
    print("| processes | median env-steps/s | runs |\n| --- | --- | --- |")
    for devices, values in sps.items():
        print(f"| {devices} | {medians[devices]:.0f} | {', '.join(f'{v:.0f}' for v in values)} |")
    print(f"scaling efficiency (2 processes): {efficiency:.2f}")
    print("| weight sync (CPU -> CPU) | median ms |\n| --- | --- |")
    for name, ms in syncs.items():
        print(f"| {name} | {ms:.3f} |")
    print(json.dumps({"sps": sps, "medians": medians, "efficiency": efficiency, "sync_ms": syncs}))


if __name__ == "__main__":
    main()
