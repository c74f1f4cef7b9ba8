"""Learning test: DQN reaches the off-policy issue's threshold on CartPole-v1 (slow; not in CI).

About 7 minutes on a 2-core CPU machine: run with ``pytest -m slow``. It runs the ``dqn``
experiment as ``train.py`` does (``launch.app.train``): the final test evaluates
``best.ckpt``, chosen by the train set's evaluations, on episodes other than those.
"""

import os

import pytest
from hydra import compose, initialize_config_dir

from rl_lightning.launch.app import train

CONF = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")


@pytest.mark.slow
def test_dqn_reaches_475_on_cartpole_within_100k_steps(tmp_path):
    """Test that experiment=dqn (seed 0) finds a policy with a deterministic train-set return >= 475 in 100k steps."""
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        overrides = ["+experiment=dqn", "seed=0", f"run_dir={tmp_path}", "logger=csv", "callbacks=none"]
        cfg = compose("config", overrides=overrides)
    summary = train(cfg)
    assert summary.env_steps == cfg.algo.total_timesteps == 100_000
    assert summary.tested_checkpoint == os.path.join(str(tmp_path), "checkpoints", "best.ckpt")
    assert summary.eval_return >= 475, summary
    assert summary.eval_ood_return is not None
