"""Tests for object sets and the variation wrapper."""

import traceback

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from rl_lightning.envs import SHIPPED_OBJ_SETS, EnvGroup, ObjectSetWrapper, Variation, resolve_obj_sets


class ShapedCartPole(CartPoleEnv):
    """A user's CartPole with its own reward: the same physics, under another class name, and settings of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.bonus, self.goal = 0.0, (0.5, 0.5)  # a number, and a tuple a variation replaces whole


gym.register("test_object_sets/ShapedCartPole-v0", entry_point=ShapedCartPole, max_episode_steps=500)


def _cartpole(attrs, env_id="CartPole-v1"):
    sets = resolve_obj_sets(env_id, {"only": [{"attrs": attrs}]})
    env = ObjectSetWrapper(sets, "only")
    env.reset(seed=0)
    return env


@pytest.mark.parametrize("env_id", ["CartPole-v1", "test_object_sets/ShapedCartPole-v0"])
def test_cartpole_variation_attributes_read_back(env_id):
    """Test that a CartPole variation's attributes are set on the unwrapped env, derived ones too, also on a
    subclass of CartPole (its derived masses, which step reads, kept their defaults)."""
    env = _cartpole({"length": 1.0, "masspole": 0.2}, env_id)
    u = env.unwrapped
    assert u.length == 1.0 and u.masspole == 0.2
    assert u.polemass_length == pytest.approx(0.2 * 1.0)
    assert u.total_mass == pytest.approx(0.2 + u.masscart)


def test_cartpole_variation_changes_dynamics():
    """Test that a longer pole really changes the next state from the same state and action."""
    nexts = []
    for length in (0.25, 1.0):
        env = _cartpole({"length": length})
        env.unwrapped.state = np.array([0.0, 0.0, 0.1, 0.0])
        nexts.append(env.step(1)[0])
    # Angular acceleration scales with 1/length: the pole's angular velocity must differ.
    assert abs(nexts[0][3] - nexts[1][3]) > 1e-3


def test_mujoco_mass_scale_applied_and_restored():
    """Test that body_mass_scale scales one body's mass and other variations restore it."""
    sets = resolve_obj_sets(
        "InvertedPendulum-v5",
        {"s": [{"attrs": {"body_mass_scale": {"pole": 2.0}}}, {"name": "default"}]},
    )
    env = ObjectSetWrapper(sets, "s")
    model = env.unwrapped.model
    pole = model.body("pole").id
    default = float(env._defaults["body_mass_scale"][pole])
    seen = set()
    env.reset(seed=0)
    for _ in range(20):
        seen.add(round(float(model.body_mass[pole]) / default, 6))
        env.reset()
    assert seen == {1.0, 2.0}


def test_mujoco_mass_scale_changes_dynamics():
    """Test that a heavier pole changes InvertedPendulum's next state."""
    nexts = []
    for scale in (0.5, 2.0):
        sets = resolve_obj_sets("InvertedPendulum-v5", {"s": [{"attrs": {"body_mass_scale": {"pole": scale}}}]})
        env = ObjectSetWrapper(sets, "s")
        env.reset(seed=0)
        u = env.unwrapped
        u.set_state(np.array([0.0, 0.1]), np.zeros(2))
        nexts.append(env.step(np.array([0.5], dtype=np.float32))[0])
    assert not np.allclose(nexts[0], nexts[1])


def test_every_episode_draws_from_the_set_given():
    """Test that each reset draws its variation from the wrapper's object set, never from another."""
    sets = resolve_obj_sets("CartPole-v1", None)
    env = ObjectSetWrapper(sets, "test")
    test_names = {v.name for v in sets["test"]}
    drawn = {env.reset(seed=0)[1]["variation"]} | {env.reset()[1]["variation"] for _ in range(20)}
    assert drawn == test_names


