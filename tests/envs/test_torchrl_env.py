"""A user's batched env on the tensor path: a torchrl EnvBase behind the vector-env interface, and env.env_factory."""

from __future__ import annotations

import types

import gymnasium as gym
import pytest
import torch
from torchrl.data import Categorical

from rl_lightning.envs import EnvGroup
from rl_lightning.envs.torchrl_env import TorchRLVectorEnv
from tests.envs.batched_factory import LIMIT, CountEnv
from tests.helpers import fit_and_test, tiny_ppo, tiny_rollout_data

FACTORY = "tests.envs.batched_factory.make_count_envs"
PLAIN = {"train": [{}], "test": [{}]}


def test_a_torchrl_env_steps_with_same_step_restarts_and_true_final_observations():
    """Test that a truncated env returns its last observation as final_obs and its fresh start as obs, same step."""
    env = TorchRLVectorEnv(CountEnv(2))
    assert env.num_envs == 2 and env.single_action_space.n == 2 and env.single_observation_space.shape == (1,)
    obs, _ = env.reset(seed=3)
    assert env.env.seeds == [3] and obs.tolist() == [[0.0], [0.0]]
    seen = []
    for _ in range(2 * LIMIT):
        obs, reward, terminated, truncated, info = env.step(torch.zeros(2, dtype=torch.long))
        seen.append((obs[0, 0].item(), info["final_obs"][0, 0].item(), truncated[0].item()))
        assert reward.tolist() == [1.0, 1.0] and not terminated.any()
        assert torch.equal(info["_final_obs"], truncated)
    assert seen == [(1, 1, False), (2, 2, False), (0, 3, True)] * 2


def test_a_torchrl_env_with_a_nested_batch_is_refused_with_the_fix():
    """Test that a torchrl env of batch_size [2, 2] is refused, naming batch_size=[num_envs]."""
    from types import SimpleNamespace

    with pytest.raises(ValueError, match=r"batch_size \[2, 2\].*batch_size=\[num_envs\]"):
        TorchRLVectorEnv(SimpleNamespace(batch_size=torch.Size([2, 2])))  # what a 2 x 2 grid of envs reports


def test_ppo_trains_on_a_users_torchrl_env_named_in_config():
    """Test that RolloutDataModule(backend='torch', env_factory=path) builds the user's env and PPO fits and tests
    on it, the truncated episodes of LIMIT steps counted as episodes."""
    data = tiny_rollout_data(env_id="Count-v0", backend="torch", env_factory=FACTORY, num_envs=4, obj_sets=PLAIN,
                             eval_episodes=2)  # fmt: skip
    metrics = fit_and_test(tiny_ppo(total_timesteps=4 * 16 * 2), data)
    assert isinstance(data.train_envs.env, TorchRLVectorEnv)
    assert data.last_collection.episodes.lengths and set(data.last_collection.episodes.lengths) == {LIMIT}
    assert metrics["eval/return_mean"] == LIMIT and metrics["eval_ood/return_mean"] == LIMIT


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"backend": "gymnasium", "env_factory": FACTORY}, "backend='gymnasium' does not step.*drop env_factory"),
        ({"backend": "torch", "env_factory": "no_pkg.sim.make"}, "'no_pkg.sim.make' cannot be imported"),
        ({"backend": "torch", "env_factory": "tests.envs.batched_factory.LIMIT"}, "is not a callable"),
    ],
)
def test_bad_factories_are_refused_at_construction(kwargs, match):
    """Test that a factory without the torch backend, an unimportable path and a non-callable are refused."""
    with pytest.raises(ValueError, match=match):
        tiny_rollout_data(env_id="Count-v0", obj_sets=PLAIN, **kwargs)


@pytest.mark.parametrize(
    "factory, match",
    [("make_three_envs", "holds 3 envs, but num_envs=4"), ("make_nothing", "returned dict; the tensor path steps")],
)
def test_factories_returning_the_wrong_batch_are_refused_before_any_step(factory, match):
    """Test that a batch of the wrong size and a non-env are refused when the envs are built, naming the fix."""
    with pytest.raises(ValueError, match=match):
        EnvGroup("Count-v0", 4, obj_sets=PLAIN, backend="torch", env_factory=f"tests.envs.batched_factory.{factory}")


