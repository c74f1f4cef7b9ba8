"""Tests for the actor-critic networks."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rl_lightning.nets import ActorCritic
from rl_lightning.nets.actor_critic import action_kind

BOX4 = gym.spaces.Box(-np.inf, np.inf, (4,))


def _sample(policy, obs):
    """A sampled action for each observation (the action ``act`` draws)."""
    return policy.sample(policy.actor(policy.features(obs)))


def _evaluate(policy, obs, action):
    """``evaluate_actions`` on a flat batch: the rollout's sequences of one step."""
    return tuple(x[0] for x in policy.evaluate_actions(obs[None], action[None]))


@pytest.mark.parametrize(
    "action_space, action_shape",
    [
        (gym.spaces.Discrete(3), (8,)),
        (gym.spaces.Box(-1, 1, (2,)), (8, 2)),
        (gym.spaces.MultiDiscrete([3, 2, 4]), (8, 3)),
        (gym.spaces.MultiBinary(5), (8, 5)),
    ],
)
def test_act_and_evaluate_shapes_agree(action_space, action_shape):
    """Test act/evaluate_actions shapes, and that they agree on log-probabilities and values."""
    torch.manual_seed(0)
    policy = ActorCritic(BOX4, action_space)
    obs = torch.randn(8, 4)
    action, log_prob, value, state = policy.act(obs)
    assert state is None and policy.initial_state(8) is None
    assert action.shape == action_shape and log_prob.shape == (8,) and value.shape == (8,)
    log_prob2, entropy, value2 = _evaluate(policy, obs, action)
    torch.testing.assert_close(log_prob, log_prob2)
    torch.testing.assert_close(value, value2)
    assert entropy.shape == (8,) and (entropy > 0).all()


def test_deterministic_action_is_the_mode():
    """Test that deterministic acting returns argmax for discrete and the mean for continuous."""
    torch.manual_seed(0)
    obs = torch.randn(16, 4)
    discrete = ActorCritic(BOX4, gym.spaces.Discrete(3))
    assert torch.equal(discrete(obs), discrete.actor(discrete.features(obs)).argmax(-1))
    continuous = ActorCritic(BOX4, gym.spaces.Box(-1, 1, (2,)))
    torch.testing.assert_close(continuous(obs), continuous.actor(continuous.features(obs)))


def test_orthogonal_init_scales_policy_head():
    """Test that the policy head starts near-uniform (gain 0.01) per the PPO details."""
    policy = ActorCritic(BOX4, gym.spaces.Discrete(2))
    assert policy.actor[-1].weight.abs().max() < 0.05
    assert policy.critic[-1].weight.abs().max() > 0.1


@pytest.mark.parametrize(
    "obs_space, act_space, match",
    [
        (gym.spaces.Discrete(3), gym.spaces.Discrete(2), "Box or Dict observation space"),
        (BOX4, gym.spaces.MultiDiscrete([[2, 2], [3, 3]]), "1-D MultiDiscrete.*got MultiDiscrete"),
        (BOX4, gym.spaces.Tuple([gym.spaces.Discrete(2)]), "1-D Box action spaces, got Tuple.*ActionWrapper"),
    ],
)
def test_unsupported_spaces_rejected(obs_space, act_space, match):
    """Test that unsupported spaces raise a clear TypeError."""
    with pytest.raises(TypeError, match=match):
        ActorCritic(obs_space, act_space)


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-1, 1, (2,))])
def test_distributions_match_torch_distributions(action_space):
    """Test that sampling, log-probabilities and entropies equal torch.distributions' on the same outputs."""
    torch.manual_seed(0)
    policy = ActorCritic(BOX4, action_space, init_log_std=-0.3)
    obs = torch.randn(64, 4) * 3
    out = policy.actor(policy.features(obs))
    if policy.discrete:
        reference = torch.distributions.Categorical(logits=out)
    else:
        reference = torch.distributions.Normal(out, policy.log_std.exp().expand_as(out))
    if not policy.discrete:  # the same draw from the same generator state
        torch.manual_seed(1)
        expected_action = reference.sample()
        torch.manual_seed(1)
        torch.testing.assert_close(_sample(policy, obs), expected_action)
    action = _sample(policy, obs)
    log_prob, entropy, _ = _evaluate(policy, obs, action)
    expected_log_prob, expected_entropy = reference.log_prob(action), reference.entropy()
    if not policy.discrete:
        expected_log_prob, expected_entropy = expected_log_prob.sum(-1), expected_entropy.sum(-1)
    torch.testing.assert_close(log_prob, expected_log_prob)
    torch.testing.assert_close(entropy, expected_entropy)
    log_prob.sum().backward()  # differentiable in the policy's parameters
    assert policy.actor[0].weight.grad.abs().sum() > 0