def test_seed_range_is_respected():
    """Test that episode seeds are drawn from the variation's seed range, reproducibly."""
    sets = resolve_obj_sets("CartPole-v1", {"s": [{"seeds": [7, 8]}]})
    env = ObjectSetWrapper(sets, "s")
    first = env.reset(seed=0)[0]
    again = env.reset()[0]
    np.testing.assert_array_equal(first, again)  # only seed 7 can be drawn


def test_shipped_sets_cover_train_and_test():
    """Test that every shipped env has distinct non-empty train and test sets."""
    for env_id, sets in SHIPPED_OBJ_SETS.items():
        assert sets["train"] and sets["test"], env_id
        assert {v["name"] for v in sets["train"]}.isdisjoint({v["name"] for v in sets["test"]})


def test_unregistered_sets_warn_and_fall_back():
    """Test that an env without shipped sets gets train = test = itself with a warning."""
    with pytest.warns(UserWarning, match="no out-of-distribution"):
        sets = resolve_obj_sets("Acrobot-v1", None)
    assert sets["train"] == sets["test"] == [Variation(env_id="Acrobot-v1")]


@pytest.mark.parametrize(
    "obj_sets, match",
    [
        ({"train": []}, "non-empty list"),
        ({"train": [{"atrs": {}}]}, "Unknown key"),
        ({"train": [{"seeds": [5, 1]}]}, "low < high"),
        ({"train": [{"seeds": "0,100"}]}, r"range \[low, high\) of integers, 0 <= low < high <= 2\*\*32; got '0,100'"),
        ({"train": [{"seeds": 7}]}, "got 7"),
        ({"train": [{"seeds": [0.5, 10.7]}]}, r"got \[0.5, 10.7\]"),  # were truncated to (0, 10)
        ({"train": [{"seeds": [-100, -50]}]}, "0 <= low"),  # failed at the env's reset, as an env fault
        ({"train": [{"seeds": [0, 2**64]}]}, "high <= 2"),
        ({"train": [{"attrs": ["length", 0.5]}]}, r"Variation attrs must map names to values, got \['length', 0.5\]"),
        ({"train": [{"make_kwargs": [1, 2]}]}, "Variation make_kwargs must map names to values"),
        ({"train": [{"attrs": {1: 0.5}}]}, r"attrs must map names to values, got \{1: 0.5\}"),
        ({"train": ["length"]}, "mapping or a Variation"),
    ],
)
def test_bad_object_sets_rejected(obj_sets, match):
    """Test that malformed object sets raise errors that name the problem."""
    with pytest.raises((ValueError, TypeError), match=match):
        resolve_obj_sets("CartPole-v1", obj_sets)


def test_unknown_attribute_rejected():
    """Test that overriding an attribute the env lacks fails with its name."""
    with pytest.raises(ValueError, match="lenght"):
        EnvGroup("CartPole-v1", 1, obj_sets={"train": [{"attrs": {"lenght": 1.0}}]})


def test_a_value_a_numeric_attribute_cannot_take_is_refused_as_the_object_set_s_mistake():
    """Test that a string for a number fails when the envs are built, naming the variation, the attribute and its
    value (it was taken for an env fault: recreated three times, then an EnvFault, with last.ckpt written at step 0);
    numbers, arrays and a variation leaving the attribute alone still build."""
    obj_sets = {"train": [{"name": "long", "attrs": {"length": "abc"}}], "test": [{}]}
    with pytest.raises(ValueError, match="Variation 'long' sets 'length' to 'abc'; give a number: CartPoleEnv.length"):
        EnvGroup("CartPole-v1", 1, obj_sets=obj_sets)
    obj_sets = {"train": [{"attrs": {"length": 1}}, {"attrs": {"length": np.float32(0.7)}}], "test": [{}]}
    assert EnvGroup("CartPole-v1", 1, obj_sets=obj_sets).num_envs == 1


