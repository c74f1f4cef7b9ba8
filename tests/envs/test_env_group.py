"""The one env contract: every backend steps as a batched env of tensors.

With full final observations and statistics, whatever the backend.
"""

import math
import multiprocessing
import sys
import time

import gymnasium as gym
import lightning.pytorch as pl
import numpy as np
import pytest
import torch

from rl_lightning import SAC
from rl_lightning.envs import SHIPPED_OBJ_SETS, EnvGroup, TorchVectorEnv
from rl_lightning.faults import NumericalFault
from tests.conftest import SCRIPTED_ID, SCRIPTED_SETS
from tests.helpers import REPLAY_STEPS, tiny_replay_data


def _zeros(n: int) -> torch.Tensor:
    return torch.zeros(n, dtype=torch.int64)


def test_episode_statistics_on_scripted_env():
    """Test that returns, lengths and success of completed episodes are exact, in step order."""
    group = EnvGroup(SCRIPTED_ID, 2, obj_sets=SCRIPTED_SETS)
    group.reset()
    for _ in range(10):
        group.step(_zeros(2))
    stats = group.pop_stats()
    # Episodes of 5 steps with rewards 1..5: return 15; two per env in 10 steps.
    assert stats.returns == [15.0] * 4
    assert stats.lengths == [5] * 4
    assert stats.successes == [0.0] * 4  # length 5 is odd: reported, not successful
    assert stats.envs == [0, 1, 0, 1]
    assert len(group.pop_stats()) == 0


def test_a_step_is_tensors_and_truncation_keeps_the_final_observation():
    """Test that a step returns tensors, and a truncated episode reports truncated and its true final observation in
    the full final_obs batch, while obs holds the next episode's first (same-step autoreset)."""
    group = EnvGroup(SCRIPTED_ID, 1, obj_sets=SCRIPTED_SETS, max_episode_steps=3)
    obs = group.reset()
    assert isinstance(obs, torch.Tensor) and obs.dtype == torch.float32 and group.device == torch.device("cpu")
    for t in range(2):
        step = group.step(_zeros(1))
        assert not step.truncated[0] and not step.done[0] and step.final_obs[0, 0] == t + 1
        assert step.cut is None and step.reward.dtype == torch.float32
    step = group.step(_zeros(1))
    assert step.truncated[0] and not step.terminated[0] and step.done[0]
    assert step.final_obs[0, 0] == 3.0  # the state the time limit cut off
    assert step.obs[0, 0] == 0.0  # the next episode's first state
    assert group.pop_stats().lengths == [3]


def test_test_set_is_applied_to_envs():
    """Test that a group on the test set runs the test variation (4-step, successful episodes)."""
    group = EnvGroup(SCRIPTED_ID, 1, obj_set="test", obj_sets=SCRIPTED_SETS)
    group.reset()
    for _ in range(4):
        group.step(_zeros(1))
    stats = group.pop_stats()
    assert stats.lengths == [4] and stats.successes == [1.0]


def test_async_vectorization_matches_sync():
    """Test that async vectorization gives the same observations as sync."""
    results = []
    for mode in ("sync", "async"):
        group = EnvGroup("CartPole-v1", 2, vectorization=mode, seed=3)
        obs = [group.reset()]
        for _ in range(5):
            obs.append(group.step(torch.tensor([0, 1])).obs)
        group.close()
        results.append(torch.stack(obs))
    torch.testing.assert_close(results[0], results[1])


@pytest.mark.parametrize("vectorization", ["sync", "async"])
@pytest.mark.parametrize("env", ["CartPole-v1", "pixel goal"])
def test_observations_stay_as_returned_when_the_envs_step_on(vectorization, env):
    """Test that the tensors of a reset and of each step (observations and final observations, vectors and a Dict's
    uint8 images) keep their values while the envs step on: gymnasium's vector env reuses its arrays (copy=False)."""
    kwargs = {"obj_sets": PIXEL_SETS, "max_episode_steps": 2} if env == "pixel goal" else {}
    group = EnvGroup(PIXEL_GOAL if env == "pixel goal" else env, 2, vectorization=vectorization, **kwargs)
    try:
        kept = [group.reset(seed=0)]
        for _ in range(6):
            step = group.step(_zeros(2).long())
            kept += [step.obs, step.final_obs]
        values = [x.clone() for x in kept]
        for _ in range(3):
            group.step(_zeros(2).long())
        for x, value in zip(kept, values, strict=True):
            assert (x == value).all()
        assert not all((a == b).all() for a, b in zip(values[1:-2:2], values[3::2], strict=True))  # the envs did move
    finally:
        group.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="workers are forked on Linux only")
