"""The learning table's CI slice: one short CartPole row, run, resumed at a larger budget, reported."""

from __future__ import annotations

import csv
import dataclasses
import json
import os

import pytest

from benchmarks import learning


def _metric_steps(run_dir, key="eval/return_mean"):
    with open(run_dir / "metrics.csv", newline="") as f:
        return [float(r["time/env_steps"]) for r in csv.DictReader(f) if r.get(key)]


def test_table_runs_resumes_at_a_larger_budget_and_reports(tmp_path, monkeypatch, capsys):
    """Test that a row runs through train.py, a larger budget resumes it from last.ckpt with its history, and the
    report holds its figures and curve; a finished table starts nothing."""
    row = dataclasses.replace(learning.ROWS["ci_cartpole"], budget=1024, overrides=("+experiment=ppo",
                              "env.eval_interval=2", "env.eval_episodes=2"))  # fmt: skip
    monkeypatch.setitem(learning.ROWS, "ci_cartpole", row)
    args = ["run", "--rows", "ci_cartpole", "--dir", str(tmp_path / "runs"), "--out", str(tmp_path / "learning.md")]
    assert learning.main(args) == 0
    run_dir = tmp_path / "runs" / "ci_cartpole" / "seed0"
    first = json.loads((run_dir / "learning.json").read_text())
    assert [p["returncode"] for p in first["parts"]] == [0]
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 1024

    monkeypatch.setitem(learning.ROWS, "ci_cartpole", dataclasses.replace(row, budget=2048))
    run = learning.runs_of(["ci_cartpole"], None, tmp_path / "runs")[0]
    assert run.state() == "resume"
    assert learning.main(args) == 0
    record = json.loads((run_dir / "learning.json").read_text())
    assert [p["returncode"] for p in record["parts"]] == [0, 0]
    assert record["parts"][1]["command"].endswith("ckpt_path=last")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["env_steps"], summary["resumed_from_env_steps"]) == (2048, 1024)
    steps = _metric_steps(run_dir)
    assert min(steps) <= 1024 < max(steps)  # the first part's evaluations kept in the resumed run's metrics.csv

    report = (tmp_path / "learning.md").read_text()
    (line,) = [line for line in report.splitlines() if line.startswith("| CartPole-v1 | PPO |")]
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[2:4] == ["2,048", "1"]
    assert float(cells[4]) == pytest.approx(summary["eval_return"], abs=0.06)
    assert float(cells[6]) == pytest.approx(summary["eval_ood_return"], abs=0.06)
    assert (tmp_path / "learning" / "ci_cartpole.png").stat().st_size > 10_000

    capsys.readouterr()
    assert learning.main(args) == 0
    assert "1 of 1 run(s) done; 0 to go" in capsys.readouterr().out
    assert len(json.loads((run_dir / "learning.json").read_text())["parts"]) == 2


def test_failed_run_is_reported_and_kept_aside(tmp_path, monkeypatch, capsys):
    """Test that a run that fails returns a non-zero code with its log's tail, and the next attempt keeps its
    directory beside the new one."""
    row = dataclasses.replace(learning.ROWS["ci_cartpole"], overrides=("+experiment=ppo", "algo.lrr=0.1"))
    monkeypatch.setitem(learning.ROWS, "ci_cartpole", row)
    args = ["run", "--rows", "ci_cartpole", "--dir", str(tmp_path), "--out", str(tmp_path / "learning.md")]
    assert learning.main(args) == 1
    out = capsys.readouterr().out
    assert "ci_cartpole seed 0: failed" in out and "lrr" in out
    assert learning.runs_of(["ci_cartpole"], None, tmp_path)[0].state() == "failed"
    assert "CartPole" not in (tmp_path / "learning.md").read_text().split("## What")[0]
    learning.main(args)
    assert len(list((tmp_path / "ci_cartpole").glob("seed0.failed-*"))) == 1


def test_unknown_row_names_the_rows():
    """Test that an unknown row is refused with the list of rows."""
    with pytest.raises(SystemExit, match="ppo_hopper"):
        learning.main(["list", "--rows", "ppo_hoper"])


def test_a_run_another_runner_is_running_is_left_to_it(tmp_path, capsys):
    """Test that a run directory whose train.py is alive (its pid file) is neither started nor resumed again."""
    run_dir = tmp_path / "ci_cartpole" / "seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "learning.pid").write_text(str(os.getpid()))
    args = ["run", "--rows", "ci_cartpole", "--dir", str(tmp_path), "--out", str(tmp_path / "learning.md")]
    assert learning.main(args) == 0
    assert f"running elsewhere (pid {os.getpid()})" in capsys.readouterr().out
    assert not (run_dir / "learning.json").exists()
