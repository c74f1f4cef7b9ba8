"""Env faults seen from training: options reach every env group, evaluation sees only whole episodes."""

from __future__ import annotations

import os
import sys

import lightning.pytorch as pl
import pytest
import torch
from hydra import compose, initialize_config_dir

from rl_lightning import ReplayDataModule, RolloutDataModule
from rl_lightning.data.evaluation import evaluate
from rl_lightning.envs import EnvGroup
from rl_lightning.faults import NumericalFault
from rl_lightning.launch.app import build_data
from tests.conftest import ObsValuePolicy
from tests.envs.faulty_env import EPISODE_LEN, FAULTY_ID, faulty_sets
from tests.helpers import as_rows, quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data

ROLLOUT = 2 * 16  # tiny_rollout_data: num_envs x rollout_steps


def faulty_fit(total_timesteps: int, on_nonfinite: str = "stop", data_kwargs=None, **fault):
    """Fit PPO on FaultyEnvs with ``fault`` until ``total_timesteps``; return model, data and trainer."""
    pl.seed_everything(0)
    data = tiny_rollout_data(env_id=FAULTY_ID, obj_sets=faulty_sets(**fault), on_nonfinite=on_nonfinite,
                             **(data_kwargs or {}))  # fmt: skip
    model = tiny_ppo(total_timesteps=total_timesteps)
    trainer = quiet_trainer(max_epochs=20)
    try:
        trainer.fit(model, data)
    finally:
        data.close()
    return model, data, trainer


def test_a_run_whose_envs_fail_to_close_closes_every_group_and_warns():
    """Test that a fit whose env raises in close ends normally: each group's failed close is a warning naming it, and
    every group is closed (the first failure raised, left the others open, and cost a Hydra run its summary)."""
    with pytest.warns(UserWarning, match="close failed") as warned:
        _, data, _ = faulty_fit(ROLLOUT, fault="close")  # closes the data module at its end
    messages = sorted(str(w.message) for w in warned if "Closing" in str(w.message))
    assert messages == [
        f"Closing the {FAULTY_ID} (object set '{s}') failed (RuntimeError: close failed)."
        for s in ("test", "train", "train")
    ]  # fmt: skip (the training envs and the train set's evaluation)
    assert data.env_steps == ROLLOUT and data.train_envs is None and data.eval_envs == {}


def test_ppo_fit_survives_a_flaky_env_and_logs_restarts():
    """Test that PPO trains through an env that raises in every second episode, and logs the restarts."""
    # Every env instance raises at step 3 of its second episode; the recreated one does the same.
    model, data, trainer = faulty_fit(2 * ROLLOUT, fault="step", at=3, fail_every=2)
    metrics = trainer.callback_metrics
    assert data.env_steps == 2 * ROLLOUT  # the budget was reached
    assert metrics["rollout/env_restarts"] > 0 and metrics["rollout/nonfinite_steps"] == 0
    assert metrics["rollout/episode_length"] == EPISODE_LEN  # cut episodes are not in the statistics
    assert metrics["eval/length_mean"] == EPISODE_LEN  # nor in evaluation's
    assert all(torch.isfinite(p).all() for p in model.policy.parameters())


def test_ppo_fit_stops_on_a_nan_reward():
    """Test that a NaN reward with on_nonfinite='stop' (the data module's) makes fit raise NumericalFault naming it."""
    with pytest.raises(NumericalFault, match=r"reward nan from env \d of Faulty-v0"):
        faulty_fit(2 * ROLLOUT, on_nonfinite="stop", fault="nan_reward", at=3)


def test_ppo_fit_skips_nan_rewards_and_counts_them():
    """Test that with on_nonfinite='skip' fit completes, counts the skips and learns finite weights."""
    model, data, trainer = faulty_fit(2 * ROLLOUT, on_nonfinite="skip", fault="nan_reward", at=3, fail_every=2)
    metrics = trainer.callback_metrics
    assert data.env_steps == 2 * ROLLOUT
    assert metrics["rollout/nonfinite_steps"] > 0 and metrics["rollout/episode_length"] == EPISODE_LEN
    assert all(torch.isfinite(p).all() for p in model.policy.parameters())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers inherit the test's registry when forked")
def test_ppo_fit_survives_a_dying_async_worker(tmp_path):
    """Test that a worker process dying mid-rollout is replaced, counted, and leaves no process behind."""
    pl.seed_everything(0)
    sets = faulty_sets(fault="exit", at=3, once_file=str(tmp_path / "once"))
    data = tiny_rollout_data(env_id=FAULTY_ID, obj_sets=sets, vectorization="async", eval_interval=100)
    trainer = quiet_trainer(max_epochs=5)
    trainer.fit(tiny_ppo(total_timesteps=ROLLOUT), data)
    workers = list(data.train_envs.env.envs.processes)
    assert data.env_steps == ROLLOUT and trainer.callback_metrics["rollout/env_restarts"] == 1
    data.close()
    assert not any(p.is_alive() for p in workers)