def test_async_workers_are_forked_not_spawned_after_torchrl_import():
    """Test that async workers start forked (fast) although "spawn" is the default start method, as importing
    torchrl makes it in a process that has not fixed one yet (set here: an earlier test may have fixed "fork")."""
    import torchrl  # noqa: F401

    previous = multiprocessing.get_start_method(allow_none=True)
    multiprocessing.set_start_method("spawn", force=True)
    try:
        start = time.perf_counter()
        group = EnvGroup("CartPole-v1", 2, vectorization="async")
        group.reset(seed=0)
        seconds = time.perf_counter() - start
        kinds = {type(process).__name__ for process in group.env.envs.processes}
        group.close()
    finally:
        multiprocessing.set_start_method(previous, force=True)
    assert kinds == {"ForkProcess"}
    # Spawned workers re-import torch, Lightning and torchrl: tens of seconds here.
    assert seconds < 5.0, seconds


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"env_id": "CartPol-v1"}, "Unknown environment id 'CartPol-v1'.*CartPole-v1"),
        # A package's id without the package (ALE's, MiniGrid's register when imported): the spelling that imports it.
        ({"env_id": "ALE/NoSuchGame-v5"}, "Try env_id='ale_py:ALE/NoSuchGame-v5': 'ale_py' registers its ids"),
        ({"env_id": "MiniGrid-NoSuch-v0"}, "Try env_id='minigrid:MiniGrid-NoSuch-v0': 'minigrid' registers"),
        ({"env_id": "CartPole-v1", "num_envs": 0}, "num_envs must be a positive integer"),
        ({"env_id": "CartPole-v1", "obj_set": "valid"}, "Unknown object set 'valid'"),
        ({"env_id": "CartPole-v1", "vectorization": "threads"}, "vectorization must be one of"),
        ({"env_id": "CartPole-v1", "backend": "jax"}, "backend must be one of"),
        ({"env_id": "Acrobot-v1", "backend": "torch"}, "none of 'Acrobot-v1'"),
        ({"env_id": "CartPole-v1", "backend": "torch", "wrappers": ["gymnasium.wrappers.FlattenObservation"]},
         "wrappers=.*acts on single gymnasium envs"),
        ({"env_id": "CartPole-v1", "backend": "torch", "obs_bound": 10.0}, "obs_bound=10.0 acts on single"),
        ({"env_id": "CartPole-v1", "backend": "torch", "on_nonfinite": "skip"}, "on_nonfinite='skip'"),
        ({"env_id": "CartPole-v1", "env_factory": "tests.helpers.count_envs"}, "env_factory=.*backend='gymnasium'"),
    ],
)  # fmt: skip
def test_bad_input_rejected(kwargs, match):
    """Test that bad EnvGroup arguments raise before any env is built, naming the setting."""
    with pytest.raises(ValueError, match=match):
        EnvGroup(**kwargs)


def test_a_typo_in_a_package_id_gets_the_close_ids_once_the_package_registered_them():
    """Test that with ale_py imported (its ids registered), ALE/Pongg-v5 is answered with the close ids, not with the
    package-first spelling, which would fail the same way."""
    import ale_py

    from rl_lightning.envs.env_group import check_env_id

    gym.register_envs(ale_py)
    with pytest.raises(ValueError, match="Did you mean 'ALE/Pong-v5'") as info:
        check_env_id("ALE/Pongg-v5")
    assert "Try env_id=" not in str(info.value)


