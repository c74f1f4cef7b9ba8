"""The benchmark runner: rl_lightning against Stable-Baselines3, a plain PyTorch loop and the env ceiling.

    pip install -e ".[bench]"
    python -m benchmarks.run [--quick] [--suites ppo,solve,offpolicy,ceiling,scaling,atari] [--repeats 3] [--out DIR]
                             [--compile]

Suites (all in one invocation, contenders alternating within every repeat so a shared
machine's noise falls on all of them alike; medians, ranges and ratios reported):

- ``ppo``: PPO on CartPole-v1 at CleanRL's settings, env-steps/s of rl_lightning,
  Stable-Baselines3 and the plain loop (``benchmarks/throughput.py``).
- ``solve``: wall time and env steps to solve CartPole-v1, our tuned experiment against
  Stable-Baselines3 with RL-Zoo's preset, over seeds (``benchmarks/solve_cartpole.py``).
- ``offpolicy``: SAC on Pendulum-v1 (``benchmarks/sac_vs_sb3.py``) and DQN on CartPole-v1
  (``benchmarks/throughput.py``): gradient-steps/s and env-steps/s against Stable-Baselines3.
- ``ceiling``: random-action env stepping at the PPO suite's vectorization (4 CartPole envs,
  sync): the most any training loop could reach; the PPO figures are reported as a share of it.
- ``scaling``: env-steps/s as ``num_envs`` grows, sync and async, CartPole and HalfCheetah
  (``benchmarks/env_scaling.py``), drawn to ``DIR/env_scaling.png``.
- ``atari`` (not in the default set: it needs ``pip install -e ".[envs]"`` and 5 minutes):
  PPO on Breakout at CleanRL's ``ppo_atari.py`` settings against Stable-Baselines3's
  ``CnnPolicy`` and CleanRL's loop (``benchmarks/atari.py``).

``--compile`` runs our PPO, SAC and DQN of the ``ppo`` and ``offpolicy`` suites with ``compile=True``
(``torch.compile`` of the loss and acting; its seconds fall inside the timed fit).

Writes ``DIR/results.json`` (every measurement, thread counts, machine and versions) and
``DIR/results.md`` (the tables); prints the tables. The full run takes about 15 minutes on
2 cores, ``--quick`` under 3 (shorter runs, fewer seeds: for checking, not for quoting).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from importlib import metadata

import torch

from benchmarks import throughput
from benchmarks.solve_cartpole import solve_ours, solve_sb3

THREADS = 1

#: Sizes per suite: (full, quick).
SIZES = {
    "ppo_env_steps": (65_536, 8_192),
    "dqn_env_steps": (6_000, 2_000),
    # RL-Zoo's chunks (256 env steps, then 128 gradient steps): whole chunks, learning from env step 1,000.
    "dqn_chunk_env_steps": (8_192, 2_048),
    "sac_env_steps": (2_100, 600),
    "solve_seeds": (3, 1),
    "atari_env_steps": (4_096, 1_024),
}


def machine() -> dict[str, object]:
    """What the figures were measured on: CPU, core count, thread setting and package versions."""
    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            names = [line.split(":", 1)[1].strip() for line in f if line.startswith("model name")]
        cpu = names[0] if names else cpu
    versions = {}
    for package in ("torch", "lightning", "torchrl", "tensordict", "gymnasium", "numpy", "stable_baselines3"):
        try:
            versions[package] = metadata.version(package.replace("_", "-"))
        except metadata.PackageNotFoundError:
            versions[package] = None
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "versions": versions,
    }


def alternate(contenders: dict[str, Callable[[int], dict]], repeats: int) -> dict[str, list[dict]]:
    """Run every contender once per repeat, in turn; ``repeat`` is passed as the seed."""
    results: dict[str, list[dict]] = {name: [] for name in contenders}
    for repeat in range(repeats):
        for name, run in contenders.items():
            results[name].append(run(repeat))
            print(f"  {name} #{repeat}: {_short(results[name][-1])}", flush=True)
    return results


def _short(result: dict) -> str:
    return ", ".join(f"{k} {v:.1f}" if isinstance(v, float) else f"{k} {v}" for k, v in result.items())


def summarize(results: dict[str, list[dict]], key: str) -> dict[str, dict[str, float]]:
    """Median and range of ``key`` per contender."""
    out = {}
    for name, runs in results.items():
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            out[name] = {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}
    return out


def table(title: str, summary: dict[str, dict[str, float]], unit: str, baselines: list[str]) -> str:
    """A markdown table of medians and ranges, with ratios of each row to each baseline."""
    head = f"| {title} | median {unit} | range | " + " | ".join(f"/ {b}" for b in baselines) + " |"
    lines = [head, "| --- " * (3 + len(baselines)) + "|"]
    for name, s in summary.items():
        ratios = [f"{s['median'] / summary[b]['median']:.2f}x" if b in summary else "-" for b in baselines]
        lines.append(f"| {name} | {s['median']:.0f} | {s['min']:.0f}-{s['max']:.0f} | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


def paired(results: dict[str, list[dict]], key: str, ours: str, baseline: str) -> str:
    """One line: the ratio ``ours / baseline`` of every repeat (run back to back) and their median.

    The machines drift by tens of percent within minutes; a repeat's two runs share the same
    conditions, so the median of per-repeat ratios moves less between invocations than the
    ratio of the two medians the table shows.
    """
    pairs = zip(results[ours], results[baseline], strict=True)
    ratios = [a[key] / b[key] for a, b in pairs if a.get(key) and b.get(key)]
    if not ratios:
        return ""
    shown = ", ".join(f"{r:.2f}" for r in ratios)
    return f"Per repeat, {ours} / {baseline}: {shown}; median {statistics.median(ratios):.2f}x."


def finish(lines: list[str], report: dict, json_path: str | None) -> dict:
    """Print a standalone benchmark's markdown lines and write its figures to ``json_path`` (if given)."""
    print("\n".join(lines))
    if json_path:
        with open(json_path, "w") as f:
            json.dump(report, f, indent=2, default=float)
    return report


