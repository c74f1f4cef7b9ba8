"""The learning table: train.py runs at real budgets, side by side with the published figures.

    python -m benchmarks.learning list                                  # the rows and their commands
    python -m benchmarks.learning run [--rows ROW ...] [--seeds 1 2 3] [--jobs 2] [--background]
    python -m benchmarks.learning report                                # docs/learning.md and its curves

Each (row, seed) is one ``train.py`` run directory, ``<dir>/<row>/seed<N>`` (default
``runs/learning``), with ``logger=csv``. ``run`` starts what is missing and resumes what was
cut short: a run whose ``checkpoints/last.ckpt`` exists but that did not finish continues with
``ckpt_path=last`` (the command ``train.py`` prints when a signal stops it), so an interrupted
table goes on where it stopped when the same command is given again. SIGTERM or Ctrl-C on the
runner passes SIGTERM to its runs, which write ``last.ckpt`` and stop. A run that fails is
reported with the tail of its log and left for a look, not retried.

Each run directory gets ``learning.json``: the row, seed, budget and one entry per part (the
command, the commit it ran at, its wall seconds and exit code). ``report`` (also written after
every finished run) reads those, ``summary.json`` and ``metrics.csv`` and writes the table
(final and best deterministic evaluation on the train object set, the final one on the test
set, mean +- std over seeds, env steps, wall time, env-steps/s, the reference) and one curve
per row (``rl-lightning plot``'s figure: train and test sets against env steps, seeds as a band).

Concurrent runs share the machine's cores: ``--jobs 2`` on 2 cores gives each run one thread
(``OMP_NUM_THREADS=1``), which is faster in total than two runs of two threads each.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from rl_lightning.launch.curves import PANELS, plot_runs, read_curves

ROOT = Path(__file__).resolve().parents[1]
RECORD = "learning.json"
#: The paths whose uncommitted changes mark a run's commit ``+dirty``: what ``train.py`` runs.
RUN_PATHS = ("rl_lightning", "conf", "train.py")
RUNNING = "learning.pid"  # the pid of the train.py process running in a run directory, while it runs
SUMMARY = "summary.json"


@dataclasses.dataclass(frozen=True)
class Reference:
    """A published figure to compare a row with.

    Attributes:
        source: Who published it and where (one line).
        mean, std: The figure and its spread (``std`` ``None`` where none is published).
        note: What differs from the row (env version, budget, metric).
    """

    source: str
    mean: float
    std: float | None
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Row:
    """One row of the table: a task, an algorithm's shipped experiment, a budget and seeds.

    Attributes:
        name: The row's directory name under the table's directory.
        task: The env id as the table shows it.
        algorithm: ``PPO``, ``SAC``, ...
        overrides: ``train.py`` overrides that select the experiment and the env.
        budget: Env steps (``algo.total_timesteps``).
        seeds: Seeds run by default.
        reference: The published figure it is compared with.
        metric: ``return`` or ``success`` (the figure the reference gives).
        settings: Where the row's settings come from (one line for the report).
    """

    name: str
    task: str
    algorithm: str
    overrides: tuple[str, ...]
    budget: int
    seeds: tuple[int, ...] = (1, 2, 3)
    reference: Reference | None = None
    metric: str = "return"
    settings: str = ""

    def command(self, seed: int | str, run_dir: str, resume: bool = False) -> list[str]:
        """The ``train.py`` command line of one seed (``resume``: continue from its ``last.ckpt``)."""
        args = [*self.overrides, f"algo.total_timesteps={self.budget}", f"seed={seed}", "logger=csv"]
        args.append(f"hydra.run.dir={run_dir}")
        return ["python", "train.py", *args, *(["ckpt_path=last"] if resume else [])]


_CLEANRL = "CleanRL ppo_continuous_action.py, MuJoCo v4, 1M steps (its docs' benchmark table)"
_ZOO = "RL-Zoo benchmark.md (tuned, one run, v3)"
#: RL-Zoo's SAC runs log a deterministic evaluation (20 episodes) every 10k steps: ``evaluations.npz`` beside each
#: trained agent in DLR-RM/rl-trained-agents (``sac/<env>-v3_1/``, 2021-10-29); the figure is the one at 300k.
_ZOO_300K = "RL-Zoo's SAC run (rl-trained-agents `sac/{env}-v3_1/evaluations.npz`, one run, v3), its evaluation at 300k"
_ZOO_SPREAD = "The spread is over that evaluation's 20 episodes of one run, not over seeds."
_PPO_MUJOCO = (
    "`conf/experiment/ppo_mujoco.yaml`, CleanRL's `ppo_continuous_action.py`: 1 env x 2048 steps, 10 epochs of 32 "
    "minibatches, lr 3e-4 annealed to 0, gamma 0.99, GAE lambda 0.95, clip 0.2 (value loss clipped too), entropy 0, "
    "max grad norm 0.5, observations and rewards normalized; 10 evaluation episodes per set every 51,200 env steps."
)
_SAC_MUJOCO = (
    "`conf/experiment/sac_mujoco.yaml`, CleanRL's `sac_continuous_action.py`: batch 256, actor lr 3e-4, critic lr "
    "1e-3, 5,000 random steps, tau 0.005, 256x256 networks, entropy tuned; RL-Zoo's MuJoCo SAC is Stable-Baselines3's "
    "defaults (lr 3e-4 throughout) with 10,000 random steps."
)
_V5 = "v5 here, v4 there (same bodies and rewards; v5 fixes bugs in contact forces and the healthy check)."

# fmt: off
ROWS: dict[str, Row] = {row.name: row for row in [
    Row("ppo_hopper", "Hopper-v5", "PPO", ("+experiment=ppo_mujoco", "env=hopper"), 1_000_000,
        reference=Reference(_CLEANRL, 2382.86, 271.74, _V5), settings=_PPO_MUJOCO),
    Row("ppo_walker2d", "Walker2d-v5", "PPO", ("+experiment=ppo_mujoco", "env=walker2d"), 1_000_000,
        reference=Reference(_CLEANRL, 2287.95, 571.78, _V5), settings=_PPO_MUJOCO),
    Row("ppo_half_cheetah", "HalfCheetah-v5", "PPO", ("+experiment=ppo_mujoco", "env=half_cheetah"), 1_000_000,
        reference=Reference(_CLEANRL, 1442.64, 46.03, _V5), settings=_PPO_MUJOCO),
    Row("ppo_doorkey", "MiniGrid-DoorKey-5x5-v0", "PPO", ("+experiment=ppo_minigrid",), 100_000,
        reference=Reference(_ZOO.replace(", v3", ""), 0.964, 0.006, "RL-Zoo's figure is the mean episode return "
                            "(1 - 0.9 steps / max steps on success); the table gives return and success rate."),
        metric="success", settings="`conf/experiment/ppo_minigrid.yaml`, the MiniGrid authors' rl-starter-files: "
        "16 envs x 128 steps, 4 epochs of 8 minibatches, lr 1e-3, entropy 0.01, a small CNN over the 7x7 view."),
    Row("sac_half_cheetah", "HalfCheetah-v5", "SAC", ("+experiment=sac_mujoco", "env=half_cheetah"), 300_000,
        reference=Reference(_ZOO_300K.format(env="HalfCheetah"), 7197.1, 46.3, f"{_ZOO_SPREAD} Its evaluations at "
                            "250k-350k read 6,973.8 to 7,694.6; at 1M its benchmark.md gives 9,535.45 +- 100.47."),
        settings=_SAC_MUJOCO),
    Row("sac_hopper", "Hopper-v5", "SAC", ("+experiment=sac_mujoco", "env=hopper"), 300_000,
        reference=Reference(_ZOO_300K.format(env="Hopper"), 1540.4, 669.5, f"{_ZOO_SPREAD} Its evaluations at "
                            "250k-350k swing from 696.7 to 3,290.0; at 1M benchmark.md gives 2,325.55 +- 1,129.68."),
        settings=_SAC_MUJOCO),
    Row("ppo_push_cube", "ManiSkill3 PushCube-v1 (state)", "PPO", ("+experiment=ppo_maniskill",), 1_000_000,
        seeds=(0, 1, 2), metric="success", settings="`conf/experiment/ppo_maniskill.yaml`, ManiSkill's CPU PPO "
        "baseline (`ppo_cpu.py`: 16 envs x 200 steps, 8 epochs of 8 minibatches, gamma 0.8, GAE lambda 0.9, lr 3e-4, "
        "3x256 tanh)."),
    # The CI slice (tests/benchmarks/test_learning.py runs it): a short CartPole run, one seed.
    Row("ci_cartpole", "CartPole-v1", "PPO", ("+experiment=ppo", "env.eval_interval=8"), 8_192, seeds=(0,)),
]}
# fmt: on
TABLE_ROWS = tuple(name for name in ROWS if not name.startswith("ci_"))


def _commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        # Only what a run executes counts (the runner rewrites docs/learning.md itself while runs go on).
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *RUN_PATHS], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
    except OSError:
        return "unknown"
    return out.stdout.strip() + ("+dirty" if dirty else "") if out.returncode == 0 else "unknown"


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclasses.dataclass
class Run:
    """One (row, seed): its directory and what the runner knows of it."""

    row: Row
    seed: int
    path: Path

    @property
    def record(self) -> dict:
        return _read_json(self.path / RECORD) or {"row": self.row.name, "seed": self.seed, "parts": []}

    @property
    def summary(self) -> dict | None:
        return _read_json(self.path / SUMMARY)

    def running_pid(self) -> int | None:
        """The pid of a ``train.py`` still running in this directory (started by another runner), else ``None``."""
        try:
            pid = int((self.path / RUNNING).read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def state(self) -> str:
        """``running`` (by another runner), ``done``, ``resume`` (a ``last.ckpt`` to continue from), ``failed``
        (the last part exited non-zero with nothing to resume), or ``new``."""
        if self.running_pid() is not None:
            return "running"
        record = self.record
        parts = record["parts"]
        if parts and parts[-1]["returncode"] == 0 and record.get("budget") == self.row.budget and self.summary:
            return "done"
        if (self.path / "checkpoints" / "last.ckpt").exists():
            return "resume"
        return "failed" if parts and parts[-1]["returncode"] != 0 else "new"

    def write_record(self, record: dict) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / RECORD).write_text(json.dumps(record, indent=2))


def runs_of(rows: Sequence[str], seeds: Sequence[int] | None, directory: Path) -> list[Run]:
    """The runs of ``rows`` (their default seeds unless ``seeds``), rows in the order given."""
    unknown = [name for name in rows if name not in ROWS]
    if unknown:
        raise SystemExit(f"Unknown row(s) {unknown}; the rows are {sorted(ROWS)} (python -m benchmarks.learning list).")
    return [Run(ROWS[n], s, directory / n / f"seed{s}") for n in rows for s in (seeds or ROWS[n].seeds)]


class Table:
    """Runs the pending runs of a table, ``jobs`` at a time, and writes the report after each."""

    def __init__(self, runs: list[Run], jobs: int, threads: int, directory: Path, out: Path):
        self.pending, self.jobs, self.threads, self.directory, self.out = runs, jobs, threads, directory, out
        self.active: dict[subprocess.Popen, tuple[Run, dict, float]] = {}
        self.failed: list[Run] = []
        self.stopping = False

    def _start(self, run: Run) -> None:
        state = run.state()
        if state == "failed":  # no checkpoint: keep what the failed attempt left, start afresh beside it
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            run.path.rename(run.path.with_name(f"{run.path.name}.failed-{stamp}"))
        elif state == "new" and run.path.exists():
            stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
            run.path.rename(run.path.with_name(f"{run.path.name}.abandoned-{stamp}"))
        resume = state == "resume"
        command = run.row.command(run.seed, str(run.path), resume=resume)
        record = run.record if resume else {"row": run.row.name, "seed": run.seed, "parts": []}
        record["budget"] = run.row.budget
        run.write_record(record)
        env = {**os.environ, "OMP_NUM_THREADS": str(self.threads), "MKL_NUM_THREADS": str(self.threads)}
        log = open(run.path / "stdout.log", "a")  # noqa: SIM115 (closed when the process ends)
        process = subprocess.Popen([sys.executable, *command[1:]], cwd=ROOT, env=env, stdout=log,
                                   stderr=subprocess.STDOUT)  # fmt: skip
        log.close()
        (run.path / RUNNING).write_text(str(process.pid))
        part = {"command": shlex.join(command), "commit": _commit(), "threads": self.threads,
                "started": datetime.datetime.now().isoformat(timespec="seconds")}  # fmt: skip
        self.active[process] = (run, part, time.perf_counter())
        verb = "resume" if resume else "start"
        print(f"[{part['started']}] {verb} {run.row.name} seed {run.seed}: {part['command']}", flush=True)

    def _finish(self, process: subprocess.Popen) -> None:
        run, part, start = self.active.pop(process)
        (run.path / RUNNING).unlink(missing_ok=True)
        part.update(seconds=round(time.perf_counter() - start, 1), returncode=process.returncode)
        record = run.record
        record["parts"].append(part)
        run.write_record(record)
        state = run.state()
        print(f"[{datetime.datetime.now().isoformat(timespec='seconds')}] {run.row.name} seed {run.seed}: {state} "
              f"after {part['seconds']:.0f} s (exit code {process.returncode})", flush=True)  # fmt: skip
        if state != "done" and not self.stopping:
            self.failed.append(run)
            tail = (run.path / "stdout.log").read_text(errors="replace").splitlines()[-15:]
            print("\n".join(f"    {line}" for line in tail), flush=True)
        if state == "done":
            write_report(self.directory, self.out)

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = True
        print(f"Signal {signum}: stopping {len(self.active)} run(s); they write last.ckpt. Give the same command "
              "again to resume the table.", flush=True)  # fmt: skip
        for process in self.active:
            process.send_signal(signal.SIGTERM)

    def run(self) -> int:
        """Run everything pending; returns the exit code (0: every run done)."""
        previous = {s: signal.signal(s, self._stop) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            states = {id(r): r.state() for r in self.pending}
            for run in (r for r in self.pending if states[id(r)] == "running"):
                print(f"{run.row.name} seed {run.seed}: running elsewhere (pid {run.running_pid()}); left to it.")
            queue = [r for r in self.pending if states[id(r)] not in ("done", "running")]
            done = sum(state == "done" for state in states.values())
            print(f"{done} of {len(self.pending)} run(s) done; {len(queue)} to go, "
                  f"{self.jobs} at a time, {self.threads} thread(s) each.", flush=True)  # fmt: skip
            while (queue and not self.stopping) or self.active:
                while queue and not self.stopping and len(self.active) < self.jobs:
                    self._start(queue.pop(0))
                time.sleep(1.0)
                for process in [p for p in self.active if p.poll() is not None]:
                    self._finish(process)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        write_report(self.directory, self.out)
        return 0 if not self.failed and not self.stopping else 1


def _num(value: float, scale: float | None = None) -> str:
    """One figure: three decimals for figures under 10 (success rates, MiniGrid returns), one above."""
    return f"{value:,.3f}" if abs(value if scale is None else scale) < 10 else f"{value:,.1f}"


def _mean_std(values: Sequence[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return _num(values[0])
    mean, std = statistics.fmean(values), statistics.pstdev(values)
    return f"{_num(mean)} ± {_num(std, scale=mean)}"


def row_figures(row: Row, directory: Path) -> dict | None:
    """The finished seeds of ``row`` under ``directory``, reduced to the table's figures (``None``: none finished)."""
    on_disk = runs_of([row.name], sorted(_seeds_on_disk(row, directory)), directory)
    finished = [r for r in on_disk if r.state() == "done"]
    if not finished:
        return None
    summaries = [r.summary for r in finished]
    best = []
    for run in finished:
        curves = read_curves(str(run.path))
        if PANELS[0][0] in curves:
            best.append(float(curves[PANELS[0][0]][1].max()))
    seconds = [sum(p["seconds"] for p in r.record["parts"]) for r in finished]
    commits = sorted({p["commit"] for r in finished for p in r.record["parts"]})

    def column(key: str) -> list[float]:
        return [s[key] for s in summaries if s.get(key) is not None]

    return {
        "seeds": [r.seed for r in finished],
        "train": column("eval_return"), "best": best, "test": column("eval_ood_return"),
        "train_success": column("eval_success_rate"), "test_success": column("eval_ood_success_rate"),
        "env_steps": [s["env_steps"] for s in summaries], "seconds": seconds,
        "steps_per_second": [s["env_steps"] / max(t, 1e-9) for s, t in zip(summaries, seconds, strict=True)],
        "commits": commits,
    }  # fmt: skip


