"""SAC collecting from the batched torch Pendulum (``env.backend=torch``) against our single-env SAC.

One invocation:

1. **Throughput**, alternating over repeats: SAC on 32 batched torch Pendulums with one
   gradient step per batched step (``utd_ratio`` 1/32, ``conf/experiment/sac_batched.yaml``)
   against our SAC on one gymnasium Pendulum with one gradient step per env step
   (``conf/experiment/sac.yaml``, RL-Zoo's settings), both for the same number of gradient
   steps (batch 256, 256x256 networks, lr 1e-3), without evaluation. Env-steps/s and
   gradient-steps/s, medians and per-repeat ratios.
2. **Learning**: ``+experiment=sac_batched`` through ``Trainer.fit`` to its budget (320k env
   steps, 10,000 gradient steps), then ``trainer.test``: the deterministic train-set return
   (Pendulum's usual bar is -250) and the wall time, per seed.

Usage::

    python -m benchmarks.device_sac                  # 3 repeats, 1 learning seed (about 4 minutes on 2 cores)
    python -m benchmarks.device_sac --quick          # short runs, no learning part
"""

from __future__ import annotations

import argparse
import os
import time

import lightning.pytorch as pl
import torch

from benchmarks.run import alternate, finish, machine, paired, summarize, table
from benchmarks.throughput import bare_trainer, timed_fit

BATCHED_ENVS = 32
LEARNING_STARTS = 256
CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "conf")


def sac(gradient_steps: int, seed: int, num_envs: int, backend: str) -> dict[str, float]:
    """Our SAC for ``gradient_steps`` gradient steps after ``LEARNING_STARTS`` random env steps, one gradient
    step per batched step of ``num_envs`` transitions; env and gradient steps per second of the fit."""
    from rl_lightning import SAC, ReplayDataModule

    env_steps = LEARNING_STARTS + gradient_steps * num_envs  # one after each batched step past LEARNING_STARTS
    pl.seed_everything(seed, verbose=False)
    data = ReplayDataModule(
        env_id="Pendulum-v1",
        backend=backend,
        num_envs=num_envs,
        steps_per_epoch=env_steps,
        learning_starts=LEARNING_STARTS,
        utd_ratio=1 / num_envs,
        batch_size=256,
        eval_interval=10**6,
        eval_episodes=1,
        seed=seed,
    )
    model = SAC(actor_lr=1e-3, critic_lr=1e-3, alpha_lr=1e-3, total_timesteps=env_steps)
    data.setup("fit")  # envs built before the clock starts
    return timed_fit(bare_trainer(max_epochs=1), model, data)


def learn(seed: int) -> dict[str, float]:
    """``+experiment=sac_batched`` to its budget, then the test on both object sets; return and seconds."""
    from hydra import compose, initialize_config_dir

    from rl_lightning.launch.app import build_data, build_model

    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=sac_batched", f"seed={seed}", "run_dir=."])
    pl.seed_everything(seed, verbose=False)
    data, model = build_data(cfg), build_model(cfg, save_interval=None)
    trainer = bare_trainer()
    start = time.perf_counter()
    trainer.fit(model, data)
    seconds = time.perf_counter() - start
    metrics = {k: float(v) for r in trainer.test(model, data, verbose=False) for k, v in r.items()}
    data.close()
    return {
        "env_steps": data.env_steps,
        "gradient_steps": trainer.global_step,
        "fit_seconds": seconds,
        "train_return": metrics["eval/return_mean"],
        "test_return": metrics.get("eval_ood/return_mean", float("nan")),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gradient-steps", type=int, default=1500, help="gradient steps per throughput run")
    parser.add_argument("--seeds", type=int, default=1, help="seeds of the learning part (0: skip it)")
    parser.add_argument("--quick", action="store_true", help="1 repeat of 100 gradient steps, no learning part")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.gradient_steps, args.seeds = 1, 100, 0
    info = machine()
    print(f"device_sac: {args.gradient_steps} gradient steps per run; {info}", flush=True)
    results = alternate(
        {
            "batched_torch": lambda seed: sac(args.gradient_steps, seed, BATCHED_ENVS, "torch"),
            "single_env": lambda seed: sac(args.gradient_steps, seed, 1, "gymnasium"),
        },
        args.repeats,
    )
    report: dict = {"machine": info, "threads": torch.get_num_threads(), "throughput": {"runs": results}}
    lines = [
        f"### SAC, Pendulum-v1: {BATCHED_ENVS} batched torch envs (one gradient step per batched step) against one "
        f"gymnasium env (one per env step); {args.gradient_steps} gradient steps per run, {args.repeats} "
        "alternating repeats",
    ]
    for key, unit in (("env_steps_per_second", "env-steps/s"), ("gradient_steps_per_second", "gradient-steps/s")):
        summary = summarize(results, key)
        report["throughput"][key] = summary
        lines += [table("SAC", summary, unit, ["single_env"]), "", paired(results, key, "batched_torch", "single_env")]
        lines.append("")
    if args.seeds:
        learned = [learn(seed) for seed in range(args.seeds)]
        report["learning"] = learned
        lines.append("`+experiment=sac_batched` to its budget, then `trainer.test` (10 deterministic episodes a set):")
        lines.append("| seed | env steps | gradient steps | fit seconds | train-set return | test-set return |")
        lines.append("| --- | --- | --- | --- | --- | --- |")
        for seed, r in enumerate(learned):
            lines.append(
                f"| {seed} | {r['env_steps']} | {r['gradient_steps']} | {r['fit_seconds']:.0f} | "
                f"{r['train_return']:.1f} | {r['test_return']:.1f} |"
            )
    return finish(lines, report, args.json)


if __name__ == "__main__":
    main()