def test_certain_action_has_zero_entropy_not_nan():
    """Test that logits with a zero-probability action give finite log-probabilities and entropy 0."""
    policy = ActorCritic(BOX4, gym.spaces.Discrete(2), normalize_obs=False)
    out = torch.tensor([[0.0, -1e6], [1e6, 0.0]])
    log_prob, entropy = policy._log_prob_entropy(out, torch.tensor([0, 0]))
    torch.testing.assert_close(log_prob, torch.zeros(2))
    torch.testing.assert_close(entropy, torch.zeros(2))


def test_discrete_samples_follow_the_policy_probabilities():
    """Test that sampled discrete actions (Gumbel-max) occur with the softmax probabilities of the logits."""
    torch.manual_seed(0)
    policy = ActorCritic(BOX4, gym.spaces.Discrete(3), normalize_obs=False)
    with torch.no_grad():
        policy.actor[-1].bias.copy_(torch.tensor([1.0, 0.0, -1.0]))
    obs = torch.zeros(20_000, 4)
    with torch.no_grad():
        probs = torch.softmax(policy.actor(obs[:1]), -1)[0]
        counts = torch.bincount(_sample(policy, obs), minlength=3).float() / obs.shape[0]
    torch.testing.assert_close(counts, probs, atol=0.01, rtol=0)
    assert probs.max() - probs.min() > 0.4  # the probabilities really differ


MULTI = gym.spaces.MultiDiscrete([3, 2, 4])


def test_multi_discrete_log_probabilities_and_entropies_are_those_of_a_product_of_categoricals():
    """Test that MultiDiscrete actions get independent Categoricals: log-probabilities and entropies summed."""
    torch.manual_seed(0)
    policy = ActorCritic(BOX4, MULTI)
    obs = torch.randn(64, 4) * 3
    with torch.no_grad():
        for p in policy.actor.parameters():
            p.add_(torch.randn_like(p))  # probabilities away from uniform
    out = policy.actor(policy.features(obs))
    parts = [torch.distributions.Categorical(logits=part) for part in out.split([3, 2, 4], -1)]
    action = _sample(policy, obs)
    assert action.dtype == torch.int64 and action.shape == (64, 3)
    assert ((action >= 0) & (action < torch.tensor([3, 2, 4]))).all()
    log_prob, entropy, _ = _evaluate(policy, obs, action)
    torch.testing.assert_close(log_prob, sum(d.log_prob(action[:, i]) for i, d in enumerate(parts)))
    torch.testing.assert_close(entropy, sum(d.entropy() for d in parts))
    torch.testing.assert_close(policy(obs), torch.stack([d.probs.argmax(-1) for d in parts], -1))