@pytest.mark.parametrize(
    "env_id, attrs, match",
    [
        ("CartPole-v1", {"length": [1.0]}, r"sets 'length' to \[1.0\]; give a number: CartPoleEnv.length is 0.5"),
        ("InvertedPendulum-v5", {"model.opt.gravity": [0, -9.81]}, r"give an array of shape \(3,\)"),
        ("InvertedPendulum-v5", {"body_mass_scale": {"polee": 2}}, "give body names of the model and factors.*polee"),
        ("InvertedPendulum-v5", {"body_mass_scale": {"pole": "double"}}, "ValueError: could not convert"),
        ("InvertedPendulum-v5", {"body_mass_scale": 2.0}, "sets 'body_mass_scale' to 2.0; give body names"),
    ],
)
def test_a_value_of_the_wrong_shape_or_an_unknown_body_is_refused_when_the_envs_are_built(env_id, attrs, match):
    """Test that a value that does not fit the attribute's shape, or a body mass scale naming a body the model lacks
    or giving no number, is refused when the envs are built, naming the variation (each failed at the first reset
    that drew it, taken for an env fault: retried, then an EnvFault, the run stopped mid-training)."""
    with pytest.raises(ValueError, match=match):
        EnvGroup(env_id, 1, obj_sets={"train": [{}], "test": [{"name": "bad", "attrs": attrs}]})


def test_a_variation_with_other_spaces_is_refused_when_the_envs_are_built():
    """Test that a variation whose env has other spaces is refused when the envs are built, naming it (it raised at
    the first reset that drew it, as an env fault: with restarts allowed it was dropped silently, never run)."""
    obj_sets = {"train": [{"name": "cartpole"}, {"name": "mountaincar", "env_id": "MountainCar-v0"}], "test": [{}]}
    with pytest.raises(ValueError, match="Variation 'mountaincar' changes the observation or action space"):
        EnvGroup("CartPole-v1", 2, obj_sets=obj_sets, max_env_restarts=10)


def test_a_variation_is_checked_against_the_env_it_builds_and_a_tuple_may_change_length():
    """Test that a held-out variation of another env (a subclass with settings of its own) is checked against that
    env, not the training set's (the training envs refused its attribute), and that an attribute holding a tuple takes
    one of another length (replaced whole; it was refused as an array of the wrong shape)."""
    shaped = "test_object_sets/ShapedCartPole-v0"
    obj_sets = {
        "train": [{}],
        "test": [{"name": "shaped", "env_id": shaped, "attrs": {"bonus": 1.0, "goal": [1, 2, 3]}}],
    }
    group = EnvGroup("CartPole-v1", 1, obj_sets=obj_sets, obj_set="test")
    group.reset(seed=0)
    unwrapped = group.env.envs.envs[0].unwrapped
    assert (unwrapped.bonus, list(unwrapped.goal)) == (1.0, [1, 2, 3])
    assert EnvGroup("CartPole-v1", 1, obj_sets=obj_sets).num_envs == 1  # the training set's envs build too


@pytest.mark.parametrize("seeds, expected", [([0, 1e5], (0, 100_000)), (np.array([3, 9]), (3, 9))])
def test_whole_number_seeds_of_other_types_are_taken(seeds, expected):
    """Test that seeds written as floats (YAML reads 1e5 as one) or a numpy array are taken as the integers they are."""
    assert Variation.from_any({"seeds": seeds}).seeds == expected


def test_dotted_path_overrides_mujoco_arrays_in_place():
    """Test that a dotted-path attribute writes a MuJoCo model field and is restored by other variations."""
    sets = resolve_obj_sets(
        "InvertedPendulum-v5",
        {"s": [{"name": "g", "attrs": {"model.opt.gravity": [0.0, 0.0, -20.0]}}, {"name": "default"}]},
    )
    env = ObjectSetWrapper(sets, "s")
    gravity = env.unwrapped.model.opt.gravity
    seen = set()
    env.reset(seed=0)
    for _ in range(20):
        seen.add((env.variation.name, float(gravity[2])))
        env.reset()
    assert seen == {("g", -20.0), ("default", -9.81)}