# ---------------------------------------------------------------- suites
def suite_ppo(quick: bool, repeats: int, report: dict, compile: bool = False) -> list[str]:
    steps = SIZES["ppo_env_steps"][quick]
    print(f"ppo: CleanRL settings, {steps} env steps per run", flush=True)
    results = alternate(
        {
            "rl_lightning": lambda seed: throughput.ppo_ours(steps, seed, compile=compile),
            "stable_baselines3": lambda seed: throughput.ppo_sb3(steps, seed),
            "plain_pytorch": lambda seed: throughput.ppo_plain(steps, seed),
        },
        repeats,
    )
    summary = summarize(results, "env_steps_per_second")
    report["ppo"] = {"env_steps": steps, "runs": results, "env_steps_per_second": summary}
    return [
        f"### PPO, CartPole-v1, CleanRL's settings ({steps} env steps per run, {repeats} alternating repeats)",
        table("PPO", summary, "env-steps/s", ["stable_baselines3", "plain_pytorch"]),
        *pairs(results, "env_steps_per_second", "plain_pytorch"),
    ]


def pairs(results: dict[str, list[dict]], metric: str, other: str) -> list[str]:
    """Per-repeat ratios of ours to Stable-Baselines3 and to ``other``."""
    return [
        "",
        paired(results, metric, "rl_lightning", "stable_baselines3"),
        paired(results, metric, "rl_lightning", other),
    ]


def suite_solve(quick: bool, repeats: int, report: dict) -> list[str]:
    seeds = SIZES["solve_seeds"][quick]
    print(f"solve: CartPole-v1 to {475}, {seeds} seed(s)", flush=True)
    results = alternate({"rl_lightning": solve_ours, "stable_baselines3": solve_sb3}, seeds)
    report["solve"] = {"runs": results}
    return solve_table(f"Time to solve CartPole-v1 ({{}}; {seeds} seed(s); evaluation time excluded)", results, report)


