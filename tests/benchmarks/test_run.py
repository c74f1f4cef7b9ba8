"""Tests for the benchmark runner's bookkeeping (the figures themselves come from running it)."""

import json
import os

import pytest
import torch

from benchmarks import run


def test_summary_and_table_report_medians_ranges_and_ratios():
    """Test that medians, ranges and the ratio to each baseline are computed from the runs."""
    results = {
        "ours": [{"sps": 300.0}, {"sps": 100.0}, {"sps": 200.0}],
        "theirs": [{"sps": 100.0}, {"sps": 50.0}, {"sps": 150.0}],
    }
    summary = run.summarize(results, "sps")
    assert summary["ours"] == {"median": 200.0, "min": 100.0, "max": 300.0, "n": 3}
    text = run.table("PPO", summary, "env-steps/s", ["theirs"])
    assert "| ours | 200 | 100-300 | 2.00x |" in text
    assert "| theirs | 100 | 50-150 | 1.00x |" in text


def test_paired_ratios_are_taken_repeat_by_repeat():
    """Test that the paired line divides each repeat's runs and reports the median of those ratios."""
    results = {
        "ours": [{"sps": 300.0}, {"sps": 100.0}, {"sps": 200.0}],
        "theirs": [{"sps": 100.0}, {"sps": 50.0}, {"sps": 160.0}],
    }
    line = run.paired(results, "sps", "ours", "theirs")
    assert line == "Per repeat, ours / theirs: 3.00, 2.00, 1.25; median 2.00x."
    # The ratio of the medians (200 / 100) is not what the line reports when they differ:
    results["theirs"][1]["sps"] = 25.0
    assert run.paired(results, "sps", "ours", "theirs").endswith("median 3.00x.")


def test_alternate_runs_contenders_in_turn_with_the_repeat_as_seed():
    """Test that repeats alternate the contenders (a, b, a, b) and pass the repeat index as the seed."""
    calls = []
    run.alternate(
        {"a": lambda seed: calls.append(("a", seed)) or {}, "b": lambda seed: calls.append(("b", seed)) or {}}, 2
    )
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1)]


@pytest.fixture
def restore_threads(monkeypatch):
    """The runner sets one thread for the process: give the rest of the suite its setting back."""
    threads = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS", ""))
    yield
    torch.set_num_threads(threads)


def test_ceiling_suite_writes_json_and_markdown(tmp_path, restore_threads):
    """Test that a run writes results.json (machine, thread count, figures) and the markdown table."""
    report = run.main(["--quick", "--suites", "ceiling", "--repeats", "1", "--out", str(tmp_path)])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["machine"]["torch_threads"] == 1 and saved["machine"]["versions"]["torch"]
    rates = saved["ceiling"]["env_steps_per_second"]
    assert set(rates) == {"gymnasium SyncVectorEnv", "rl_lightning EnvGroup"}
    assert all(r["median"] > 1000 for r in rates.values())
    markdown = (tmp_path / "results.md").read_text()
    assert "| gymnasium SyncVectorEnv |" in markdown and "cores" in markdown
    assert report["suite_seconds"]["ceiling"] > 0


def test_unknown_suite_is_refused_with_the_choices(capsys):
    """Test that an unknown suite name stops the runner with the list of suites."""
    with pytest.raises(SystemExit):
        run.main(["--suites", "ppo,speed"])
    assert "unknown suite(s) ['speed']" in capsys.readouterr().err


def test_compile_reaches_our_contender_only_and_is_recorded(tmp_path, monkeypatch, restore_threads):
    """Test that --compile runs our PPO with compile=True, leaves the other contenders as they are, and is recorded."""
    calls = {}

    def contender(name):
        def run_once(steps, seed, **extra):
            calls[name] = extra
            return {"env_steps_per_second": 1.0}

        return run_once

    for name in ("ppo_ours", "ppo_sb3", "ppo_plain"):
        monkeypatch.setattr(run.throughput, name, contender(name))
    report = run.main(["--quick", "--suites", "ppo", "--repeats", "1", "--compile", "--out", str(tmp_path)])
    assert calls == {"ppo_ours": {"compile": True}, "ppo_sb3": {}, "ppo_plain": {}}
    assert report["compile"] is True and "compile=True" in (tmp_path / "results.md").read_text()
