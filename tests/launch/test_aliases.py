"""The Hydra keys of earlier releases: rewritten to their new names, each with a warning naming the new key."""

from rl_lightning.launch.aliases import RENAMED_KEYS, renamed_overrides


def test_old_learning_keys_become_the_algorithms_and_say_so():
    """Test that data.gamma=... runs as algo.gamma=..., other arguments pass through, and each rename is named."""
    given = ["+experiment=ppo", "data.gamma=0.9", "-m", "data.update_epochs=2,4", "data.rollout_steps=64"]
    overrides, notes = renamed_overrides(given)
    assert overrides == ["+experiment=ppo", "algo.gamma=0.9", "-m", "algo.update_epochs=2,4", "data.rollout_steps=64"]
    assert notes == [
        "data.gamma is now algo.gamma; the old key goes in the next release (this run uses algo.gamma).",
        "data.update_epochs is now algo.update_epochs; the old key goes in the next release (this run uses "
        "algo.update_epochs).",
    ]


def test_the_env_groups_old_id_key_becomes_env_id():
    """Test that env.id=... (the env group's key before env_id) runs as env.env_id=..., with a note."""
    overrides, notes = renamed_overrides(["env=pendulum", "env.id=Pendulum-v1"])
    assert overrides == ["env=pendulum", "env.env_id=Pendulum-v1"] and "env.id is now env.env_id" in notes[0]


def test_every_learning_setting_that_moved_has_an_alias():
    """Test that the four settings that moved from the data module to PPO are all aliased, prefixes kept."""
    moved = {"data.gamma", "data.gae_lambda", "data.update_epochs", "data.num_minibatches"}
    assert set(RENAMED_KEYS) == {"env.id", *moved}
    assert renamed_overrides(["++data.gae_lambda=0.8"])[0] == ["++algo.gae_lambda=0.8"]
