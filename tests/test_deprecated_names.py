"""Tests that names renamed to one spelling per concept still work for one release, with a warning."""

import pytest

import rl_lightning.data as data
import rl_lightning.envs as envs
from tests.helpers import tiny_ppo, tiny_rollout_data


@pytest.mark.parametrize(
    "module, old, new",
    [
        (data, "RolloutCounters", "DataCounters"),
        (data, "RolloutMetrics", "CollectionMetrics"),
        (envs, "SHIPPED_OBJECT_SETS", "SHIPPED_OBJ_SETS"),
        (envs, "resolve_object_sets", "resolve_obj_sets"),
    ],
)
def test_an_old_name_warns_with_the_new_one_and_is_the_new_object(module, old, new):
    """Test that importing a renamed name gives the new object and a DeprecationWarning naming it."""
    with pytest.warns(DeprecationWarning, match=f"{old} is now rl_lightning.[a-z]+.{new}"):
        value = getattr(module, old)
    assert value is getattr(module, new)


def test_an_unknown_name_is_still_an_attribute_error():
    """Test that the deprecation hook does not swallow a misspelled name."""
    with pytest.raises(AttributeError, match="DataCounter"):
        data.DataCounter  # noqa: B018


def test_last_rollout_warns_and_reads_last_collection():
    """Test that the data module's old last_rollout property warns and returns last_collection."""
    datamodule = tiny_rollout_data()
    with pytest.warns(DeprecationWarning, match="last_collection"):
        assert datamodule.last_rollout is datamodule.last_collection is None


def test_rlmodule_actor_warns_and_reads_the_acting_copy():
    """Test that RLModule.actor (the acting copy's old name) warns and returns acting_copy."""

    model = tiny_ppo(total_timesteps=64)
    with pytest.warns(DeprecationWarning, match="acting_copy"):
        assert model.actor is model.acting_copy is None


@pytest.mark.parametrize("cls", [data.RolloutDataModule, data.ReplayDataModule])
def test_the_env_argument_is_env_id_now(cls):
    """Test that a data module's old env= argument warns naming env_id, and only env_id is saved."""
    with pytest.warns(DeprecationWarning, match=r"\(env=\.\.\.\) is now [A-Za-z]+\(env_id=\.\.\.\)"):
        module = cls(env="Acrobot-v1", obj_sets={"train": [{}], "test": [{}]})
    assert module.hparams.env_id == "Acrobot-v1" and "env" not in module.hparams
    with pytest.raises(ValueError, match="names two envs; pass env_id only"):
        cls(env="Acrobot-v1", env_id="MountainCar-v0")


def test_an_env_config_of_an_earlier_release_still_builds(tmp_path):
    """Test that an env group that says id: (its key before env_id) builds its data module, with a warning."""
    from omegaconf import OmegaConf

    from rl_lightning.launch.app import build_data

    cfg = OmegaConf.create(
        {
            "seed": 3,
            "data": {"_target_": "rl_lightning.RolloutDataModule", "rollout_steps": 16},
            "env": {"id": "Acrobot-v1", "num_envs": 2, "obj_sets": {"train": [{}], "test": [{}]}},
        }
    )
    with pytest.warns(DeprecationWarning, match="id is now env_id"):
        module = build_data(cfg)
    assert (module.hparams.env_id, module.hparams.num_envs, module.hparams.seed) == ("Acrobot-v1", 2, 3)