def _seeds_on_disk(row: Row, directory: Path) -> set[int]:
    folder = directory / row.name
    seeds = set()
    if folder.is_dir():
        for child in folder.iterdir():
            if child.is_dir() and child.name.startswith("seed") and child.name[4:].isdigit():
                seeds.add(int(child.name[4:]))
    return seeds


def write_report(directory: Path, out: Path, rows: Sequence[str] | None = None) -> str:
    """Write the table of every row with finished runs under ``directory`` to ``out`` and its curves beside it."""
    curves_dir = out.parent / out.stem
    lines = [
        "# Learning results at real budgets",
        "",
        "Written by `python -m benchmarks.learning report` from the run directories of "
        "`python -m benchmarks.learning run` (see `benchmarks/learning.py`). Deterministic evaluation "
        "(the mean action, or the arg-max); *train* is the training object set (`eval/`), *test* the held-out one "
        "(`eval_ood/`, what it changes is listed below the table); final = after the last update, best = the "
        "highest train-set evaluation during the run; mean ± std over seeds (population std). Wall time and "
        "env-steps/s are per run, including evaluation, with the threads each run had (and whatever else shared "
        "the machine). A commit marked +dirty had uncommitted changes in rl_lightning/, conf/ or train.py when the "
        "run started (until 2026-12-05 23:55 UTC the check counted any tracked file, this report included).",
        "",
        "| task | algorithm | env steps | seeds | train (final) | train (best) | test (final) | reference |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    details, written = [], {}
    for name in rows or ROWS:
        row = ROWS[name]
        figures = row_figures(row, directory)
        if figures is None:
            continue
        train, test = figures["train"], figures["test"]
        if row.metric == "success":
            train = [f"{_mean_std(train)} (success {_mean_std(figures['train_success'])})"]
            test = [f"{_mean_std(test)} (success {_mean_std(figures['test_success'])})"]
        else:
            train, test = [_mean_std(train)], [_mean_std(test)]
        ref = row.reference
        ref_text = "-" if ref is None else f"{ref.mean:,}" + (f" ± {ref.std:,}" if ref.std is not None else "")
        steps = f"{int(statistics.median(figures['env_steps'])):,}"
        lines.append(f"| {row.task} | {row.algorithm} | {steps} | {len(figures['seeds'])} | {train[0]} | "
                     f"{_mean_std(figures['best'])} | {test[0]} | {ref_text} |")  # fmt: skip
        curve = curves_dir / f"{row.name}.png"
        seed_dirs = [str(directory / row.name / f"seed{s}") for s in figures["seeds"]]
        plot_runs([seed_dirs], str(curve), title=f"{row.algorithm} on {row.task}")
        written[row.name] = curve
        command = " ".join(row.command("<seed>", f"runs/learning/{row.name}/seed<seed>")[:-1])
        details += [
            f"### {row.algorithm} on {row.task}",
            "",
            f"- Command (seeds {', '.join(map(str, figures['seeds']))}): `{command} hydra.run.dir=...`; "
            f"the table: `python -m benchmarks.learning run --rows {row.name}`.",
            f"- Commit(s): {', '.join(figures['commits'])}.",
            *([f"- Settings: {row.settings}"] if row.settings else []),
            f"- Wall time per run: {_mean_std([s / 60 for s in figures['seconds']])} min; env-steps/s "
            f"{_mean_std(figures['steps_per_second'])}.",
            "- Per seed, train / test (final): "
            + "; ".join(
                f"seed {s}: {_num(a)} / {_num(b)}"
                for s, a, b in zip(figures["seeds"], figures["train"], figures["test"], strict=False)
            )
            + ".",  # fmt: skip
        ]
        if ref is not None:
            details.append(f"- Reference: {ref.source}. {ref.note}".rstrip())
        details += ["", f"![{row.name}]({curves_dir.name}/{curve.name})", ""]
    pending = []
    for name in rows or TABLE_ROWS:
        row, figures = ROWS[name], row_figures(ROWS[name], directory)
        done = 0 if figures is None else len(figures["seeds"])
        if done < len(row.seeds):
            pending.append(f"{row.algorithm} on {row.task} ({done} of {len(row.seeds)} seeds)")
    if pending:
        lines += ["", f"Not finished yet: {'; '.join(pending)}. `python -m benchmarks.learning run` goes on with them."]
    text = "\n".join(lines + ["", *TEST_SETS, "", *details]).rstrip() + "\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    return text


#: What each row's held-out test set changes (the sets are ``rl_lightning/envs/object_sets.py``'s and the configs').
TEST_SETS = [
    "## What the test sets change",
    "",
    "The train sets vary the physics mildly around the default (every body's mass x0.9, x1.0, x1.1 for the MuJoCo "
    "tasks); the test sets go outside that range, drawing one variation per episode:",
    "",
    "- HalfCheetah-v5: torso twice as heavy; slippery ground (friction 0.4 -> 0.1); every motor at 60 %.",
    "- Hopper-v5: torso 1.5x as heavy; slippery floor and feet (sliding friction 1.0/0.9 -> 0.3); motors at 60 %.",
    "- Walker2d-v5: torso 1.5x as heavy; slippery ground (0.7/0.9 -> 0.3); stiff leg joints (damping 0.1 -> 2.0).",
    "- MiniGrid-DoorKey-5x5-v0: the 6x6 and 8x8 DoorKey layouts (train: 5x5), unseen seeds.",
    "- CartPole-v1: poles of 0.25 and 1.0 (train 0.4-0.6) and a heavy cart.",
    "- ManiSkill3 PushCube-v1: a tight goal (radius 0.05, train 0.09-0.11: success needs the cube twice as close), a "
    "robot starting 0.2 rad off its rest pose per joint (train: noise of std 0.01-0.03), and both; unseen seeds "
    "(`conf/env/maniskill_push_cube.yaml`).",
]


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m benchmarks.learning {list,run,report}``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.learning", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("list", "run", "report"))
    parser.add_argument("--rows", nargs="+", default=list(TABLE_ROWS), help=f"rows (default: {' '.join(TABLE_ROWS)})")
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="seeds (default: each row's, 1 2 3)")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="threads per run (default: cores / jobs)")
    parser.add_argument("--dir", type=Path, default=ROOT / "runs" / "learning", help="the table's run directories")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "learning.md", help="the report (curves beside it)")
    parser.add_argument("--background", action="store_true", help="detach; log to <dir>/table.log")
    ns = parser.parse_args(argv)
    if ns.jobs < 1 or (ns.threads is not None and ns.threads < 1):
        parser.error("--jobs and --threads must be at least 1.")
    runs = runs_of(ns.rows, ns.seeds, ns.dir)
    if ns.action == "list":
        for run in runs:
            command = shlex.join(run.row.command(run.seed, str(run.path)))
            print(f"{run.row.name} seed {run.seed} [{run.state()}]: {command}")
        return 0
    if ns.action == "report":
        print(write_report(ns.dir, ns.out))
        return 0
    if ns.background:
        ns.dir.mkdir(parents=True, exist_ok=True)
        args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--background"]
        with open(ns.dir / "table.log", "a") as log:
            child = subprocess.Popen([sys.executable, "-m", "benchmarks.learning", *args], cwd=ROOT, stdout=log,
                                     stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        print(f"Running in the background (pid {child.pid}); log: {ns.dir / 'table.log'}. Stop it with "
              f"`kill {child.pid}` (the runs write last.ckpt); the same command resumes the table.")  # fmt: skip
        return 0
    threads = ns.threads or max(1, (os.cpu_count() or 1) // ns.jobs)
    return Table(runs, ns.jobs, threads, ns.dir, ns.out).run()


if __name__ == "__main__":
    sys.exit(main())
