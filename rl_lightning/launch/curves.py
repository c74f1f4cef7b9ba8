"""``rl-lightning plot``: learning curves of runs, train and test object sets side by side.

    rl-lightning plot runs/2026-11-30_10-00-00                 # one run
    rl-lightning plot multirun/2026-11-30_10-00-00 --out ppo.png  # a sweep: mean and range over seeds
    rl-lightning plot multirun/ppo_a multirun/ppo_b             # two groups compared

Each positional path is one curve: every run found under it (a directory holding a ``metrics.csv`` from the CSV logger
or TensorBoard event files) counts as one seed, unless the runs' settings (the ``hparams.yaml`` their logger wrote)
differ in more than the seed, the budget and where they keep their files: a sweep over ``algo.lr`` and ``seed`` draws a
curve for each learning rate, labelled by it. The x-axis is environment steps; the panels are ``eval/return_mean``
(training object set) and ``eval_ood/return_mean`` (held-out ``test`` set).
"""

from __future__ import annotations

import argparse
import csv
import os
from collections.abc import Sequence

import numpy as np
import yaml

PANELS = (("eval/return_mean", "train object set (eval/)"), ("eval_ood/return_mean", "test object set (eval_ood/)"))
Curve = tuple[np.ndarray, np.ndarray]  # (env steps, values), sorted by steps


#: Settings that may differ between the seeds of one curve: the seed, the budget, where a run keeps its files and how
#: it runs (a Hydra run's loggers, callbacks and trainer are left out whole).
PER_RUN = {"seed", "total_timesteps", "save_interval", "keep_last", "compile", "flush_denormal", "vectorization",
           "max_env_restarts", "worker_start_method", "worker_timeout", "storage", "scratch_dir",
           "save_replay_buffer"}  # fmt: skip


def settings(run_dir: str) -> dict[str, str]:
    """A run's settings, from the ``hparams.yaml`` its logger wrote beside the metrics, as dotted keys (a Hydra run's
    as its command line names them: ``algo.lr``) without :data:`PER_RUN`'s; ``{}`` where none can be read."""
    try:  # BaseLoader: every value as text, and the tags of objects a user's hparams hold are not imported
        with open(os.path.join(run_dir, "hparams.yaml")) as f:
            nodes, flat = [("", yaml.load(f, Loader=yaml.BaseLoader))], {}
    except (OSError, yaml.YAMLError):
        return {}
    while nodes:
        key, node = nodes.pop()
        if isinstance(node, dict):
            nodes += [(f"{key}.{k}" if key else str(k), v) for k, v in node.items()]
        elif key.rpartition(".")[2] not in PER_RUN:
            flat[key] = str(node)
    if any(key.startswith("config.") for key in flat):  # a Hydra run's: the algo, env and data groups, what it learns
        learning = ("config.algo.", "config.env.", "config.data.")  # named as on the command line (algo.lr)
        return {k.removeprefix("config."): v for k, v in flat.items() if k.startswith(learning)}
    return flat


def find_runs(path: str) -> list[str]:
    """Run directories under ``path`` (itself included): those with ``metrics.csv`` or TensorBoard events."""
    runs = []
    for root, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if d not in ("checkpoints", "wandb", ".hydra"))
        if "metrics.csv" in files or any(f.startswith("events.out.tfevents") for f in files):
            runs.append(root)
    return runs


def read_curves(run_dir: str, keys: Sequence[str] = tuple(k for k, _ in PANELS)) -> dict[str, Curve]:
    """Curves of ``keys`` against env steps from one run's CSV metrics or TensorBoard events."""
    # Values by step: the final test repeats the last evaluation's step, whose last value is kept.
    found: dict[str, dict[float, float]] = {k: {} for k in keys}
    csv_path = os.path.join(run_dir, "metrics.csv")
    if os.path.exists(csv_path):
        with open(csv_path, newline="") as f:
            for row in csv.DictReader(f):
                step = row.get("time/env_steps") or row.get("step")
                for key in keys:
                    if row.get(key) not in (None, "") and step not in (None, ""):
                        found[key][float(step)] = float(row[key])
    else:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        events = EventAccumulator(run_dir, size_guidance={"scalars": 0})
        events.Reload()
        tags = set(events.Tags().get("scalars", []))
        for key in keys:
            if key in tags:  # the modules log `step` = env steps, so TensorBoard's step is env steps
                for event in events.Scalars(key):
                    found[key][float(event.step)] = float(event.value)
    return {k: (np.array(sorted(v)), np.array([v[s] for s in sorted(v)])) for k, v in found.items() if v}