def test_multi_binary_log_probabilities_and_entropies_are_those_of_a_product_of_bernoullis():
    """Test that MultiBinary actions get independent Bernoullis, sampled with their probabilities."""
    torch.manual_seed(0)
    policy = ActorCritic(BOX4, gym.spaces.MultiBinary(3), normalize_obs=False)
    with torch.no_grad():
        policy.actor[-1].bias.copy_(torch.tensor([2.0, 0.0, -1.0]))
    obs = torch.randn(64, 4)
    out = policy.actor(obs)
    reference = torch.distributions.Bernoulli(logits=out)
    action = _sample(policy, obs)
    log_prob, entropy, _ = _evaluate(policy, obs, action)
    torch.testing.assert_close(log_prob, reference.log_prob(action.float()).sum(-1))
    torch.testing.assert_close(entropy, reference.entropy().sum(-1))
    torch.testing.assert_close(policy(obs), (reference.probs > 0.5).long())
    zeros = torch.zeros(20_000, 4)
    with torch.no_grad():
        frequency = _sample(policy, zeros).float().mean(0)
        torch.testing.assert_close(frequency, torch.sigmoid(policy.actor(zeros[:1]))[0], atol=0.01, rtol=0)


def test_multi_discrete_samples_follow_each_entrys_probabilities():
    """Test that each entry's Gumbel-max draws occur with the softmax of its own logits."""
    torch.manual_seed(0)
    policy = ActorCritic(BOX4, MULTI, normalize_obs=False)
    with torch.no_grad():
        policy.actor[-1].bias.copy_(torch.tensor([1.0, 0.0, -1.0, 0.5, -0.5, 2.0, 0.0, 0.0, -2.0]))
        obs = torch.zeros(20_000, 4)
        logits = policy.actor(obs[:1])[0].split([3, 2, 4])
        action = _sample(policy, obs)
    for i, part in enumerate(logits):
        counts = torch.bincount(action[:, i], minlength=len(part)).float() / obs.shape[0]
        torch.testing.assert_close(counts, torch.softmax(part, -1), atol=0.01, rtol=0)


GROUPED = gym.spaces.Dict(
    {"cue": gym.spaces.Box(0.0, 1.0, (4,), np.float32), "offset": gym.spaces.Box(-5.0, 5.0, (1,), np.float32)}
)
GROUPS = {"actor_keys": ["cue"], "critic_keys": ["cue", "offset"]}


def _grouped_obs(offset: float, batch: int = 6, requires_grad: bool = False) -> TensorDict:
    cue = torch.nn.functional.one_hot(torch.arange(batch) % 4, 4).float()
    offsets = torch.full((batch, 1), offset, requires_grad=requires_grad)
    return TensorDict({"cue": cue, "offset": offsets}, batch_size=[batch])


@pytest.mark.parametrize("recurrent", [False, True])
def test_the_actor_never_reads_a_privileged_critic_key(recurrent):
    """Test observation groups: the actor's outputs and its parameters' gradients do not depend on the key only the
    critic reads, which reaches the critic (its value and gradient), and the actor's encoder has no route for it."""
    from rl_lightning.nets.recurrent import RecurrentActorCritic

    torch.manual_seed(0)
    build = (lambda: RecurrentActorCritic(GROUPED, gym.spaces.Discrete(4), (16,), encoder=GROUPS, shared_core=False)) \
        if recurrent else (lambda: ActorCritic(GROUPED, gym.spaces.Discrete(4), (16,), encoder=GROUPS))  # fmt: skip
    policy = build()
    assert [v.key for v in policy.encoder.vectors] == ["cue"]
    assert [v.key for v in policy.critic_encoder.vectors] == ["cue", "offset"]
    action = torch.arange(6)[None] % 4  # one step of 6 sequences
    starts = torch.ones(1, 6, dtype=torch.bool)
    state = policy.initial_state(6)
    actor_grads, values = [], []
    for offset in (-3.0, 4.0):
        offsets = torch.full((6, 1), offset, requires_grad=True)
        obs = TensorDict({"cue": _grouped_obs(offset)["cue"], "offset": offsets}, batch_size=[6])
        policy.zero_grad()
        log_prob, entropy, value = policy.evaluate_actions(obs.unsqueeze(0), action, starts, state)
        (log_prob.sum() + entropy.sum()).backward(retain_graph=True)
        assert offsets.grad is None or not offsets.grad.any()  # the actor's path never touches it
        actor_grads.append([p.grad.clone() for p in policy.actor.parameters()])
        value.sum().backward()
        assert offsets.grad.abs().sum() > 0  # the critic's does
        values.append(value.detach())
    for first, second in zip(*actor_grads, strict=True):
        torch.testing.assert_close(first, second)
    assert not torch.allclose(values[0], values[1])
    # Acting without the value reads only the actor's keys: an observation without the privileged one will do.
    actor_only = TensorDict({"cue": _grouped_obs(0.0)["cue"]}, batch_size=[6])
    action, _, value, _ = policy.act(actor_only, state, starts[0], deterministic=True, value=False)
    assert value is None and action.tolist() == policy.act(_grouped_obs(2.0), state, starts[0], True)[0].tolist()


