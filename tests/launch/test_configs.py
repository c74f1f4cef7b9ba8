"""``conf/``: every experiment and group option composes, and config keys match constructors."""

from __future__ import annotations

import inspect
import os

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rl_lightning import DQN, PPO, SAC, ReplayDataModule, RolloutDataModule
from rl_lightning.callbacks import ActorSync
from rl_lightning.launch import app
from rl_lightning.launch.app import (
    build_callbacks,
    build_data,
    build_loggers,
    build_model,
    build_trainer,
)
from tests.launch.conftest import REPO

CONF = os.path.join(REPO, "conf")
ALGOS = {"dqn": DQN, "ppo": PPO, "sac": SAC}
DATA = {"rollout": RolloutDataModule, "replay": ReplayDataModule}


def _options(group: str) -> list[str]:
    return sorted(f[:-5] for f in os.listdir(os.path.join(CONF, group)) if f.endswith(".yaml"))


def _compose(overrides: list[str], run_dir: str):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[*overrides, f"run_dir={run_dir}"])


def _params(cls) -> set[str]:
    """The constructor's arguments, less deprecated ones a class keeps out of its settings (``unsaved_args``)."""
    return set(inspect.signature(cls.__init__).parameters) - {"self", *getattr(cls, "unsaved_args", ())}


@pytest.mark.parametrize("algo", _options("algo"))
def test_algo_config_keys_equal_constructor_arguments(algo):
    """Test that algo/<name>.yaml (with the groups it composes, such as algo/encoder) has one key per
    constructor argument of its class, and no other."""
    cfg = _compose([f"algo={algo}"], "unused").algo
    assert set(cfg) - {"_target_"} == _params(ALGOS[algo])


def test_every_encoder_setting_is_in_the_encoder_group():
    """Test that conf/algo/encoder/default.yaml names every EncoderSettings field (all null: the defaults)."""
    import dataclasses

    from rl_lightning.nets.encoders import EncoderSettings

    cfg = OmegaConf.load(os.path.join(CONF, "algo", "encoder", "default.yaml"))
    assert set(cfg) == {field.name for field in dataclasses.fields(EncoderSettings)}
    assert all(value is None for value in cfg.values())
    assert _compose(["+experiment=ppo", "algo.encoder.cnn_keys=[rgb]"], "unused").algo.encoder.cnn_keys == ["rgb"]


@pytest.mark.parametrize("data", _options("data"))
@pytest.mark.parametrize("env", _options("env"))
def test_data_and_env_config_keys_cover_the_data_module_arguments(data, env):
    """Test that data/<name>.yaml + env/<name>.yaml (with the options it builds on, such as hopper on half_cheetah)
    + the top-level seed give each data module argument once."""
    data_keys = set(OmegaConf.load(os.path.join(CONF, "data", f"{data}.yaml"))) - {"_target_"}
    env_keys = set(_compose([f"env={env}"], "unused").env)
    assert not data_keys & env_keys
    assert data_keys | env_keys | {"seed"} == _params(DATA[data])


GROUP_OPTIONS = [
    [f"{group}={option}"]
    for group in ("algo", "data", "env", "trainer", "logger", "callbacks")
    for option in _options(group)
]
EXPERIMENTS = [[f"+experiment={option}"] for option in _options("experiment")]


