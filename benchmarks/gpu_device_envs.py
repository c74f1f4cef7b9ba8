"""GPU readiness of the torch backend: PPO on 4096 device-native CartPole envs, env-steps/s, memory, time shares.

    python -m benchmarks.gpu_device_envs [--num-envs 4096] [--rollouts 30] [--out gpu_device_envs.json]

Prepared for a machine with a CUDA GPU (the device is ``cuda`` unless ``--device`` says
otherwise; ``tests/benchmarks/test_gpu_device_envs.py`` runs it on the CPU at small sizes so
it cannot rot). It fits ``+experiment=ppo_batched``'s PPO (``RolloutDataModule(backend="torch")``:
the batched torch CartPole lives on the GPU, and the rollout, GAE, minibatches and update stay
there) twice: a short warm-up fit (CUDA context, kernels, allocator), then the measured fit of
``--rollouts`` rollouts. Reported:

- ``env_steps_per_second``: env steps of the measured fit over its wall time (``Trainer.fit``);
- ``gpu_memory_peak_bytes``: ``torch.cuda.max_memory_allocated`` over the measured fit (``null`` on the CPU);
- ``shares``: the share of the measured fit's wall time in env stepping, policy inference,
  optimization (GAE included), evaluation and the rest, from ``PhaseTimer(synchronize=True)``
  (which waits for the device at each phase boundary, so the shares are device time; the
  throughput figure comes from a separate fit without those waits).

Prints and writes one JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import lightning.pytorch as pl
import torch

from benchmarks.device_envs import SETTINGS
from benchmarks.throughput import bare_trainer, ppo_model, timed_rollout_data
from rl_lightning.callbacks.timing import PHASES, PhaseTimer


def fit(num_envs: int, rollouts: int, device: str, timer: PhaseTimer | None = None, seed: int = 0) -> dict:
    """One PPO fit of ``rollouts`` rollouts on ``num_envs`` batched envs on ``device``; env steps and seconds."""
    pl.seed_everything(seed, verbose=False)
    steps = rollouts * num_envs * SETTINGS.rollout_steps
    data = timed_rollout_data(SETTINGS.env_id, num_envs, SETTINGS.rollout_steps, seed, backend="torch")
    accelerator = "gpu" if device.startswith("cuda") else "cpu"
    trainer = bare_trainer(callbacks=[timer] if timer else [], accelerator=accelerator, devices=1)
    model = ppo_model(SETTINGS, steps, normalize_obs=False)
    if accelerator == "gpu":
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    trainer.fit(model, data)
    seconds = time.perf_counter() - start
    data.close()
    return {"env_steps": data.env_steps, "seconds": seconds, "env_steps_per_second": data.env_steps / seconds}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--rollouts", type=int, default=30, help="rollouts of the measured fit")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", help="also write the JSON object here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(
            "benchmarks.gpu_device_envs: --device cuda, but torch sees no CUDA GPU "
            f"(torch {torch.__version__}). Run it where one is, or pass --device cpu for a dry run."
        )
    fit(args.num_envs, 2, args.device)  # warm-up: CUDA context, kernels, allocator
    measured = fit(args.num_envs, args.rollouts, args.device)
    memory = torch.cuda.max_memory_allocated() if args.device.startswith("cuda") else None
    timer = PhaseTimer(print_summary=False, synchronize=True)
    timed = fit(args.num_envs, args.rollouts, args.device, timer)
    wall = max(timer.fit_seconds, 1e-9)
    # An acting copy's weight sync is timed within the other phases (none here): not a share of its own.
    shares = {phase: timer.totals[phase] / wall for phase in PHASES if phase != "sync"}
    shares["other"] = max(0.0, 1.0 - sum(shares.values()))
    result = {
        "device": args.device,
        "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "num_envs": args.num_envs,
        "rollout_steps": SETTINGS.rollout_steps,
        "rollouts": args.rollouts,
        **measured,
        "gpu_memory_peak_bytes": memory,
        "synchronized_env_steps_per_second": timed["env_steps_per_second"],
        "shares": shares,
    }
    print(json.dumps(result, indent=2))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f, indent=2)
    return result


if __name__ == "__main__":
    main()
