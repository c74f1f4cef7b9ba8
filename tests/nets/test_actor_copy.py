"""ActorCopy: the copy acts like the learner, syncs exactly, and its consistency check catches corruption."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from rl_lightning.nets import ActorCritic
from rl_lightning.nets.actor_copy import ActorCopy, WeightSyncError, fingerprint


def _learner():
    torch.manual_seed(0)
    policy = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2))
    policy.update_normalizer(torch.randn(64, 4) * 3 + 1)
    return policy


def _train_step(policy):
    optimizer = torch.optim.SGD(policy.parameters(), lr=0.1)
    policy.value(torch.randn(8, 4)).pow(2).mean().backward()
    optimizer.step()


def test_sync_after_updates_makes_the_copy_equal_the_learner():
    """Test that the copy lags after an update and equals the learner again after the next act (sync_interval 1)."""
    learner = _learner()
    actor = ActorCopy(learner, "cpu", "float32")
    _train_step(learner)
    actor.mark_stale()
    before = dict(actor.module.named_parameters())["critic.0.weight"].clone()
    assert not torch.equal(before, dict(learner.named_parameters())["critic.0.weight"])
    obs = torch.randn(16, 4)
    value = actor.value(obs)  # the first act after the update pulls the weights
    for (name, p), (_, q) in zip(actor.module.state_dict().items(), learner.state_dict().items(), strict=True):
        assert torch.equal(p, q), name
    torch.testing.assert_close(value, learner.value(obs).detach())
    assert actor.syncs == 1 and actor.pending_updates == 0


def test_sync_interval_delays_syncs():
    """Test that with sync_interval=3 the copy pulls weights only once 3 updates are pending."""
    actor = ActorCopy(_learner(), "cpu", "float32", sync_interval=3)
    for expected_syncs in (0, 0, 1):
        actor.mark_stale()
        actor.act(torch.zeros(1, 4))
        assert actor.syncs == expected_syncs


def test_the_learners_observation_statistics_reach_the_copy_with_its_weights():
    """Test that the learner's normalizer update (PPO's, after its update phase) reaches the copy at its next sync."""
    learner = _learner()
    actor = ActorCopy(learner, "cpu", "float32")
    learner.update_normalizer(torch.randn(32, 4) + 5)
    assert not torch.equal(actor.module.normalizer.mean, learner.normalizer.mean)
    actor.mark_stale()  # the optimizer step that came with it
    actor.act(torch.zeros(1, 4))
    assert torch.equal(actor.module.normalizer.mean, learner.normalizer.mean)


def test_bfloat16_copy_holds_the_learner_weights_rounded_and_returns_float32():
    """Test a bf16 copy: weights are the learner's cast to bf16, outputs float32, the check passes."""
    learner = _learner()
    actor = ActorCopy(learner, "cpu", "bfloat16", verify=True)
    actor.sync()
    weight = dict(actor.module.named_parameters())["actor.0.weight"]
    assert weight.dtype == torch.bfloat16
    assert torch.equal(weight, dict(learner.named_parameters())["actor.0.weight"].to(torch.bfloat16))
    action, log_prob, value, state = actor.act(torch.randn(5, 4))
    assert action.dtype == torch.int64 and log_prob.dtype == value.dtype == torch.float32 and state is None


def test_verify_names_a_corrupted_tensor():
    """Test that the consistency check raises WeightSyncError naming the tensor written behind its back."""
    learner = _learner()
    actor = ActorCopy(learner, "cpu", "float32")
    actor.verify()  # a fresh copy passes
    with torch.no_grad():
        dict(actor.module.named_parameters())["actor.2.bias"].add_(1e-3)
    with pytest.raises(WeightSyncError, match="actor.2.bias"):
        actor.verify()
    actor.sync()  # a sync repairs it
    actor.verify()


def test_fingerprint_changes_with_any_weight():
    """Test that a one-element change moves the fingerprint of that tensor only."""
    learner = _learner()
    before = fingerprint(learner)
    with torch.no_grad():
        dict(learner.named_parameters())["critic.2.weight"][0, 0] += 0.5
    after = fingerprint(learner)
    changed = [name for name in before if not torch.equal(before[name], after[name])]
    assert changed == ["critic.2.weight"]


def test_bad_arguments_are_refused():
    """Test that an unknown dtype or a non-positive interval gets a ValueError naming it."""
    with pytest.raises(ValueError, match="dtype"):
        ActorCopy(_learner(), "cpu", "int8")
    with pytest.raises(ValueError, match="sync_interval"):
        ActorCopy(_learner(), "cpu", "float32", sync_interval=0)


def test_bfloat16_copy_normalizes_observations_in_float32():
    """Test that a bf16 copy keeps a narrow feature (mean 50, std 0.05): values close to the learner's, none lost."""
    torch.manual_seed(0)
    learner = ActorCritic(gym.spaces.Box(-np.inf, np.inf, (2,)), gym.spaces.Discrete(2))
    data = torch.stack([50 + 0.05 * torch.randn(4096), torch.zeros(4096)], dim=1)  # feature 2 constant
    learner.update_normalizer(data)
    actor = ActorCopy(learner, "cpu", "bfloat16")
    assert actor.module.normalizer.mean.dtype == torch.float32  # statistics are not rounded
    obs = torch.stack([50 + 0.05 * torch.randn(256), torch.zeros(256)], dim=1)
    features = actor.module.features(obs)
    assert torch.isfinite(features).all() and features[:, 0].float().std() > 0.5  # feature 1 survives
    torch.testing.assert_close(actor.value(obs), learner.value(obs).detach(), rtol=0.05, atol=0.05)