def aggregate(curves: Sequence[Curve]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, min and max over seeds on a shared grid of env steps (where every seed has data).

    Returns:
        ``(steps, mean, low, high)``.
    """
    end = min(c[0][-1] for c in curves)
    grid = np.unique(np.concatenate([c[0][c[0] <= end] for c in curves]))
    values = np.stack([np.interp(grid, steps, vals) for steps, vals in curves])
    return grid, values.mean(0), values.min(0), values.max(0)


def plot_runs(paths: Sequence[str | Sequence[str]], out: str, title: str | None = None) -> dict[str, int]:
    """Write a PNG of the learning curves of ``paths`` (one curve per path and setting); returns seeds per curve.

    A path may also be a list of directories, drawn as one curve (labelled by their common parent):
    the finished seeds of a table row, say, without the others beside them.

    Raises:
        FileNotFoundError: A path holds no run with readable metrics (the message says which
            loggers write what this command reads).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(11, 4), sharey=True)
    seeds = {}
    for group in paths:
        group = [group] if isinstance(group, str) else list(group)
        path = group[0] if len(group) == 1 else os.path.commonpath(group)
        found = [(run, settings(run)) for member in group for run in find_runs(member)]
        if not (runs := [(curves, setting) for run, setting in found if (curves := read_curves(run))]):
            missing = next((member for member in group if not os.path.exists(member)), None)
            raise FileNotFoundError(
                f"No evaluation curves under '{missing or path}': "
                + ("no such file or directory; check the path." if missing else "plotting reads "
                   "metrics.csv (logger=csv) or TensorBoard events (logger=tensorboard); W&B-only runs are read by "
                   "W&B. Rerun with logger=[wandb,csv] (the CLI: --trainer.logger CSVLogger).")
            )  # fmt: skip
        shared = {k: v for k, v in runs[0][1].items() if all(s.get(k) == v for _, s in runs)}
        differ = sorted({k for _, s in runs for k in s} - set(shared))
        kinds: dict[str, list[dict[str, Curve]]] = {}  # one curve per setting, the seeds of each
        for curves, setting in runs:
            kind = ", ".join(f"{k}={setting.get(k, '-')}" for k in differ)
            kinds.setdefault(kind, []).append(curves)
        for kind, members in kinds.items():
            seeds[f"{path} ({kind})" if kind else path] = len(members)
            label = os.path.basename(os.path.normpath(path)) + (f" {kind}" if kind else "")
            for ax, (key, _) in zip(axes, PANELS, strict=True):
                if not (curves := [r[key] for r in members if key in r]):
                    continue
                steps, mean, low, high = aggregate(curves)
                dot = "o" if len(steps) == 1 else None  # a run evaluated once: a line of one point draws nothing
                line = ax.plot(steps, mean, marker=dot, label=f"{label} ({len(curves)} seed{'s' * (len(curves) > 1)})")
                if len(curves) > 1:
                    ax.fill_between(steps, low, high, color=line[0].get_color(), alpha=0.2, linewidth=0)
    for ax, (_, name) in zip(axes, PANELS, strict=True):
        ax.set_title(name)
        ax.set_xlabel("environment steps")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("evaluation return (mean; band: min-max over seeds)")
    axes[0].legend(loc="lower right", fontsize="small")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return seeds


def main(args: Sequence[str] | None = None) -> None:
    """``rl-lightning plot RUN_DIR [RUN_DIR ...] [--out FILE] [--title TEXT]``."""
    parser = argparse.ArgumentParser(prog="rl-lightning plot", description=__doc__.splitlines()[0])
    parser.add_argument("paths", nargs="+", help="run or sweep directories; each is one curve")
    parser.add_argument("--out", default=None, help="PNG to write (default: <first path>/curves.png)")
    parser.add_argument("--title", default=None)
    ns = parser.parse_args(args)
    out = ns.out or os.path.join(ns.paths[0], "curves.png")
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if os.path.splitext(out)[1][1:].lower() not in ("", *formats):
        parser.error(f"--out {out}: matplotlib writes no such format. End the name with one of {', '.join(formats)}.")
    try:
        seeds = plot_runs(ns.paths, out, ns.title)
    except FileNotFoundError as err:
        parser.exit(2, f"rl-lightning plot: {err}\n")
    print(f"Wrote {out} ({', '.join(f'{p}: {n} run(s)' for p, n in seeds.items())})")