def test_observation_groups_are_checked_naming_the_fix():
    """Test the refusals of impossible groups: critic keys without actor keys, a key the space lacks, groups on a Box
    observation, and a privileged critic asked to share the actor's recurrent core."""
    from rl_lightning.nets.recurrent import RecurrentActorCritic

    with pytest.raises(ValueError, match=r"critic_keys=\['offset'\] needs algo.encoder.actor_keys"):
        ActorCritic(GROUPED, gym.spaces.Discrete(4), encoder={"critic_keys": ["offset"]})
    with pytest.raises(ValueError, match=r"name \['force'\], which the observation space does not have"):
        ActorCritic(GROUPED, gym.spaces.Discrete(4), encoder={"actor_keys": ["cue"], "critic_keys": ["force"]})
    with pytest.raises(ValueError, match="pick keys of a Dict observation"):
        ActorCritic(BOX4, gym.spaces.Discrete(4), encoder=GROUPS)
    with pytest.raises(ValueError, match="set shared_core=False"):
        RecurrentActorCritic(GROUPED, gym.spaces.Discrete(4), encoder=GROUPS, shared_core=True)
    symmetric = ActorCritic(GROUPED, gym.spaces.Discrete(4), encoder={"actor_keys": ["cue"]})
    assert symmetric.critic_encoder is None and [v.key for v in symmetric.encoder.vectors] == ["cue"]


@pytest.mark.parametrize(
    ("actor", "critic", "match"),
    [(nn.Linear(4, 3), None, r"actor network must map \[B, 4\] .* to \[B, 2\]; on \[2, 4\] it gave \(2, 3\)"),
     (None, nn.Linear(4, 2), r"critic network must map \[B, 4\] .* to \[B, 1\]; on \[2, 4\] it gave \(2, 2\)"),
     (nn.Linear(5, 2), None, r"actor network .* it gave an error \(RuntimeError: mat1 and mat2")],
)  # fmt: skip
def test_a_users_networks_of_the_wrong_widths_are_refused_at_construction(actor, critic, match):
    """Test that a user's actor or critic that does not map [B, obs_dim] to the action's (or the value's) width is
    refused naming both (an actor of 3 logits for 2 actions sampled action 2, which was blamed on the env)."""
    with pytest.raises(ValueError, match=match):
        ActorCritic(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), actor=actor, critic=critic,
                    normalize_obs=False)  # fmt: skip
    squeezed = nn.Sequential(nn.Linear(4, 1), nn.Flatten(0))  # values as [B] are taken too
    assert ActorCritic(gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2), critic=squeezed).critic


def test_an_integer_box_action_space_is_refused_naming_multidiscrete():
    """Test that a Box of integers is refused (a Gaussian's float samples reached the env, which counted its own
    refusals as env faults), naming the MultiDiscrete space to give instead."""
    with pytest.raises(TypeError, match="integer Box action space .* MultiDiscrete space"):
        action_kind(gym.spaces.Box(0, 4, (2,), dtype=np.int64))