def test_a_factory_is_taken_as_a_function_and_kept_by_its_import_path():
    """Test that the Python front door takes the simulator factory as a function object, keeps its import path in
    the saved settings (so checkpoints rebuild it), refuses a lambda or a local function, saying why, and warns
    about a script's own function (kept as __main__.name, which only that script can import)."""
    from tests.envs import batched_factory

    data = tiny_rollout_data(env_id="Count-v0", backend="torch", env_factory=batched_factory.make_count_envs,
                             num_envs=4, obj_sets=PLAIN)  # fmt: skip
    assert data.hparams.env_factory == "tests.envs.batched_factory.make_count_envs"
    data.setup("fit")
    assert data.train_envs.num_envs == 4 and isinstance(data.train_envs.env, TorchRLVectorEnv)
    data.close()

    def local(env_id, num_envs, device, seed, max_episode_steps):
        return batched_factory.make_count_envs(env_id, num_envs, device, seed, max_episode_steps)

    for factory in (lambda *args: None, local):
        with pytest.raises(ValueError, match="cannot be kept in a checkpoint.*top level of a module"):
            tiny_rollout_data(env_id="Count-v0", backend="torch", env_factory=factory, obj_sets=PLAIN)
    made = batched_factory.make_count_envs  # a new function of the same code, as if from `python script.py`:
    script = types.FunctionType(made.__code__, made.__globals__, made.__name__, made.__defaults__, made.__closure__)
    script.__module__ = "__main__"
    with pytest.warns(UserWarning, match=r"as __main__\.make_count_envs.*`rl-lightning test` and `play`.*a module"):
        tiny_rollout_data(env_id="Count-v0", backend="torch", env_factory=script, obj_sets=PLAIN)


def test_a_torchrl_envs_success_key_reaches_the_step_info():
    """Test that a torchrl env reporting ``success`` (a task's per-env flag) hands it on as ``info["success"]``, which
    EnvGroup reads into success_rate and success_once."""
    from torchrl.data import Categorical

    class Succeeding(CountEnv):
        def __init__(self, n):
            super().__init__(n)
            self.full_observation_spec["success"] = Categorical(2, shape=(n, 1), dtype=torch.bool)

        def _reset(self, tensordict):
            return super()._reset(tensordict).set("success", torch.zeros_like(self.count, dtype=torch.bool))

        def _step(self, tensordict):
            return super()._step(tensordict).set("success", self.count >= 2)

    env = TorchRLVectorEnv(Succeeding(2))
    env.reset(seed=0)
    flags = [env.step(torch.zeros(2, dtype=torch.long))[4]["success"].tolist() for _ in range(LIMIT)]
    assert flags == [[False, False], [True, True], [True, True]]


def test_torchrl_specs_map_onto_gymnasium_spaces_by_their_class():
    """Test that Categorical and OneHot specs become Discrete, MultiCategorical MultiDiscrete and Binary MultiBinary
    (they were integer Boxes over the whole int64 or int8 range: PPO fit a Gaussian and the env got actions such as -3
    for two categories), and bounded specs a Box with the first env's bounds."""
    from torchrl.data import Binary, Bounded, MultiCategorical, OneHot

    from rl_lightning.envs.torchrl_env import _space

    assert _space(Categorical(3, shape=(2,)), 1) == _space(OneHot(3, shape=(2, 3)), 1) == gym.spaces.Discrete(3)
    assert _space(MultiCategorical([2, 3], shape=(2, 2)), 1) == gym.spaces.MultiDiscrete([2, 3])
    assert _space(Binary(n=3, shape=(2, 3)), 1) == gym.spaces.MultiBinary(3)
    box = _space(Bounded(-1.0, 2.0, shape=(2, 3)), 1)
    assert isinstance(box, gym.spaces.Box) and box.shape == (3,) and box.low.tolist() == [-1.0] * 3