def test_evaluation_counts_only_whole_episodes(tmp_path):
    """Test that evaluate's episode quota skips episodes cut by a restart or a NaN, unchanged."""
    for fault in ("step", "nan_reward"):
        sets = faulty_sets(fault=fault, at=2, once_file=str(tmp_path / fault))
        envs = EnvGroup(FAULTY_ID, 2, obj_sets=sets, on_nonfinite="skip")
        stats = evaluate(ObsValuePolicy(), envs, episodes=4)
        assert len(stats) == 4 and stats.lengths == [EPISODE_LEN] * 4, fault
        assert sorted(stats.envs) == [0, 0, 1, 1]


@pytest.mark.parametrize("make", [tiny_rollout_data, lambda **kw: tiny_replay_data("Pendulum-v1", **kw)])
def test_data_modules_pass_fault_options_to_every_env_group(make):
    """Test that both data modules give max_env_restarts, obs_bound, obs_bound_mode and on_nonfinite to train and
    eval envs."""
    data = make(max_env_restarts=5, obs_bound=3.0, obs_bound_mode="reject", on_nonfinite="skip")
    data.setup("fit")
    try:
        groups = [data.train_envs, *data.eval_envs.values()]
        assert len(groups) == 3
        for envs in groups:
            assert envs.env.rebuilds.limit == 5 and envs.env.checks.obs_bound == 3.0 and envs.env.checks.reject
            assert envs.env.on_nonfinite == "skip"
        assert data.hparams.max_env_restarts == 5 and data.hparams.obs_bound_mode == "reject"
    finally:
        data.close()


@pytest.mark.parametrize("cls", [RolloutDataModule, ReplayDataModule])
@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_env_restarts": -1}, "max_env_restarts must be a non-negative integer"),
        ({"obs_bound": -2.0}, "obs_bound must be a positive finite number"),
        ({"obs_bound_mode": "squash"}, "obs_bound_mode must be one of"),
        ({"on_nonfinite": "ignore"}, "on_nonfinite must be one of"),
        ({"seed": None}, r"seed must be an integer in \[0, 2\*\*32\), got None"),
        ({"seed": "3"}, "seed must be an integer"),
        ({"seed": 1.5}, "seed must be an integer"),
    ],
)
def test_data_modules_reject_bad_fault_options(cls, kwargs, match):
    """Test that the data modules refuse bad fault options, naming the argument."""
    with pytest.raises(ValueError, match=match):
        cls(env_id="CartPole-v1", **kwargs)


def test_hydra_env_group_sets_the_fault_options(tmp_path):
    """Test that env.max_env_restarts / env.obs_bound / env.obs_bound_mode reach the data module."""
    conf = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "conf")
    overrides = ["+experiment=ppo", "env.max_env_restarts=7", "env.obs_bound=50", "env.obs_bound_mode=reject",
                 "env.on_nonfinite=skip"]  # fmt: skip
    with initialize_config_dir(config_dir=conf, version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, f"run_dir={tmp_path}"])
    hp = build_data(cfg).hparams
    assert (hp.max_env_restarts, hp.obs_bound, hp.obs_bound_mode, hp.on_nonfinite) == (7, 50, "reject", "skip")


def test_replay_does_not_store_the_transitions_of_cut_episodes():
    """Test that a step whose episode a restart cut short (stand-in reward and next obs) never enters the buffer."""
    from rl_lightning.data import DataCounters
    from rl_lightning.data.replay import ReplayDataset, make_replay_buffer

    # FaultyEnv: obs = steps taken in the episode, reward 1; env 0 and 1 raise at step 3 of every second episode.
    envs = EnvGroup(FAULTY_ID, 2, obj_sets=faulty_sets(fault="step", at=3, fail_every=2))
    buffer = make_replay_buffer(1000, 8)
    dataset = ReplayDataset(envs, ObsValuePolicy(), buffer, 40, 10**6, DataCounters(), reset_seed=0)
    try:
        for _ in range(20):
            transitions = dataset.take_step()
            if transitions is not None:
                buffer.extend(as_rows(transitions))
        restarts = envs.pop_stats().env_restarts
    finally:
        envs.close()
    stored = buffer.storage[: len(buffer)]
    assert restarts > 0 and len(buffer) == 40 - restarts  # 20 steps x 2 envs, minus the cut ones
    # Every stored transition is a real one: reward 1, and the next obs counts one step on (or the episode ended).
    assert (stored["reward"] == 1).all()
    ended = stored["terminated"]
    assert torch.equal(stored["next_obs"][~ended], stored["obs"][~ended] + 1)