def _one_step(env_id, variation, set_state, action):
    sets = resolve_obj_sets(env_id, {"s": [variation]})
    env = ObjectSetWrapper(sets, "s")
    env.reset(seed=0)
    set_state(env.unwrapped)
    return env.step(action)[0]


@pytest.mark.parametrize("name", ["heavy_bob", "long_rod", "strong_gravity"])
def test_pendulum_test_variations_change_dynamics(name):
    """Test that each shipped Pendulum test variation changes the next state from the same state and torque."""

    def start(u):
        u.state = np.array([0.5, 0.0])

    (variation,) = [v for v in SHIPPED_OBJ_SETS["Pendulum-v1"]["test"] if v["name"] == name]
    default = SHIPPED_OBJ_SETS["Pendulum-v1"]["train"][0]
    action = np.array([1.0], dtype=np.float32)
    assert not np.allclose(
        _one_step("Pendulum-v1", variation, start, action), _one_step("Pendulum-v1", default, start, action)
    )


@pytest.mark.parametrize(
    "env_id, name",
    [
        (env_id, variation["name"])
        for env_id in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")
        for variation in SHIPPED_OBJ_SETS[env_id]["test"]
    ],
)
def test_mujoco_test_variations_change_dynamics(env_id, name):
    """Test that each shipped MuJoCo locomotion test variation changes where 20 identical steps lead."""

    def rollout(variation):
        sets = resolve_obj_sets(env_id, {"s": [variation]})
        env = ObjectSetWrapper(sets, "s")
        env.reset(seed=0)
        u = env.unwrapped
        u.set_state(u.init_qpos.copy(), u.init_qvel.copy())
        for _ in range(20):
            obs = env.step(np.full(env.action_space.shape, 0.8, dtype=np.float32))[0]
        return obs

    (variation,) = [v for v in SHIPPED_OBJ_SETS[env_id]["test"] if v["name"] == name]
    assert not np.allclose(rollout(variation), rollout(SHIPPED_OBJ_SETS[env_id]["train"][0]), atol=1e-4)


class _BuggyEnv(gym.Env):
    """An env whose constructor has a bug of its own (a TypeError that is no unexpected keyword)."""

    def __init__(self, size=3):
        self.limit = size + None


def test_a_type_error_inside_the_env_is_not_blamed_on_the_variations_make_kwargs():
    """Test that an env's own TypeError reaches the user as it is, with and without make_kwargs (it was reported as
    make_kwargs the env does not take, and its traceback lost), while an unexpected keyword is the variation's."""
    gym.register("rl_lightning_test/Buggy-v0", entry_point=_BuggyEnv)
    for make_kwargs in ({}, {"size": 4}):
        with pytest.raises(TypeError, match="unsupported operand") as info:
            ObjectSetWrapper({"train": [Variation("rl_lightning_test/Buggy-v0", make_kwargs)]}, "train")
        assert "self.limit = size + None" in "".join(traceback.format_exception(info.value))  # the env's own line
    with pytest.raises(ValueError, match=r"passes make_kwargs \{'bogus': 1\} that CartPole-v1 does not take"):
        ObjectSetWrapper({"train": [Variation("CartPole-v1", {"bogus": 1})]}, "train")


def test_a_variations_make_kwargs_win_over_the_runs_time_limit():
    """Test that a variation's own ``max_episode_steps`` (a held-out set of longer episodes) replaces the run's, in
    each set, where both were passed to ``gymnasium.make`` and raised "got multiple values"."""
    sets = {"train": [{}], "test": [{"make_kwargs": {"max_episode_steps": 7}}]}
    for obj_set, limit in (("train", 20), ("test", 7)):
        env = ObjectSetWrapper(resolve_obj_sets("CartPole-v1", sets), obj_set, max_episode_steps=20)
        env.reset(seed=0)
        steps, terminated, truncated = 0, False, False
        while not (terminated or truncated):
            _, _, terminated, truncated, _ = env.step(steps % 2)  # alternating pushes keep the pole up past 20 steps
            steps += 1
        assert truncated and steps == limit
