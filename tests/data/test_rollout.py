"""The one rollout loop: [T, N] tensors from any backend, truncation bootstraps, a policy's state carried."""

from __future__ import annotations

import pytest
import torch

from rl_lightning import RolloutDataModule
from rl_lightning.data import DataCounters, RolloutDataset
from rl_lightning.envs import EnvGroup
from rl_lightning.nets import ActorCritic
from tests.conftest import SCRIPTED_ID, SCRIPTED_SETS, ObsValuePolicy
from tests.helpers import count_envs, fit_and_test, tiny_ppo, tiny_rollout_data


def _dataset(policy, rollout_steps=6, num_envs=2, max_episode_steps=None, envs=None):
    envs = envs or EnvGroup(SCRIPTED_ID, num_envs, obj_sets=SCRIPTED_SETS, max_episode_steps=max_episode_steps)
    return RolloutDataset(envs, policy, rollout_steps, DataCounters(), reset_seed=0)


def test_a_rollout_is_one_batch_of_time_by_env_tensors_and_is_counted():
    """Test that one iteration yields the rollout once as a [T, N] TensorDict with the loop's keys, and counts it."""
    dataset = _dataset(ObsValuePolicy(), rollout_steps=6, num_envs=2)
    batches = list(dataset)
    assert len(batches) == len(dataset) == 1
    rollout = batches[0]
    assert rollout.batch_size == torch.Size([6, 2]) and rollout["obs"].shape == (6, 2, 1)
    keys = {"obs", "action", "log_prob", "value", "next_value", "reward", "terminated", "truncated", "episode_start"}
    assert set(rollout.keys()) == keys  # no "state": the policy has no memory
    assert rollout["obs"][:, 0, 0].tolist() == [0, 1, 2, 3, 4, 0]  # the scripted episode ends after 5 steps
    assert rollout["episode_start"][:, 0].tolist() == [True, False, False, False, False, True]
    assert dataset.counters.env_steps == 12 and dataset.counters.iterations == 1
    assert dataset.last_collection.env_steps == 12 and len(dataset.last_collection.episodes) == 2


@pytest.mark.parametrize("limit, after", [(3, 1.0), (None, 4.0)])
def test_next_value_is_the_final_observations_value_where_the_time_limit_cut(limit, after):
    """Test that a truncated step's next value is V(final obs) (= obs 3), not the next episode's first (obs 0), and
    that a step within an episode takes the next step's value."""
    rollout = _dataset(ObsValuePolicy(), rollout_steps=4, num_envs=1, max_episode_steps=limit).collect()
    assert rollout["truncated"][:, 0].tolist() == [False, False, limit == 3, False]
    # Step 2 reached obs 3: the time limit cut it (V = 3), or the episode went on (the next step's V = 3 too);
    # step 3 bootstraps from the observation after the rollout.
    assert rollout["next_value"][2, 0].item() == 3.0
    assert rollout["next_value"][3, 0].item() == after


class CountPolicy(torch.nn.Module):
    """Action 0; V(obs) = 10 * obs; no memory."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))

    def initial_state(self, batch_size, device=None):
        return None

    def value(self, obs, state=None, episode_start=None):
        return 10 * obs[:, 0]

    def act(self, obs, state=None, episode_start=None, deterministic=False, value=True):
        zeros = torch.zeros(obs.shape[0])
        return zeros.long(), zeros, self.value(obs), None


@pytest.mark.parametrize("terminate_at", [0, 3])
def test_a_batched_env_rollout_bootstraps_truncation_from_its_final_observation(terminate_at):
    """Test the same on a batched torch env: the step that reaches obs 3 by the time limit takes V(obs 3) = 30; where
    it terminated there (the time limit reports it too) no bootstrap is taken, and the rollout stays a [T, N] batch
    on the env's device."""
    rollout = _dataset(CountPolicy(), 6, envs=count_envs(2, terminate_at)).collect()
    assert rollout.device == torch.device("cpu") and rollout.batch_size == (6, 2)
    assert rollout["obs"][:, 0, 0].tolist() == [0, 1, 2, 0, 1, 2]
    end = 0 if terminate_at else 30  # a terminated step keeps the next step's value (obs 0), which GAE ignores
    assert rollout["next_value"][:, 0].tolist() == [10, 20, end, 10, 20, end]
    assert rollout["truncated"][:, 0].tolist() == [False, False, True] * 2
    assert rollout["terminated"][:, 0].tolist() == [False, False, bool(terminate_at)] * 2


def _host_reads(envs: EnvGroup, rollout_steps: int, monkeypatch) -> tuple[RolloutDataset, list[str]]:
    """A rollout dataset over ``envs`` after its second collection, and the host reads that collection made."""
    dataset = _dataset(ActorCritic(envs.observation_space, envs.action_space), rollout_steps, envs=envs)
    dataset.collect()  # the first reset out of the count
    reads = []
    with monkeypatch.context() as patch:
        for name in ("__bool__", "item", "tolist", "numpy", "cpu", "__float__", "__int__", "__index__"):
            original = getattr(torch.Tensor, name)

            def counted(self, *args, _name=name, _original=original, **kwargs):
                reads.append(_name)
                return _original(self, *args, **kwargs)

            patch.setattr(torch.Tensor, name, counted)
        dataset.collect()
    return dataset, reads