@pytest.mark.parametrize("factory", ["make_legacy_keys_envs", "make_success_at_end_envs"])
def test_an_env_in_gymnasium_029_keys_gives_its_true_final_observations_and_success(factory):
    """Test that an env reporting its ends as ManiSkill3's ManiSkillVectorEnv does (final_observation and final_info,
    gymnasium 0.29's keys; info["success"] of the next episodes, or success in final_info only) gives each ended
    episode its last observation and its own success: the group fell back to the next episode's first observation
    (bootstrapping truncated episodes, and replay's next_obs, from it) and counted every episode a failure."""
    group = EnvGroup(
        "Count-v0", 4, obj_sets=PLAIN, backend="torch", env_factory=f"tests.envs.batched_factory.{factory}"
    )
    group.reset(seed=0)
    step = [group.step(torch.zeros(4, dtype=torch.long)) for _ in range(LIMIT)][-1]
    assert step.done.all() and step.final_obs.flatten().tolist() == [LIMIT] * 4 and not step.obs.any()
    stats = group.pop_stats()
    assert stats.successes == [1.0, 0.0, 1.0, 0.0] and stats.successes_once == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize(
    "mode, match",
    [
        ("numpy", r"returned observations as ndarray of shape \(4, 1\) \(float32\); the env contract asks for a torch"),
        (
            "wide",
            r"returned observations as Tensor of shape \(4, 2\) \(torch.float32\); .*tensor of shape \(4, 1\) on cpu",
        ),
        ("reward_column", r"returned rewards as Tensor of shape \(4, 1\) \(torch.float32\); .*tensor of shape \(4,\)"),
        ("uint8_dones", r"returned terminated as Tensor of shape \(4,\) \(torch.uint8\); .*\(4,\) \(torch.bool\) on"),
        ("no_final", r"ended episodes without info\['final_obs'\] \(what each env reached"),
    ],
)
def test_a_users_env_that_breaks_the_contract_is_refused_naming_what_it_returned(mode, match, monkeypatch):
    """Test that observations that are no tensor or of another shape than the space's, rewards of shape [N, 1], uint8
    dones and episodes that end without final observations are refused naming the env, what it returned and the
    contract (they crashed deep in the policy or the statistics; uint8 dones negated to 254 and 255 in GAE and trained
    silently on returns of 1e16; without final_obs, it trained on the next episode's start)."""
    from tests.envs import batched_factory

    monkeypatch.setattr(batched_factory, "CONTRACT_MODE", mode)
    group = EnvGroup("Count-v0", 4, obj_sets=PLAIN, backend="torch",
                     env_factory="tests.envs.batched_factory.make_broken_contract_envs")  # fmt: skip
    with pytest.raises(ValueError, match=r"The batched Count-v0 \(object set 'train'\) " + match):
        group.reset(seed=0)
        for _ in range(LIMIT):
            group.step(torch.zeros(4, dtype=torch.long))


def test_a_callable_object_as_factory_is_refused_naming_why():
    """Test that a functools.partial, an instance or a method as env_factory is refused: it was kept under its
    class's (or functools') path, and a resume or `rl-lightning test` rebuilt another simulator or crashed."""
    import functools
    import math

    from rl_lightning.envs.torchrl_env import factory_path
    from tests.envs import batched_factory

    # Methods were kept as Factory.make: `rl-lightning test` called an instance's without its instance, and a static
    # method's path named no module.
    for factory in (functools.partial(batched_factory.make_count_envs), batched_factory.Factory(),
                    batched_factory.Factory().make, batched_factory.Factory.make_static):  # fmt: skip
        with pytest.raises(
            ValueError, match="cannot be kept in a checkpoint.*a callable object .* without its arguments"
        ):
            tiny_rollout_data(env_id="Count-v0", backend="torch", env_factory=factory, obj_sets=PLAIN)
    assert factory_path(math.hypot) == "math.hypot"  # a function of a C module has an import path


def test_play_of_a_checkpoint_trained_on_a_users_simulator_names_the_command_that_evaluates_it(tmp_path, capsys):
    """Test that `rl-lightning play` of an env_factory checkpoint says play steps one gymnasium env and names `test`
    (it said it could not make the env id, and to install its dependencies)."""
    from rl_lightning.launch import play
    from tests.helpers import quiet_trainer

    trainer = quiet_trainer(tmp_path, max_epochs=1)
    trainer.fit(tiny_ppo(), tiny_rollout_data(env_id="Count-v0", backend="torch", env_factory=FACTORY, num_envs=4,
                                              obj_sets=PLAIN))  # fmt: skip
    trainer.save_checkpoint(tmp_path / "factory.ckpt")
    with pytest.raises(SystemExit) as info:
        play.main([str(tmp_path / "factory.ckpt")])
    message = capsys.readouterr().err
    assert info.value.code == 2 and f"trained on env_factory={FACTORY}, a batched simulator" in message
    assert "rl-lightning test --ckpt_path" in message


def serial_cartpoles(env_id, num_envs, device, seed, max_episode_steps):
    """torchrl's ``SerialEnv`` of gymnasium CartPoles, returned unstarted (as the refusal of a nested batch advises)."""
    from torchrl.envs import GymEnv, SerialEnv

    return SerialEnv(num_envs, lambda: GymEnv("CartPole-v1"))


def test_an_unstarted_serial_env_from_a_factory_steps():
    """Test that a factory's ``SerialEnv``, which starts its workers at the first reset, is built and stepped: looking
    up its ``params`` before that raised RecursionError (``ParallelEnv``: "closed/non started environments")."""
    plain = {"train": [{}], "test": [{}]}
    group = EnvGroup("CartPole-v1", 2, backend="torch", env_factory=serial_cartpoles, obj_sets=plain)
    try:
        assert group.action_space == gym.spaces.Discrete(2) and group.reset().shape == (2, 4)
        assert group.step(torch.zeros(2, dtype=torch.int64)).obs.shape == (2, 4)
    finally:
        group.close()
