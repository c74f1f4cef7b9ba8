"""Config errors: composition mistakes and build mistakes become one paragraph naming the key and fix."""

from __future__ import annotations

import os

import pytest
from hydra import compose, initialize_config_dir

from rl_lightning.launch.app import build_model
from rl_lightning.launch.errors import ConfigError, check_overrides, explain_build_error
from tests.launch.conftest import REPO

CONF = os.path.join(REPO, "conf")


def test_sweeps_are_checked_by_their_first_value():
    """Test that a sweep override composes (checked once) and that a typo'd swept key is still caught."""
    check_overrides(CONF, "config", ["seed=1,2,3", "+experiment=ppo"])
    with pytest.raises(ConfigError, match="Unknown config key 'algo.ent_coeff'.*'ent_coef'"):
        check_overrides(CONF, "config", ["algo.ent_coeff=0.1,0.2"])


def test_unknown_experiment_lists_the_choices():
    """Test that an unknown experiment names the close match and every option."""
    expected = "Unknown experiment 'ppo_contnuous'.*'ppo_continuous'.*Choose one of: .*ppo, .*ppo_continuous, "
    with pytest.raises(ConfigError, match=expected):
        check_overrides(CONF, "config", ["+experiment=ppo_contnuous"])


def _cfg(*overrides):
    with initialize_config_dir(config_dir=CONF, version_base="1.3"):
        return compose("config", overrides=[*overrides, "run_dir=."])


def test_an_added_key_the_constructor_does_not_take_names_the_key():
    """Test that +algo.foo=1 (accepted by Hydra, refused by the constructor) is explained, not a traceback."""
    cfg = _cfg("+algo.foo=1")
    with pytest.raises(Exception) as info:
        build_model(cfg)
    message = explain_build_error(info.value, cfg)
    assert message is not None and "foo" in message and "algo" in message


def test_errors_that_are_not_config_mistakes_keep_their_traceback():
    """Test that a TypeError from inside the library is not dressed up as a config error."""
    assert explain_build_error(TypeError("unsupported operand type(s) for +: 'int' and 'NoneType'"), _cfg()) is None
    assert explain_build_error(RuntimeError("boom"), _cfg()) is None


def test_a_missing_value_names_the_key_where_the_user_sets_it():
    """Test that env.env_id=??? is reported as the env group's key, where the user sets it."""
    cfg = _cfg("env.env_id=???")
    from rl_lightning.launch.app import build_data

    with pytest.raises(Exception) as info:
        build_data(cfg)
    message = explain_build_error(info.value, cfg)
    assert message.startswith("Config key 'env.env_id' has no value") and "env.env_id=..." in message


def test_a_trainer_the_machine_cannot_run_is_explained():
    """Test that trainer=gpu on a machine without one ends with the settings to pick instead (builds where a GPU is)."""
    import torch

    from rl_lightning.launch.app import build_trainer

    cfg = _cfg("trainer=gpu")
    if torch.cuda.is_available():
        assert build_trainer(cfg, [], []).accelerator.__class__.__name__ == "CUDAAccelerator"
        return
    with pytest.raises(Exception) as info:
        build_trainer(cfg, [], [])
    message = explain_build_error(info.value, cfg)
    assert message is not None and "trainer=default" in message and "gpu" in message


def test_a_refused_logger_setting_is_named_by_its_value_not_by_an_allowed_one():
    """Test that logger.wandb.mode=on is blamed on that key: the message also quotes 'auto', which
    trainer.accelerator holds, and was blamed on it."""
    from rl_lightning.launch.app import build_loggers

    cfg = _cfg("logger=wandb", "logger.wandb.mode=on")
    with pytest.raises(Exception) as info:
        build_loggers(cfg)
    message = explain_build_error(info.value, cfg)
    assert message.startswith("Invalid config value in 'logger.wandb.mode'") and "logger.wandb.mode=..." in message


def test_trainer_settings_of_text_are_checked_against_the_trainers_own_types():
    """Test that a Literal's text values pass (trainer.deterministic=warn, precision=bf16-mixed) where a number
    given as text is refused (trainer.max_epochs=abc)."""
    from rl_lightning.launch.app import build_trainer

    trainer = build_trainer(_cfg("trainer.deterministic=warn", "trainer.precision=bf16-mixed"), [], [])
    assert trainer.precision == "bf16-mixed"
    with pytest.raises(ConfigError, match="trainer.max_epochs must be int, got 'abc'"):
        build_trainer(_cfg("trainer.max_epochs=abc"), [], [])


def test_a_run_without_save_interval_gets_no_checkpoints_of_lightnings_own():
    """Test that algo.save_interval=null leaves Lightning's default checkpointing off (it wrote epoch=N-step=M.ckpt,
    named by gradient steps, while the summary said no checkpoint, and a rerun was told to resume from a last.ckpt
    that did not exist); with it set, checkpointing stays on (the library's callbacks replace Lightning's at fit)."""
    from rl_lightning.launch.app import build_trainer

    assert build_trainer(_cfg("+experiment=ppo", "algo.save_interval=null"), [], []).checkpoint_callback is None
    assert build_trainer(_cfg("+experiment=ppo"), [], []).checkpoint_callback is not None