@pytest.mark.parametrize("overrides", GROUP_OPTIONS + EXPERIMENTS + [["logger=[wandb,tensorboard,csv]"]], ids=str)
def test_every_group_option_and_experiment_composes_and_builds(overrides, tmp_path, monkeypatch):
    """Test that each option of each group, and each experiment, composes and builds its objects."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    cfg = _compose(overrides, str(tmp_path))
    model, data = build_model(cfg), build_data(cfg)
    assert isinstance(model, pl.LightningModule) and isinstance(data, pl.LightningDataModule)
    assert data.hparams.env_id == cfg.env.env_id and data.hparams.seed == cfg.seed
    loggers, callbacks = build_loggers(cfg), build_callbacks(cfg)
    assert len(loggers) == len(cfg.logger) and len(callbacks) == len(cfg.callbacks)
    if cfg.trainer.get("accelerator") == "gpu" and not pl.accelerators.CUDAAccelerator.is_available():
        return  # the gpu trainer builds only where there is a GPU; the config itself composed
    trainer = build_trainer(cfg, loggers, callbacks)
    assert trainer.max_epochs == cfg.trainer.max_epochs and trainer.default_root_dir == str(tmp_path)


def test_experiments_match_their_measured_settings(tmp_path):
    """Test that the experiments carry the settings docs/algos/ppo.md and dqn.md report figures for."""
    cartpole = _compose(["+experiment=ppo"], str(tmp_path))
    assert (cartpole.env.env_id, cartpole.env.num_envs, cartpole.data.rollout_steps) == ("CartPole-v1", 8, 32)
    assert cartpole.algo.total_timesteps == 150_000 and cartpole.algo.lr == 1e-3
    mujoco = _compose(["+experiment=ppo_continuous"], str(tmp_path))
    assert (mujoco.env.env_id, mujoco.data.rollout_steps, mujoco.algo.num_minibatches) == (
        "InvertedPendulum-v5",
        2048,
        32,
    )
    assert (cartpole.algo.gamma, cartpole.algo.gae_lambda, cartpole.algo.update_epochs) == (0.98, 0.8, 20)
    assert mujoco.algo.total_timesteps == 200_000
    # docs/algos/dqn.md: RL-Zoo's CartPole DQN, its update schedule included, in whole chunks within 100k steps.
    dqn = _compose(["+experiment=dqn"], str(tmp_path))
    assert (dqn.data.train_freq, dqn.data.gradient_steps, dqn.algo.target_update_interval) == (256, 128, 128)
    assert (dqn.algo.lr, dqn.data.batch_size, dqn.data.learning_starts, dqn.env.num_envs) == (2.3e-3, 64, 1000, 1)
    assert dqn.algo.total_timesteps <= 100_000 and dqn.algo.total_timesteps % dqn.data.steps_per_epoch == 0
    assert dqn.data.steps_per_epoch % dqn.data.train_freq == 0


def test_debug_makes_the_acting_copy_check_every_sync(tmp_path, monkeypatch):
    """Test that debug=true turns on the fingerprint check of callbacks=split_actor's ActorSync."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    for debug, expected in (("false", False), ("true", True)):
        cfg = _compose(["callbacks=split_actor", f"debug={debug}"], str(tmp_path))
        (actor_sync,) = [c for c in build_callbacks(cfg) if isinstance(c, ActorSync)]
        assert actor_sync.verify is expected and actor_sync.device == "cpu"


def test_the_no_object_sets_warning_speaks_hydra_in_train_py(tmp_path):
    """Test that an env with no shipped object sets, built from the Hydra config, is told how to pass them
    there (env.obj_sets=...), not as the Python keyword."""
    import warnings

    cfg = _compose(["+experiment=ppo", "env.env_id=Acrobot-v1"], str(tmp_path))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        build_data(cfg)
    (advice,) = [str(w.message) for w in caught if "No object sets are shipped for 'Acrobot-v1'" in str(w.message)]
    assert "Pass env.obj_sets='{train: [...], test: [...]}'" in advice and "obj_sets={" not in advice


def test_ones_own_encoder_plugs_in_by_target():
    """Test that algo.encoder with a _target_ (and _partial_: true) is built with the observation space."""
    import gymnasium as gym
    import numpy as np

    overrides = [
        "+experiment=ppo",
        "~algo.encoder",
        "+algo.encoder._target_=rl_lightning.nets.encoders.MultiInputEncoder",
        "+algo.encoder._partial_=true",
        "+algo.encoder.normalize_obs=false",
        "+algo.encoder.settings={cnn_kernels: [2], cnn_strides: [1], cnn_channels: [4]}",
    ]
    model = build_model(_compose(overrides, "unused"))
    assert "encoder" not in model.hparams
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (5, 5, 1), np.uint8), "v": gym.spaces.Box(-1, 1, (2,))})
    policy = model.build_policy(space, gym.spaces.Discrete(2))
    assert policy.encoder.normalizer is None and policy.encoder.cnns[0].net[0].kernel_size == (2, 2)


def _fit_experiment(overrides: list[str], tmp_path):
    """Compose ``overrides``, build the experiment's model and data as train.py does, and fit to the budget."""
    cfg = _compose(overrides, str(tmp_path))
    pl.seed_everything(0)
    model, data = build_model(cfg, save_interval=None), build_data(cfg)
    trainer = pl.Trainer(max_epochs=-1, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path))  # fmt: skip
    trainer.fit(model, data)
    return model, data, trainer