PIXEL_GOAL = "tests.envs.pixel_goal:pixel_goal/PixelGoal-v0"
PIXEL_SETS = {"train": [{}], "test": [{}]}


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_dict_observations_come_as_a_tensordict_of_batched_tensors(vectorization):
    """Test that a Dict env gives a TensorDict of one batched tensor per key, uint8 images as uint8, and the final
    observations as a full TensorDict too."""
    group = EnvGroup(PIXEL_GOAL, 3, obj_sets=PIXEL_SETS, vectorization=vectorization, max_episode_steps=2)
    try:
        obs = group.reset(seed=0)
        assert obs["image"].shape == (3, 5, 5, 1) and obs["image"].dtype == torch.uint8
        assert obs["position"].shape == (3, 2) and obs.batch_size == (3,)
        group.step(_zeros(3))
        step = group.step(_zeros(3))
        assert step.done.all()  # the time limit of 2 steps, if not the goal
        assert step.final_obs.batch_size == (3,) and step.final_obs["image"].shape == (3, 5, 5, 1)
    finally:
        group.close()


def test_only_float_keys_are_checked_and_a_nan_names_its_key():
    """Test that the NaN check skips the uint8 image and names the float key that held the NaN."""
    group = EnvGroup(PIXEL_GOAL, 2, obj_sets={"train": [{"make_kwargs": {"nan_at": 2}}], "test": [{}]})
    assert group.env.checks._paths == [("position",)]  # the image costs nothing
    group.reset(seed=0)
    group.step(_zeros(2))
    with pytest.raises(NumericalFault, match=r"observation\['position'\] value nan at index \(1,\)"):
        for _ in range(3):
            group.step(_zeros(2))
    group.close()


def test_obs_bound_clips_the_float_keys_only():
    """Test that obs_bound in clip mode clips the float key and leaves the 0..255 image as it is."""
    sets = {"train": [{"make_kwargs": {"position_scale": 10.0}}], "test": [{}]}
    group = EnvGroup(PIXEL_GOAL, 4, obj_sets=sets, obs_bound=2.0, obs_bound_mode="clip")
    obs = group.reset(seed=0)
    assert obs["position"].max() <= 2.0 and obs["image"].max() == 255
    group.close()


def test_actions_reach_the_env_as_it_takes_them():
    """Test that Box actions are clipped to the bounds and Discrete indices shifted by start, on the env's device."""
    box = EnvGroup("Pendulum-v1", 2)
    torch.testing.assert_close(box.env_action(torch.tensor([[5.0], [-0.5]])), torch.tensor([[2.0], [-0.5]]))
    box.close()
    shifted = EnvGroup("CartPole-v1", 2, wrappers=["tests.envs.test_env_group.StartAtOne"])
    assert shifted.env_action(torch.tensor([0, 1])).tolist() == [1, 2]
    shifted.reset(seed=0)
    shifted.step(torch.tensor([0, 1]))  # the env asserts that its actions are in its space
    shifted.close()


class StartAtOne(gym.ActionWrapper):
    """CartPole with its actions numbered from 1 (a Discrete space with ``start=1``)."""

    def __init__(self, env):
        super().__init__(env)
        self.action_space = gym.spaces.Discrete(2, start=1)

    def action(self, action):
        assert action in (1, 2), action
        return action - 1


# ---------------------------------------------------------------- the batched backend


def test_each_batched_episode_runs_one_shipped_variation():
    """Test that every env's parameters are one variation's, kept through its episode and drawn anew after it."""
    group = EnvGroup("CartPole-v1", 64, obj_set="train", seed=0, backend="torch")
    group.reset()
    variations = SHIPPED_OBJ_SETS["CartPole-v1"]["train"]
    lengths = sorted(v["attrs"]["length"] for v in variations)
    seen, redrawn = set(), 0
    for _ in range(200):
        before = group.env.params["length"].clone()
        step = group.step(torch.randint(0, 2, (64,)))
        after = group.env.params["length"]
        # a running episode keeps its variation; an ended one may draw another
        assert torch.equal(before[~step.done], after[~step.done])
        redrawn += int((before[step.done] != after[step.done]).sum())
        seen.update(group.variation.tolist())
        masspole = [variations[v]["attrs"]["masspole"] for v in group.variation.tolist()]
        assert torch.allclose(group.env.params["masspole"], torch.tensor(masspole))
    assert seen == {0, 1, 2} and redrawn > 0
    assert sorted(set(group.env.params["length"].tolist())) == pytest.approx(lengths)


