"""Learning tests: DQN reaches the off-policy issue's threshold on CartPole-v1 (slow; not in CI), and learns a Dict
image task (slow; in CI).

The CartPole test takes about 2 minutes on a 2-core CPU machine: run with ``pytest -m slow``. It runs the ``dqn``
experiment as ``train.py`` does (``launch.app.train``): the final test evaluates
``best.ckpt``, chosen by the train set's evaluations, on episodes other than those.
"""

import os

import pytest
from hydra import compose, initialize_config_dir

from rl_lightning.launch.app import train
from tests.helpers import succeeded

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")


@pytest.mark.slow
def test_dqn_reaches_475_on_cartpole_within_100k_steps(tmp_path):
    """Test that experiment=dqn (seed 0) finds a policy with a deterministic train-set return >= 475 in 100k steps."""
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        overrides = ["+experiment=dqn", "seed=0", f"run_dir={tmp_path}", "logger=csv", "callbacks=none"]
        cfg = compose("config", overrides=overrides)
    summary = train(cfg)
    assert summary.env_steps == cfg.algo.total_timesteps <= 100_000
    assert summary.tested_checkpoint == os.path.join(str(tmp_path), "checkpoints", "best.ckpt")
    assert summary.eval_return >= 475, summary
    assert summary.eval_ood_return is not None


def _pixel_goal(encoder: dict) -> dict[str, float]:
    """DQN on the tests' Dict task (a 5x5 goal image and a position vector) for 20,000 env steps."""
    import lightning.pytorch as pl

    from rl_lightning import DQN, ReplayDataModule
    from tests.helpers import PIXEL_GOAL, fit_and_test

    pl.seed_everything(0)
    model = DQN(
        lr=5e-4, gamma=0.95, total_timesteps=20_000, encoder=encoder, hidden_sizes=[64], target_update_interval=250,
        exploration_fraction=0.3, exploration_final_eps=0.02,
    )  # fmt: skip
    data = ReplayDataModule(
        **PIXEL_GOAL, num_envs=4, steps_per_epoch=1000, learning_starts=1000,
        utd_ratio=0.25, batch_size=64, buffer_size=20_000, optimize_memory_usage=True, seed=0, eval_interval=5,
        eval_episodes=20,
    )  # fmt: skip
    return fit_and_test(model, data)


# Out of the CI selection: it passes on a knife's edge (train-set success 0.95 with torch's default 2 threads, 0.90
# with OMP_NUM_THREADS=1, against the 19-of-20 it asks), and takes 35-60 s. `pytest -m slow` runs it.
@pytest.mark.slow
def test_dqn_learns_a_dict_task_through_the_cnn_within_20k_steps():
    """Test that DQN with a CNN on the image key (the compact replay buffer) solves PixelGoal (success >= 0.95 on
    both sets), and that without the image it cannot (so the image, through the CNN, is what it learned from)."""
    cnn = {"cnn_channels": [16, 32], "cnn_kernels": [2, 2], "cnn_strides": [1, 1], "cnn_features": 64}
    metrics = _pixel_goal(cnn)
    # 20 evaluation episodes per object set: at least 19 succeeded.
    assert succeeded(metrics["eval/success_rate"], 20) >= 19, metrics
    assert succeeded(metrics["eval_ood/success_rate"], 20) >= 19, metrics
    blind = _pixel_goal({"mlp_keys": ["position"]})
    assert blind["eval/success_rate"] < 0.8, blind
