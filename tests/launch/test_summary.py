"""Tests for the run summary."""

import json

from rl_lightning.launch.summary import RunSummary


def _summary(metrics, tmp_path):
    return RunSummary.from_metrics(
        metrics, env_steps=1024, wall_seconds=2.0, env_steps_per_second=512.0, checkpoint=None, run_dir=str(tmp_path)
    )


def test_the_summary_states_success_rates_where_the_env_reports_success(tmp_path):
    """Test that success rates of both sets are printed and saved when the evaluation measured them."""
    summary = _summary(
        {"eval/return_mean": 0.9, "eval_ood/return_mean": 0.4, "eval/success_rate": 1.0, "eval_ood/success_rate": 0.5},
        tmp_path,
    )
    text = str(summary)
    assert "eval/success_rate (train set)     1.00" in text
    assert "eval_ood/success_rate (test set)  0.50" in text
    with open(summary.write()) as f:
        saved = json.load(f)
    assert saved["eval_success_rate"] == 1.0 and saved["eval_ood_success_rate"] == 0.5


def test_the_summary_has_no_success_rows_where_the_env_reports_none(tmp_path):
    """Test that an env without success information gets no success rows (not a zero)."""
    text = str(_summary({"eval/return_mean": 500.0, "eval_ood/return_mean": 300.0}, tmp_path))
    assert "success" not in text and "eval/return_mean (train set)" in text