def test_a_variation_silent_on_a_parameter_runs_the_default():
    """Test that a variation silent on a parameter runs the env's default (heavy_cart keeps length 0.5)."""
    group = EnvGroup("CartPole-v1", 256, obj_set="test", seed=1, backend="torch")
    group.reset()
    heavy = group.env.params["masscart"] == 5.0
    assert heavy.any() and (~heavy).any()
    assert torch.equal(group.env.params["length"][heavy], torch.full((int(heavy.sum()),), 0.5))


def test_batched_episode_statistics_are_read_once():
    """Test that pop_stats reports each ended episode once, its return the sum of its rewards (CartPole: its length)."""
    group = EnvGroup("CartPole-v1", 8, seed=0, backend="torch")
    group.reset()
    ends = 0
    for _ in range(100):
        ends += int(group.step(_zeros(8)).done.sum())
    stats = group.pop_stats()
    assert len(stats) == ends > 0
    assert stats.returns == [float(n) for n in stats.lengths]
    assert all(math.isnan(s) for s in stats.successes)
    assert len(group.pop_stats()) == 0


def test_pendulum_returns_are_the_sum_of_rewards():
    """Test that a truncated Pendulum episode's return is the sum of its 200 rewards."""
    group = EnvGroup("Pendulum-v1", 3, seed=0, backend="torch")
    group.reset()
    total = torch.zeros(3, dtype=torch.float64)
    for _ in range(200):
        step = group.step(torch.zeros(3, 1))
        total += step.reward
    stats = group.pop_stats()
    assert stats.lengths == [200] * 3 and step.truncated.all()
    assert stats.returns == pytest.approx(total.tolist())


def test_batched_non_finite_values_stop_the_run():
    """Test that a NaN observation of a batched env is counted on the device and raised by pop_stats, naming it."""
    sets = {"train": [{"attrs": {"g": float("nan")}}], "test": [{}]}
    group = EnvGroup("Pendulum-v1", 4, obj_sets=sets, seed=0, backend="torch")
    group.reset()
    group.step(torch.zeros(4, 1))
    with pytest.raises(NumericalFault, match="Pendulum-v1 .* returned a non-finite observation"):
        group.pop_stats()


def _wrong_env(num_envs: int, device: str):
    def make(env_id, n, dev, seed, limit):
        env = TorchVectorEnv(env_id, num_envs, seed=seed)
        env.device = torch.device(device)  # what a simulator built on another device reports
        return env

    return make


def test_bad_batched_settings_name_the_fix():
    """Test that unknown parameters, make_kwargs, other tasks, sizes and devices are refused before a step."""
    torch_env = {"backend": "torch"}
    with pytest.raises(ValueError, match=r"sets \['polelength'\].*has \['force_mag'"):
        EnvGroup("CartPole-v1", 2, obj_sets={"train": [{"attrs": {"polelength": 1.0}}], "test": [{}]}, **torch_env)
    with pytest.raises(ValueError, match="make_kwargs .* attrs"):
        EnvGroup("CartPole-v1", 2, obj_sets={"train": [{"make_kwargs": {"sutton_barto_reward": True}}]}, **torch_env)
    with pytest.raises(ValueError, match="names env_id 'Acrobot-v1'"):
        EnvGroup("CartPole-v1", 2, obj_sets={"train": [{"env_id": "Acrobot-v1"}]}, **torch_env)
    with pytest.raises(ValueError, match="holds 3 envs, but num_envs=2"):
        EnvGroup("CartPole-v1", 2, env_factory=_wrong_env(3, "cpu"), **torch_env)
    with pytest.raises(ValueError, match="lives on cuda:0, but the policy trains on cpu"):
        EnvGroup("CartPole-v1", 2, env_factory=_wrong_env(2, "cuda:0"), **torch_env)
    with pytest.raises(ValueError, match="parameters are numbers"):
        EnvGroup("CartPole-v1", 2, obj_sets={"train": [{"attrs": {"length": "long"}}]}, **torch_env)


