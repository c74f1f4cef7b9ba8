"""Tests for GAE and the rollout dataset."""

import pytest
import torch

from rl_lightning.data import DataCounters, RolloutDataset, UpdatePlan, compute_gae, explained_variance
from rl_lightning.envs import EnvGroup
from tests.conftest import SCRIPTED_ID, SCRIPTED_SETS, ObsValuePolicy


def test_gae_hand_computed_terminated_and_truncated():
    """Test GAE against hand-computed values: env 0 terminates at t=1, env 1 is truncated at t=2."""
    gamma, lam = 0.9, 0.8  # gamma * lambda = 0.72
    reward = torch.ones(4, 2)
    value = torch.tensor([[0.5, 0.5], [0.6, 0.6], [0.7, 0.7], [0.8, 0.8]])
    # next_value[t] = V(s_{t+1}); 99 after termination must be ignored; 2.0 is V(final obs)
    # of the truncated episode; 0.9 is the value after the rollout.
    next_value = torch.tensor([[0.6, 0.6], [99.0, 0.7], [0.8, 2.0], [0.9, 0.9]])
    terminated = torch.tensor([[0, 0], [1, 0], [0, 0], [0, 0]], dtype=torch.bool)
    truncated = torch.tensor([[0, 0], [0, 0], [0, 1], [0, 0]], dtype=torch.bool)
    adv, ret = compute_gae(reward, value, next_value, terminated, truncated, gamma, lam)
    # Env 0: deltas 1.04, 0.4, 1.02, 1.01; the recursion stops at t=1.
    # A3 = 1.01, A2 = 1.02 + 0.72 * 1.01, A1 = 0.4, A0 = 1.04 + 0.72 * 0.4
    expected_0 = [1.04 + 0.72 * 0.4, 0.4, 1.02 + 0.72 * 1.01, 1.01]
    # Env 1: deltas 1.04, 1.03, 1 + 0.9 * 2.0 - 0.7 = 2.1, 1.01; the recursion stops at t=2.
    a1 = 1.03 + 0.72 * 2.1
    expected_1 = [1.04 + 0.72 * a1, a1, 2.1, 1.01]
    torch.testing.assert_close(adv, torch.tensor([expected_0, expected_1]).T)
    torch.testing.assert_close(ret, adv + value)


def _gae_reference(reward, value, next_value, terminated, truncated, gamma, lam):
    """The GAE recursion written as a loop over time (CleanRL's ppo.py, with truncation bootstraps)."""
    advantage = torch.zeros_like(reward)
    last = torch.zeros_like(reward[0])
    for t in reversed(range(reward.shape[0])):
        delta = reward[t] + gamma * next_value[t] * ~terminated[t] - value[t]
        last = delta + gamma * lam * ~(terminated[t] | truncated[t]) * last
        advantage[t] = last
    return advantage


@pytest.mark.parametrize("num_envs", [1, 4, 16])  # torchrl's vectorized form up to 8 envs, its loop beyond
def test_gae_equals_the_recursion_on_random_rollouts(num_envs):
    """Test that both GAE paths give the recursion's advantages on random rollouts with episode ends."""
    g = torch.Generator().manual_seed(num_envs)
    steps = 300
    reward, value, next_value = (torch.randn(steps, num_envs, generator=g) for _ in range(3))
    ended = torch.rand(steps, num_envs, generator=g) < 0.05
    terminated = ended & (torch.rand(steps, num_envs, generator=g) < 0.5)
    truncated = ended & ~terminated
    assert terminated.any() and truncated.any()
    adv, ret = compute_gae(reward, value, next_value, terminated, truncated, 0.99, 0.95)
    torch.testing.assert_close(adv, _gae_reference(reward, value, next_value, terminated, truncated, 0.99, 0.95))
    torch.testing.assert_close(ret, adv + value)


def _dataset(rollout_steps=6, num_envs=2, update_epochs=3, num_minibatches=4, max_episode_steps=None, gamma=1.0):
    envs = EnvGroup(SCRIPTED_ID, num_envs, obj_sets=SCRIPTED_SETS, max_episode_steps=max_episode_steps)
    policy = ObsValuePolicy()
    dataset = RolloutDataset(
        envs,
        policy,
        rollout_steps,
        UpdatePlan(gamma, gae_lambda=1.0, update_epochs=update_epochs, num_minibatches=num_minibatches),
        counters=DataCounters(),
        generator=torch.Generator().manual_seed(0),
        reset_seed=0,
    )
    return dataset, policy


