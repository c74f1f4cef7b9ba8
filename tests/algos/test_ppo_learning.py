"""Learning tests: PPO reaches the issue's thresholds within its budgets (slow).

They train the shipped experiments (``conf/experiment/ppo*.yaml``, what ``python train.py
+experiment=...`` runs) through the Python API. ``pytest -m slow`` runs them all; the
default run (and CI) keeps the ones marked ``ci``. Each checks the final deterministic
evaluation of ``trainer.test`` on the ``train`` object set, and that the held-out
``test`` set was evaluated too.
"""

import os

import lightning.pytorch as pl
import pytest
from hydra import compose, initialize_config_dir

from rl_lightning.launch.app import build_data, build_model

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")


def _train_and_test(experiment: str, seed: int, tmp_path) -> dict[str, float]:
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={experiment}", f"seed={seed}", f"run_dir={tmp_path}"])
    pl.seed_everything(seed)
    data, model = build_data(cfg), build_model(cfg, save_interval=None)
    trainer = pl.Trainer(
        max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(model, data)
    assert data.env_steps <= cfg.algo.total_timesteps + data.steps_per_epoch
    return {k: float(v) for r in trainer.test(model, data, verbose=False) for k, v in r.items()}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [pytest.param(0, marks=[pytest.mark.ci, pytest.mark.plain]), 1, 2])
def test_ppo_solves_cartpole_within_150k_steps(seed, tmp_path):
    """Test that experiment=ppo reaches a deterministic train-set return >= 475 on CartPole within 150k steps."""
    metrics = _train_and_test("ppo", seed, tmp_path)
    assert metrics["eval/return_mean"] >= 475, metrics
    assert "eval_ood/return_mean" in metrics


@pytest.mark.slow
@pytest.mark.ci
def test_ppo_solves_inverted_pendulum_within_200k_steps(tmp_path):
    """Test that experiment=ppo_continuous reaches an eval return >= 900 on InvertedPendulum within 200k steps."""
    metrics = _train_and_test("ppo_continuous", 0, tmp_path)
    assert metrics["eval/return_mean"] >= 900, metrics
    assert "eval_ood/return_mean" in metrics