class MidwaySuccessEnv(gym.Env):
    """Six-step episodes that report ``success`` at every step, true only at step ``success_at``, as ManiSkill's envs
    report it (the cube pushed onto the goal, then pushed past it)."""

    def __init__(self, success_at: int = 3):
        self.success_at = success_at
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t >= 6, False, {"success": self.t == self.success_at}


if "tests/MidwaySuccess-v0" not in gym.registry:
    gym.register("tests/MidwaySuccess-v0", entry_point=MidwaySuccessEnv)


@pytest.mark.parametrize("success_at, once", [(3, 1.0), (6, 1.0), (99, 0.0)])
def test_success_once_counts_any_step_and_success_rate_the_final_one(success_at, once):
    """Test ManiSkill's two success protocols from per-step ``success``: ``successes`` is the final step's
    (success_at_end), ``successes_once`` any step's, carried across pop_stats calls within an episode."""
    sets = {"train": [{"attrs": {"success_at": success_at}}]}
    group = EnvGroup("tests/MidwaySuccess-v0", 2, obj_sets=sets, obj_set="train")
    group.reset()
    for _ in range(4):
        group.step(_zeros(2))
    assert len(group.pop_stats()) == 0  # the successful step (3) is in this window, the end in the next
    for _ in range(2):
        group.step(_zeros(2))
    stats = group.pop_stats()
    assert stats.lengths == [6, 6]
    assert stats.successes == [float(success_at == 6)] * 2
    assert stats.successes_once == [once] * 2
    # An env that reports success only at episode ends (is_success): both protocols read the same.
    scripted = EnvGroup(SCRIPTED_ID, 1, obj_set="test", obj_sets=SCRIPTED_SETS)
    scripted.reset()
    for _ in range(4):
        scripted.step(_zeros(1))
    ended = scripted.pop_stats()
    assert ended.successes == ended.successes_once == [1.0]


class _Float64Obs(TorchVectorEnv):
    """The batched dynamics observed in float64, as EnvPool's MuJoCo envs (and some simulators) return them."""

    def reset(self, **kwargs):
        obs, info = super().reset(**kwargs)
        return obs.double(), info

    def step(self, actions):
        obs, reward, terminated, truncated, info = super().step(actions)
        return obs.double(), reward, terminated, truncated, {**info, "final_obs": info["final_obs"].double()}


def float64_pendulums(env_id, num_envs, device, seed, max_episode_steps):
    """A factory of :class:`_Float64Obs` (importable: a data module keeps it by its path)."""
    return _Float64Obs(env_id, num_envs, device=device, seed=seed, max_episode_steps=max_episode_steps)


def test_float64_observations_of_a_batched_env_come_as_float32_and_sac_trains_on_them():
    """Test that a batched env's float64 observations reach the policy and the replay buffer in float32, as the
    gymnasium backend's do: SAC stopped at its first update ("Input dtypes must be the same") on EnvPool's MuJoCo."""
    group = EnvGroup("Pendulum-v1", 3, backend="torch", env_factory=float64_pendulums, max_episode_steps=5)
    assert group.reset().dtype == torch.float32
    steps = [group.step(torch.zeros(3, 1)) for _ in range(5)]
    assert all(s.obs.dtype == s.final_obs.dtype == torch.float32 for s in steps) and bool(steps[-1].done.all())
    data = tiny_replay_data("Pendulum-v1", backend="torch", env_factory=float64_pendulums)
    model = SAC(total_timesteps=2 * REPLAY_STEPS, hidden_sizes=(16, 16))
    trainer = pl.Trainer(max_epochs=-1, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    trainer.fit(model, data)
    assert data.env_steps == 2 * REPLAY_STEPS and trainer.global_step > 0