def test_a_batched_env_reporting_success_gives_success_rates_with_host_reads_a_constant(monkeypatch):
    """Test success on the tensor path: a user's batched env reporting ``success`` per env and step (a vector env of
    tensors, as ManiSkill's) gives the exact success rates (half its envs succeed) from one read per collection, as
    many reads for a rollout of 30 steps as for one of 6."""
    from tests.envs.batched_factory import make_success_count_envs

    def collected(rollout_steps: int):
        envs = EnvGroup("Count-v0", 4, obj_sets={"train": [{}]}, obj_set="train", backend="torch",
                        env_factory=make_success_count_envs)  # fmt: skip
        dataset, reads = _host_reads(envs, rollout_steps, monkeypatch)
        return dataset.last_collection.episodes, reads

    (short, short_reads), (long, long_reads) = collected(6), collected(30)
    assert sorted(short_reads) == sorted(long_reads)
    for episodes in (short, long):  # 3-step episodes: 2 per env in 6 steps, 10 in 30
        assert len(episodes) == 4 * (len(episodes) // 4) > 0
        assert episodes.successes == episodes.successes_once == [float(i % 2 == 0) for i in episodes.envs]


def test_host_reads_per_rollout_are_a_constant(monkeypatch):
    """Test that on a batched env a rollout of 32 steps reads as many values back to the host as one of 8 (none per
    step)."""

    def cartpoles() -> EnvGroup:
        return EnvGroup("CartPole-v1", 16, seed=0, max_episode_steps=5, backend="torch")  # episodes end every rollout

    short, long = _host_reads(cartpoles(), 8, monkeypatch)[1], _host_reads(cartpoles(), 32, monkeypatch)[1]
    assert sorted(short) == sorted(long)
    assert len(long) < 16


class StepsSinceStart(torch.nn.Module):
    """A stand-in recurrent policy whose state ``[B, 1]`` counts the steps since its last reset; records the state
    it acted with. V(obs, state) = 10 * state + obs, so a bootstrap value shows which state it was computed with."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(1))
        self.used: list[torch.Tensor] = []

    def initial_state(self, n, device=None):
        return torch.zeros(n, 1)

    def act(self, obs, state, episode_start, deterministic=False, value=True):
        state = state * (~episode_start).float()[:, None]
        self.used.append(state[:, 0].clone())
        zeros = torch.zeros(obs.shape[0])
        return zeros.long(), zeros, 10 * state[:, 0] + obs[:, 0], state + 1

    def value(self, obs, state, episode_start):
        return 10 * (state * (~episode_start).float()[:, None])[:, 0] + obs[:, 0]


@pytest.mark.parametrize("limit, ends_at", [(None, 5), (3, 3)])  # terminated after 5 steps, or truncated after 3
def test_a_policys_state_is_carried_reset_where_episodes_end_and_stored_per_step(limit, ends_at):
    """Test that the state a step acts with counts the steps since the episode began, in this rollout and the next,
    for terminated and truncated episodes alike, and that the rollout stores the state each step acted from."""
    policy = StepsSinceStart()
    dataset = _dataset(policy, rollout_steps=8, max_episode_steps=limit)
    first, second = dataset.collect(), dataset.collect()
    used = torch.stack(policy.used)[:, 0].tolist()
    assert used == [float(t % ends_at) for t in range(16)]
    starts = torch.cat([first["episode_start"], second["episode_start"]])[:, 0].tolist()
    assert starts == [t % ends_at == 0 for t in range(16)]
    assert first["state"].shape == (8, 2, 1) and not first["state"][0].any()
    # Stored before the step's own reset: the count since the episode began, or the old count where one begins.
    assert second["state"][0, :, 0].tolist() == [8 % ends_at] * 2


def test_a_truncated_episode_bootstraps_with_the_state_after_the_cut_step():
    """Test that V(final obs) of a time-limit cut uses the state after that step (10 * 3 + obs 3 = 33)."""
    rollout = _dataset(StepsSinceStart(), rollout_steps=4, num_envs=1, max_episode_steps=3).collect()
    assert rollout["next_value"][2, 0].item() == 33.0  # cut at obs 3, state 3
    assert rollout["next_value"][1, 0].item() == 22.0  # the next step's value (obs 2, state 2)


def test_a_dict_rollout_keeps_images_as_uint8_and_bootstraps_from_dict_final_observations():
    """Test that images stay uint8 in the rollout (one byte per pixel), vectors float32, and the values stored are
    the policy's on the stored observations."""
    envs = EnvGroup(
        "tests.envs.pixel_goal:pixel_goal/PixelGoal-v0", 2, obj_sets={"train": [{}], "test": [{}]}, max_episode_steps=3
    )
    torch.manual_seed(0)
    small_cnn = {"cnn_channels": [4], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 8}
    policy = ActorCritic(envs.observation_space, envs.action_space, encoder=small_cnn)
    rollout = _dataset(policy, 8, envs=envs).collect()
    image, position = rollout["obs", "image"], rollout["obs", "position"]
    assert image.dtype == torch.uint8 and image.shape == (8, 2, 5, 5, 1)
    assert image.numel() * image.element_size() == 16 * 25  # bytes: one per pixel
    assert position.dtype == torch.float32
    assert (image.flatten(2).max(2).values == 255).all()  # every stored frame shows its goal
    log_prob, _, value = policy.evaluate_actions(rollout["obs"], rollout["action"])
    torch.testing.assert_close(value, rollout["value"], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(log_prob, rollout["log_prob"], rtol=1e-5, atol=1e-5)
    assert rollout["truncated"].any() and torch.isfinite(rollout["next_value"]).all()
    envs.close()


def test_ppo_trains_and_evaluates_on_the_torch_backend():
    """Test that Trainer.fit runs PPO on the batched CartPole through the same loop, and tests both object sets."""
    data = tiny_rollout_data(backend="torch", num_envs=64, eval_episodes=4)
    metrics = fit_and_test(tiny_ppo(total_timesteps=64 * 16 * 3), data)
    assert data.env_steps == 64 * 16 * 3
    assert metrics["eval/return_mean"] >= 1 and metrics["eval_ood/return_mean"] >= 1
    episodes = data.last_collection.episodes
    assert episodes.lengths and episodes.returns == [float(n) for n in episodes.lengths]


def test_a_rollout_of_no_steps_is_refused_naming_the_setting():
    """Test that rollout_steps=0 is refused when the dataset is built, not with an error from an empty stack."""
    envs = EnvGroup(SCRIPTED_ID, 2, obj_sets=SCRIPTED_SETS)
    with pytest.raises(ValueError, match="rollout_steps must be a positive integer, got 0"):
        RolloutDataset(envs, ObsValuePolicy(), 0, DataCounters(), reset_seed=0)


@pytest.mark.parametrize(("env_steps", "expected"), [(640, 7 + 640), (1_000_000, 7 + 4)])
def test_a_resumed_runs_training_seeds_stay_below_the_evaluation_seeds(env_steps, expected):
    """Test that the first reset of a resumed run's training envs is seeded by the env steps done, wrapped below the
    evaluation envs' seeds (seed + 1,000,000): at about 1M steps they replayed the evaluation's episodes."""
    from rl_lightning import RolloutDataModule

    data = RolloutDataModule(env_id="CartPole-v1", num_envs=4, seed=7)
    data.counters.env_steps = env_steps
    seeds = []
    data._train_stream = lambda seed: seeds.append(seed) or []  # the stream itself is not the point here
    data.train_dataloader()
    assert seeds == [expected] and expected + 4 <= 7 + 1_000_000


def test_an_object_set_whose_envs_have_other_spaces_is_refused_at_setup():
    """Test that a held-out set of another env's spaces is refused before any step, its envs closed: it trained,
    then failed at the first evaluation."""
    obj_sets = {"train": [{}], "test": [{"env_id": "Acrobot-v1"}]}
    data = RolloutDataModule(env_id="CartPole-v1", num_envs=2, rollout_steps=8, obj_sets=obj_sets)
    with pytest.raises(ValueError, match=r"'test' builds envs of Box\(6,\) observations, Discrete\(3\) actions"):
        data.setup("fit")
    assert data.train_envs is None and not data.eval_envs


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"train_obj_set": ["train"]}, r"train_obj_set: unknown object set \['train'\].*train_obj_set takes one name"),
        ({"obj_sets": {"train": [{}], "test": [{"env_id": "CartPol-v1"}]}}, "obj_sets.test: .*'CartPol-v1'.*Did you"),
    ],
)
def test_an_object_set_name_of_the_wrong_type_or_a_variation_s_unknown_env_id_is_refused(kwargs, message):
    """Test that these are refused at construction with the fix (they raised a TypeError of an unhashable list,
    and gymnasium's NameNotFound when the envs were built)."""
    with pytest.raises(ValueError, match=message):
        RolloutDataModule(env_id="CartPole-v1", num_envs=2, rollout_steps=8, **kwargs)


def test_a_set_the_run_never_builds_is_not_checked():
    """Test that an object set outside train_obj_set and eval_obj_sets is left alone (its ids are not imported)."""
    obj_sets = {"train": [{}], "test": [{}], "spare": [{"env_id": "not_a_module:Spare-v0"}]}
    data = RolloutDataModule(env_id="CartPole-v1", num_envs=2, rollout_steps=8, obj_sets=obj_sets)
    assert sorted(data.obj_sets) == ["spare", "test", "train"]
