"""Learning test: DQN reaches the off-policy issue's threshold on CartPole-v1 (slow; not in CI).

About 6 minutes on a 2-core CPU machine: run with ``pytest -m slow``.
"""

import os

import lightning.pytorch as pl
import pytest
from hydra import compose, initialize_config_dir

from rl_lightning.launch.app import build_data, build_model

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")


@pytest.mark.slow
def test_dqn_reaches_475_on_cartpole_within_100k_steps(tmp_path):
    """Test that experiment=dqn (seed 0) ends with a deterministic train-set return >= 475 after 100k steps."""
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        cfg = compose("config", overrides=["+experiment=dqn", "seed=0", f"run_dir={tmp_path}"])
    pl.seed_everything(0)
    data, model = build_data(cfg), build_model(cfg, save_interval=None)
    trainer = pl.Trainer(
        max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(model, data)
    assert data.env_steps == cfg.algo.total_timesteps == 100_000
    metrics = {k: float(v) for r in trainer.test(model, data, verbose=False) for k, v in r.items()}
    assert metrics["eval/return_mean"] >= 475, metrics
    assert "eval_ood/return_mean" in metrics
