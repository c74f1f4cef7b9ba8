"""Learning tests: PPO reaches the issue's thresholds within its budgets (slow).

``pytest -m slow`` runs them all; the default run (and CI) keeps the ones marked ``ci``.
Each checks the final deterministic evaluation of ``trainer.test`` on the ``train``
object set, and that the held-out ``test`` set was evaluated too.
"""

import lightning.pytorch as pl
import pytest

from rl_lightning import PPO, RolloutDataModule
from rl_lightning.presets import PPO_PRESETS


def _train_and_test(preset: str, seed: int) -> dict[str, float]:
    settings = PPO_PRESETS[preset]
    pl.seed_everything(seed)
    data = RolloutDataModule(seed=seed, **settings["data"])
    model = PPO(**settings["model"])
    trainer = pl.Trainer(
        max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False
    )
    trainer.fit(model, data)
    assert data.env_steps <= settings["model"]["total_timesteps"] + data.steps_per_epoch
    return {k: float(v) for r in trainer.test(model, data, verbose=False) for k, v in r.items()}


@pytest.mark.slow
@pytest.mark.parametrize("seed", [pytest.param(0, marks=pytest.mark.ci), 1, 2])
def test_ppo_solves_cartpole_within_150k_steps(seed):
    """Test that PPO reaches a deterministic train-set return >= 475 on CartPole within 150k steps."""
    metrics = _train_and_test("cartpole", seed)
    assert metrics["eval/return_mean"] >= 475, metrics
    assert "eval_ood/return_mean" in metrics


@pytest.mark.slow
@pytest.mark.ci
def test_ppo_solves_inverted_pendulum_within_200k_steps():
    """Test that PPO reaches a deterministic train-set return >= 900 on InvertedPendulum within 200k steps."""
    metrics = _train_and_test("inverted_pendulum", 0)
    assert metrics["eval/return_mean"] >= 900, metrics
    assert "eval_ood/return_mean" in metrics