def test_dataset_yields_the_rollout_once_with_its_minibatch_plan():
    """Test that one iteration yields the rollout once with update_epochs x num_minibatches index sets."""
    dataset, _ = _dataset(rollout_steps=6, num_envs=2, update_epochs=3, num_minibatches=4)
    batches = list(dataset)
    assert len(batches) == len(dataset) == 1
    rollout, minibatches = batches[0]["rollout"], batches[0]["minibatches"]
    assert rollout.batch_size == torch.Size([12]) and rollout["obs"].shape == (12, 1)
    assert set(rollout.keys()) == {"obs", "action", "log_prob", "value", "advantage", "return"}
    assert minibatches.shape == (12, 3)
    # Each update epoch (4 consecutive minibatches) is a permutation of the whole rollout,
    # and the epochs are shuffled differently.
    epochs = minibatches.view(3, 12)
    for epoch in epochs:
        assert sorted(epoch.tolist()) == list(range(12))
    assert not torch.equal(epochs[0], epochs[1])
    assert dataset.counters.env_steps == 12 and dataset.counters.iterations == 1


def test_dataset_bootstraps_truncation_not_termination():
    """Test that a truncated step bootstraps from V(final obs) and a terminated step does not."""
    # Episodes terminate after 5 steps; the time limit truncates at 3 (scripted value = obs).
    dataset, _ = _dataset(rollout_steps=3, num_envs=1, update_epochs=1, num_minibatches=1, max_episode_steps=3)
    batch = dataset.collect()
    obs = batch["obs"][:, 0].tolist()
    assert obs == [0.0, 1.0, 2.0]
    # Last step: obs 2 -> reward 3, truncated; V(final obs=3) = 3, so A = 3 + 3 - 2 = 4.
    # Bootstrapping from the reset obs (value 0) or treating it as terminal would give 1.
    assert batch["advantage"][2].item() == pytest.approx(4.0)
    assert batch["return"][0].item() == pytest.approx(1 + 2 + 3 + 3)

    dataset, _ = _dataset(rollout_steps=5, num_envs=1, update_epochs=1, num_minibatches=1)
    batch = dataset.collect()
    # Step 4 terminates (obs 4 -> reward 5): no bootstrap, A = 5 - 4 = 1.
    assert batch["advantage"][4].item() == pytest.approx(1.0)


def test_normalizer_updates_once_per_rollout_after_its_update():
    """Test that the policy's observation statistics move at the start of the next rollout only."""
    dataset, policy = _dataset()
    list(dataset)
    assert policy.normalizer_updates == 0 and dataset.pending_obs.shape == (12, 1)
    list(dataset)
    assert policy.normalizer_updates == 1


def test_explained_variance():
    """Test explained variance: 1 for a perfect critic, 0 for a constant at the mean."""
    returns = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(returns, returns) == pytest.approx(1.0)
    assert explained_variance(torch.full((4,), 2.5), returns) == pytest.approx(0.0)


def test_a_plan_whose_minibatches_do_not_divide_the_rollout_is_refused_naming_the_fix():
    """Test that the dataset refuses num_minibatches not dividing rollout_steps x num_envs, before any env step."""
    with pytest.raises(ValueError, match=r"num_minibatches=5 does not divide .* 6 x 2 = 12 .*algo.num_minibatches"):
        _dataset(rollout_steps=6, num_envs=2, num_minibatches=5)


def test_a_dict_rollout_stores_each_key_in_its_own_dtype_and_bootstraps_from_dict_final_observations():
    """Test that images stay uint8 in the rollout (one byte per pixel), vectors float32, and truncation bootstraps."""
    from rl_lightning.nets import ActorCritic

    envs = EnvGroup(
        "tests.envs.pixel_goal:pixel_goal/PixelGoal-v0", 2, obj_sets={"train": [{}], "test": [{}]}, max_episode_steps=3
    )
    torch.manual_seed(0)
    small_cnn = {"cnn_channels": [4], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 8}
    policy = ActorCritic(envs.observation_space, envs.action_space, encoder=small_cnn)
    dataset = RolloutDataset(
        envs, policy, 8, UpdatePlan(0.9, 0.95, 1, 2), DataCounters(), torch.Generator().manual_seed(0), reset_seed=0
    )
    batch = next(iter(dataset))
    rollout = batch["rollout"]
    image, position = rollout["obs", "image"], rollout["obs", "position"]
    assert image.dtype == torch.uint8 and image.shape == (16, 5, 5, 1)
    assert image.numel() * image.element_size() == 16 * 25  # bytes: one per pixel
    assert position.dtype == torch.float32
    assert (image.flatten(1).max(1).values == 255).all()  # every stored frame shows its goal
    # Values were computed on the stored observations, minibatches index the nested keys.
    _, _, value = policy.evaluate_actions(rollout["obs"], rollout["action"])
    torch.testing.assert_close(value, rollout["value"])
    assert rollout[batch["minibatches"][0]]["obs", "image"].shape == (8, 5, 5, 1)
    assert torch.isfinite(rollout["advantage"]).all()
    # The normalizer moves on the vector key only, after the update.
    assert policy.encoder.normalizer.count < 1
    next(iter(dataset))
    assert policy.encoder.normalizer.count > 16
    envs.close()


