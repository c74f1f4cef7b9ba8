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