def test_the_atari_experiment_trains_evaluates_and_checkpoints_end_to_end(tmp_path):
    """Test that +experiment=ppo_atari (ale-py Breakout, the CleanRL wrapper stack, uint8 frame stacks through the
    Nature CNN) fits, evaluates both object sets on the game's own score and keeps its wrappers in the checkpoint."""
    overrides = [
        "+experiment=ppo_atari",
        "algo.total_timesteps=256",
        "env.num_envs=2",
        "data.rollout_steps=64",
        "env.vectorization=sync",
        "env.eval_interval=2",
        "env.eval_episodes=1",
        "env.eval_max_episode_steps=50",
    ]
    model, data, trainer = _fit_experiment(overrides, tmp_path)
    assert data.env_steps == 256
    observation_space = data.env_spaces()[0]
    assert observation_space.shape == (4, 84, 84) and observation_space.dtype == np.uint8
    assert model.policy.encoder.images[0].channels_first
    results = {k: v for r in trainer.test(model, data, verbose=False) for k, v in r.items()}
    assert "eval/return_mean" in results and "eval_ood/return_mean" in results
    assert [w if isinstance(w, str) else w["wrapper"] for w in data.hparams.wrappers][-1].endswith(
        "FrameStackObservation"
    )


def test_the_atari_dqn_experiment_trains_on_uint8_frames_in_a_compact_buffer(tmp_path):
    """Test that +experiment=dqn_atari (RL-Zoo's Atari settings) learns from the Nature CNN over uint8 frame stacks
    stored once each (optimize_memory_usage), and reports a 100k buffer well under 4 GB."""
    overrides = [
        "+experiment=dqn_atari",
        "algo.total_timesteps=300",
        "data.steps_per_epoch=100",
        "data.learning_starts=100",
        "data.buffer_size=1000",
        "env.eval_interval=3",
        "env.eval_episodes=1",
        "env.eval_max_episode_steps=30",
    ]
    model, data, trainer = _fit_experiment(overrides, tmp_path)
    assert data.env_steps == 300 and trainer.global_step == 200 // 4  # after the chunks ending at 104, ..., 300
    storage = data.buffer.storage[:300]
    assert storage["obs"].dtype == torch.uint8 and storage["obs"].shape[1:] == (4, 84, 84)
    assert "next_obs" not in storage.keys()
    assert [type(m).__name__ for m in model.policy.net] == ["Linear"]
    full_buffer = 100_000 * data.transition_bytes
    assert 2.8e9 < full_buffer < 2.9e9  # frames once: 4 x 84 x 84 bytes + 14 per transition
    results = {k: v for r in trainer.test(model, data, verbose=False) for k, v in r.items()}
    assert "eval/return_mean" in results and "eval_ood/return_mean" in results


@pytest.mark.parametrize("env", sorted(f.removesuffix(".yaml") for f in os.listdir(os.path.join(CONF, "env"))))
def test_the_held_out_variations_of_every_env_config_are_named(env):
    """Test that every variation of an env config's evaluation-only sets has a name: play's table and the evaluation
    logs report variations by name (MiniGrid's 6x6 and 8x8 read 'unnamed')."""
    obj_sets = OmegaConf.load(os.path.join(CONF, "env", f"{env}.yaml")).get("obj_sets") or {}
    unnamed = [
        dict(v) for name, variations in obj_sets.items() if name != "train" for v in variations if not v.get("name")
    ]
    assert not unnamed


@pytest.mark.parametrize(
    ("overrides", "algo"),
    [(["+experiment=sac"], SAC), (["+experiment=sac", "data.utd_ratio=0.25"], SAC), (["+experiment=dqn"], DQN)],
)
def test_the_debug_warm_up_makes_a_gradient_step(overrides, algo, tmp_path, monkeypatch):
    """Test that ``debug=true``'s warm-up of an off-policy run takes a gradient step, as it says: SAC's chunk of one
    env step never stored its batch of 8, so the update path went unchecked until ``learning_starts``."""
    losses, loss = [], algo.loss
    monkeypatch.setattr(algo, "loss", lambda self, *args: losses.append(1) or loss(self, *args))
    app.warm_up(_compose([*overrides, "algo.hidden_sizes=[16,16]", "env.eval_max_episode_steps=20"], str(tmp_path)))
    assert len(losses) == 1