def test_a_shared_encoder_takes_log_probabilities_and_values_at_each_step_and_an_mlp_after_the_rollout(monkeypatch):
    """Test that a policy with an encoder acts through ``act`` (one forward per step, no second pass over the
    rollout), that its stored log-probabilities and values equal ``evaluate_actions`` on the stored batch, and
    that a flat MLP policy explores per step and evaluates the rollout once."""
    from rl_lightning.nets import ActorCritic

    envs = EnvGroup("tests.envs.pixel_goal:pixel_goal/PixelGoal-v0", 2, obj_sets={"train": [{}], "test": [{}]})
    torch.manual_seed(0)
    small_cnn = {"cnn_channels": [4], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 8}
    policy = ActorCritic(envs.observation_space, envs.action_space, encoder=small_cnn)
    assert policy.evaluates_per_step
    calls = {"act": 0}
    act = policy.act

    def counted_act(obs, deterministic=False):
        calls["act"] += 1
        return act(obs, deterministic)

    def refused(*args, **kwargs):
        raise AssertionError("a second pass over the rollout")

    monkeypatch.setattr(policy, "act", counted_act)
    monkeypatch.setattr(policy, "evaluate_actions", refused)
    dataset = RolloutDataset(
        envs, policy, 8, UpdatePlan(0.9, 0.95, 1, 2), DataCounters(), torch.Generator().manual_seed(0), reset_seed=0
    )
    rollout = dataset.collect()
    assert calls["act"] == 8
    monkeypatch.undo()
    log_prob, _, value = policy.evaluate_actions(rollout["obs"], rollout["action"])
    torch.testing.assert_close(log_prob, rollout["log_prob"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(value, rollout["value"], rtol=1e-5, atol=1e-5)
    envs.close()

    vector_envs = EnvGroup(SCRIPTED_ID, 2, obj_sets=SCRIPTED_SETS)
    flat = ActorCritic(vector_envs.observation_space, vector_envs.action_space)
    assert not flat.evaluates_per_step

    def refused_act(*args, **kwargs):
        raise AssertionError("per-step act for a flat MLP")

    monkeypatch.setattr(flat, "act", refused_act)
    dataset = RolloutDataset(
        vector_envs,
        flat,
        6,
        UpdatePlan(0.9, 0.95, 1, 2),
        DataCounters(),
        torch.Generator().manual_seed(0),
        reset_seed=0,
    )
    rollout = dataset.collect()
    log_prob, _, value = flat.evaluate_actions(rollout["obs"], rollout["action"])
    torch.testing.assert_close(value, rollout["value"])
    vector_envs.close()


def test_a_rollout_keeps_for_the_normalizer_only_the_vector_keys_and_nothing_of_an_image_only_space():
    """Test that the observations kept for the next normalizer update (and saved in checkpoints) hold the Dict's
    vector key but not its image, and nothing at all for an image Box (its encoder has no normalizer)."""
    import gymnasium as gym
    import numpy as np

    from rl_lightning.nets import ActorCritic

    small_cnn = {"cnn_channels": [4], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 8}
    envs = EnvGroup("tests.envs.pixel_goal:pixel_goal/PixelGoal-v0", 2, obj_sets={"train": [{}], "test": [{}]})
    policy = ActorCritic(envs.observation_space, envs.action_space, encoder=small_cnn)
    dataset = RolloutDataset(
        envs, policy, 4, UpdatePlan(0.9, 0.95, 1, 2), DataCounters(), torch.Generator().manual_seed(0), reset_seed=0
    )
    dataset.collect()
    assert set(dataset.pending_obs.keys()) == {"position"} and dataset.pending_obs.shape == (8,)
    count = float(policy.encoder.normalizer.count)
    dataset.collect()  # the kept vector key reaches the normalizer
    assert policy.encoder.normalizer.count > count
    envs.close()

    image_only = ActorCritic(
        gym.spaces.Box(0, 255, (5, 5, 1), np.uint8), envs.action_space, encoder={**small_cnn, "channels_first": False}
    )
    assert image_only.normalizer_input(torch.zeros(3, 5, 5, 1, dtype=torch.uint8)) is None