def solve_table(title: str, results: dict[str, list[dict]], report: dict) -> list[str]:
    """Markdown lines of a time-to-solve table; ``title``'s ``{}`` takes the criterion. Medians go to ``report``."""
    lines = [
        "### " + title.format("10-episode deterministic mean >= 475"),
        "| contender | solved | median seconds | seconds per seed | median env steps | env steps per seed |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name, runs in results.items():
        solved = [r for r in runs if r["solved"]]
        seconds = [r["seconds"] for r in solved]
        # An unsolved seed counts as never: the median over seeds treats it as infinitely slow.
        all_seconds = sorted(seconds + [float("inf")] * (len(runs) - len(solved)))
        median_seconds = statistics.median(all_seconds)
        report["solve"][name] = {"median_seconds": median_seconds, "solved": len(solved)}
        lines.append(
            f"| {name} | {len(solved)}/{len(runs)} | {median_seconds:.1f} | "
            + ", ".join("-" if r["seconds"] is None else f"{r['seconds']:.1f}" for r in runs)
            + f" | {statistics.median(r['env_steps'] for r in runs):.0f} | "
            + ", ".join(str(r["env_steps"]) for r in runs)
            + " |"
        )
    return lines


def suite_offpolicy(quick: bool, repeats: int, report: dict, compile: bool = False) -> list[str]:
    from benchmarks import sac_vs_sb3

    lines = []
    sac_steps, dqn_steps = SIZES["sac_env_steps"][quick], SIZES["dqn_env_steps"][quick]
    chunk_steps = SIZES["dqn_chunk_env_steps"][quick]
    print(f"offpolicy: SAC Pendulum-v1 {sac_steps} env steps, DQN CartPole-v1 {dqn_steps} env steps", flush=True)
    rl_zoo = (256, 128)
    for algo, contenders, steps in [
        (
            "SAC, Pendulum-v1",
            {
                "rl_lightning": lambda seed: sac_vs_sb3.ours(sac_steps, seed, compile=compile),
                "stable_baselines3": lambda seed: sac_vs_sb3.sb3(sac_steps, seed),
            },
            sac_steps,
        ),
        (
            "DQN, CartPole-v1",
            {
                "rl_lightning": lambda seed: throughput.dqn_ours(dqn_steps, seed, compile=compile),
                "stable_baselines3": lambda seed: throughput.dqn_sb3(dqn_steps, seed),
            },
            dqn_steps,
        ),
        (
            "DQN, CartPole-v1, RL-Zoo's chunks (train_freq 256, gradient_steps 128)",
            {
                "rl_lightning": lambda seed: throughput.dqn_ours(chunk_steps, seed, rl_zoo, compile=compile),
                "stable_baselines3": lambda seed: throughput.dqn_sb3(chunk_steps, seed, rl_zoo),
            },
            chunk_steps,
        ),
    ]:
        results = alternate(contenders, repeats)
        grad = summarize(results, "gradient_steps_per_second")
        env = summarize(results, "env_steps_per_second")
        report.setdefault("offpolicy", {})[algo] = {
            "env_steps": steps,
            "runs": results,
            "gradient_steps_per_second": grad,
            "env_steps_per_second": env,
        }
        schedule = "" if "chunks" in algo else ", one gradient step per env step after the random steps"
        lines += [
            f"### {algo} ({steps} env steps per run{schedule})",
            table(algo.split(",")[0], grad, "gradient-steps/s", ["stable_baselines3"]),
            "",
            paired(results, "gradient_steps_per_second", "rl_lightning", "stable_baselines3"),
            "",
            table(algo.split(",")[0], env, "env-steps/s", ["stable_baselines3"]),
            "",
        ]
    return lines


def suite_atari(quick: bool, repeats: int, report: dict) -> list[str]:
    from benchmarks import atari

    steps = SIZES["atari_env_steps"][quick]
    print(f"atari: PPO Breakout, CleanRL's ppo_atari.py settings, {steps} env steps per run", flush=True)
    atari.warm_up()
    results = alternate(
        {name: (lambda seed, run=run: run(steps, seed)) for name, run in atari.CONTENDERS.items()}, repeats
    )
    summary = summarize(results, "env_steps_per_second")
    report["atari"] = {"env_steps": steps, "runs": results, "env_steps_per_second": summary}
    return [
        f"### PPO, ALE/Breakout-v5, CleanRL's ppo_atari.py settings ({steps} env steps per run, {repeats} repeats)",
        *atari.report(results),
    ]


def suite_ceiling(quick: bool, repeats: int, report: dict) -> list[str]:
    from benchmarks.env_scaling import library_env_steps_per_second, raw_env_steps_per_second

    s = throughput.PPO_SETTINGS
    print(f"ceiling: random actions, {s.num_envs} x {s.env_id}, sync", flush=True)
    results = alternate(
        {
            "gymnasium SyncVectorEnv": lambda seed: {
                "env_steps_per_second": raw_env_steps_per_second(s.env_id, s.num_envs, "sync", seed=seed)
            },
            "rl_lightning EnvGroup": lambda seed: {
                "env_steps_per_second": library_env_steps_per_second(s.env_id, s.num_envs, "sync", seed=seed)
            },
        },
        repeats,
    )
    summary = summarize(results, "env_steps_per_second")
    report["ceiling"] = {"runs": results, "env_steps_per_second": summary}
    lines = [
        f"### Ceiling: random-action stepping of {s.num_envs} x {s.env_id} (sync), no learning",
        table("stepping", summary, "env-steps/s", ["gymnasium SyncVectorEnv"]),
    ]
    if "ppo" in report:
        ceiling = summary["gymnasium SyncVectorEnv"]["median"]
        shares = {k: v["median"] / ceiling for k, v in report["ppo"]["env_steps_per_second"].items()}
        report["ceiling"]["ppo_share_of_ceiling"] = shares
        lines.append("")
        lines.append(
            "Share of the ceiling reached by PPO training: " + ", ".join(f"{k} {v:.0%}" for k, v in shares.items())
        )
    return lines


def suite_scaling(quick: bool, repeats: int, report: dict, out: str) -> list[str]:
    from benchmarks.env_scaling import plot_scaling, scaling_curves

    print("scaling: env-steps/s against num_envs", flush=True)
    records = scaling_curves(quick=quick)
    path = os.path.join(out, "env_scaling.png")
    plot_scaling(records, path)
    report["scaling"] = {"records": records, "plot": path}
    envs = sorted({r["env_id"] for r in records})
    counts = sorted({r["num_envs"] for r in records})
    lines = [
        f"### Env stepping against num_envs (random actions; plot: {path})",
        "| env | vectorization | " + " | ".join(str(n) for n in counts) + " |",
        "| --- | --- | " + "--- | " * len(counts),
    ]
    for env in envs:
        for vec in ("sync", "async"):
            row = {
                r["num_envs"]: r["env_steps_per_second"]
                for r in records
                if r["env_id"] == env and r["vectorization"] == vec
            }
            if row:
                lines.append(
                    f"| {env} | {vec} | " + " | ".join(f"{row[n]:.0f}" if n in row else "-" for n in counts) + " |"
                )
    return lines


SUITES = ("ppo", "solve", "offpolicy", "ceiling", "scaling", "atari")
#: What runs without --suites (atari needs the envs extra and minutes more).
DEFAULT_SUITES = ("ppo", "solve", "offpolicy", "ceiling", "scaling")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, fewer seeds (under 3 minutes)")
    parser.add_argument(
        "--suites", default=",".join(DEFAULT_SUITES), help=f"comma-separated subset of {','.join(SUITES)}"
    )
    parser.add_argument("--repeats", type=int, default=3, help="alternating repeats per throughput suite")
    parser.add_argument("--out", default="bench_results", help="directory for results.json, results.md, plots")
    parser.add_argument(
        "--compile", action="store_true", help="our PPO, SAC and DQN (ppo, offpolicy suites) with compile=True"
    )
    args = parser.parse_args(argv)
    suites = [s.strip() for s in args.suites.split(",") if s.strip()]
    unknown = sorted(set(suites) - set(SUITES))
    if unknown:
        parser.error(f"unknown suite(s) {unknown}; choose from {list(SUITES)}")
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    os.makedirs(args.out, exist_ok=True)
    # One thread everywhere, set before anything runs: small networks gain nothing from more,
    # and the contenders must share the same setting.
    torch.set_num_threads(THREADS)
    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    report: dict = {
        "machine": machine(),
        "quick": args.quick,
        "repeats": args.repeats,
        "compile": args.compile,
        "command": sys.argv,
    }
    start = time.perf_counter()
    sections = []
    for suite in SUITES:  # fixed order: the ceiling section reads the PPO figures
        if suite not in suites:
            continue
        t0 = time.perf_counter()
        if suite == "scaling":
            lines = suite_scaling(args.quick, args.repeats, report, args.out)
        elif suite in ("ppo", "offpolicy"):
            lines = globals()[f"suite_{suite}"](args.quick, args.repeats, report, compile=args.compile)
        else:
            lines = globals()[f"suite_{suite}"](args.quick, args.repeats, report)
        report.setdefault("suite_seconds", {})[suite] = time.perf_counter() - t0
        sections.append("\n".join(lines))
    report["total_seconds"] = time.perf_counter() - start
    m = report["machine"]
    header = (
        f"Measured on {m['cpu']} ({m['cpu_count']} cores), {m['torch_threads']} torch thread, Python {m['python']}, "
        + ", ".join(f"{k} {v}" for k, v in m["versions"].items() if v)
        + f"; {'--quick' if args.quick else 'full'} run of {report['total_seconds'] / 60:.1f} min"
        + ("; rl_lightning with compile=True." if args.compile else ".")
    )
    markdown = header + "\n\n" + "\n\n".join(sections) + "\n"
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(report, f, indent=2, default=float)
    print("\n" + markdown)
    return report


if __name__ == "__main__":
    main()
