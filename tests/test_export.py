"""Exported actors act as the checkpoint they came from, with nothing of the training stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import lightning.pytorch as pl
import numpy as np
import onnxruntime  # a dev dependency (ONNX Runtime runs the exported files as a deployment would)
import pytest
import torch

from rl_lightning import DQN, PPO, SAC
from rl_lightning.algos import load_checkpoint
from rl_lightning.export import METADATA_KEY, export_policy
from tests.helpers import quiet_trainer, tiny_replay_data, tiny_rollout_data

# Loading TorchScript is what a deployment does; PyTorch marks torch.jit deprecated.
pytestmark = pytest.mark.filterwarnings("ignore:.*torch.jit.*deprecated:DeprecationWarning")


CASES = {
    "ppo_discrete": (PPO, lambda: tiny_rollout_data()),
    "ppo_continuous": (PPO, lambda: tiny_rollout_data(env_id="Pendulum-v1")),
    "sac": (SAC, lambda: tiny_replay_data("Pendulum-v1")),
    "dqn": (DQN, lambda: tiny_replay_data("CartPole-v1")),
}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """A checkpoint of each case after two short epochs of training (the normalizer has moved for PPO)."""
    paths = {}
    for name, (algo, data) in CASES.items():
        pl.seed_everything(0, verbose=False)  # the same networks whichever tests ran before
        root = tmp_path_factory.mktemp(name)
        trainer = quiet_trainer(root, max_epochs=2)
        model = algo(hidden_sizes=[16, 16])
        trainer.fit(model, data())
        paths[name] = str(root / f"{name}.ckpt")
        trainer.save_checkpoint(paths[name])
    return paths


def random_observations(model, n: int = 100) -> np.ndarray:
    """``n`` observations spread well beyond the training ones (the normalizer's clip is exercised too)."""
    shape = model.spaces[0].shape
    return (np.random.default_rng(0).standard_normal((n, *shape)) * 3).astype(np.float32)


def score_margin(model, obs: np.ndarray) -> np.ndarray:
    """The gap between the best and second-best action score (PPO's logits, DQN's Q-values)."""
    with torch.no_grad():
        obs_t = torch.from_numpy(obs)
        policy = model.policy
        scores = policy(obs_t) if isinstance(model, DQN) else policy.actor(policy.features(obs_t))
    top2 = scores.topk(2, dim=-1).values
    return (top2[:, 0] - top2[:, 1]).numpy()


def run_exported(path: str, fmt: str, obs: np.ndarray) -> np.ndarray:
    if fmt == "torchscript":
        return torch.jit.load(path)(torch.from_numpy(obs)).numpy()
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(["action"], {"obs": obs})[0]


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.parametrize("case", list(CASES))
def test_exported_actions_equal_the_checkpoints_deterministic_actions(checkpoints, case, fmt, tmp_path):
    model = load_checkpoint(checkpoints[case])
    assert type(model) is CASES[case][0]
    obs = random_observations(model)
    expected = model.predict(obs)  # the deterministic env actions of load_from_checkpoint
    path = str(tmp_path / f"actor.{'pt' if fmt == 'torchscript' else 'onnx'}")
    contract = export_policy(model, path, fmt)
    actions = run_exported(path, fmt, obs)
    assert actions.shape == expected.shape and actions.dtype == expected.dtype
    if model.spaces[1].shape == ():  # discrete: the same action ids
        assert actions.dtype == np.int64
        assert len(np.unique(expected)) > 1  # the observations reach more than one action
        if fmt == "torchscript":
            np.testing.assert_array_equal(actions, expected)
        else:
            # ONNX Runtime's GEMM rounds differently (and differently per CPU): an argmax may
            # flip where two action scores tie to float32 rounding, nowhere else.
            decisive = score_margin(model, obs) > 1e-5
            assert decisive.sum() >= 90
            np.testing.assert_array_equal(actions[decisive], expected[decisive])
    else:
        # TorchScript runs PyTorch's own kernels: bit-identical. ONNX Runtime has its own
        # GEMM and tanh: equal to float32 rounding.
        tol = 0 if fmt == "torchscript" else 1e-5
        np.testing.assert_allclose(actions, expected, rtol=tol, atol=tol)
        low, high = model.spaces[1].low, model.spaces[1].high
        assert (actions >= low).all() and (actions <= high).all()
    assert contract["inputs"] == [{"name": "obs", "dtype": "float32", "shape": ["batch", *model.spaces[0].shape]}]
    assert contract["format_version"] == 3 and "input" not in contract
    assert contract["algorithm"] == type(model).__name__
    single = run_exported(path, fmt, obs[:1])  # a batch of one works too
    np.testing.assert_allclose(single, expected[:1], rtol=1e-5, atol=1e-5)


def test_the_normalizer_is_inside_the_exported_actor(checkpoints, tmp_path):
    model = load_checkpoint(checkpoints["ppo_continuous"])
    normalizer = model.policy.normalizer
    assert not torch.allclose(normalizer.mean, torch.zeros_like(normalizer.mean))  # training moved it
    obs = random_observations(model)
    path = str(tmp_path / "actor.pt")
    export_policy(model, path, "torchscript")
    normalizer.mean.zero_()  # what an actor without the statistics would compute
    normalizer.var.fill_(1.0)
    assert not np.allclose(run_exported(path, "torchscript", obs), model.predict(obs), atol=1e-4)


_BLOCK_TRAINING_STACK = """
import sys
for name in ("lightning", "pytorch_lightning", "torchrl", "tensordict", "gymnasium", "rl_lightning"):
    sys.modules[name] = None  # importing any of them now fails
import json, numpy as np
obs = np.load(sys.argv[2])
if sys.argv[1].endswith(".onnx"):
    import onnxruntime
    session = onnxruntime.InferenceSession(sys.argv[1], providers=["CPUExecutionProvider"])
    meta = session.get_modelmeta().custom_metadata_map["rl_lightning"]
    action = session.run(["action"], {"obs": obs})[0]
else:
    import torch
    files = {"rl_lightning": ""}
    actor = torch.jit.load(sys.argv[1], _extra_files=files)
    meta = files["rl_lightning"]
    action = actor(torch.from_numpy(obs)).numpy()
np.save(sys.argv[3], action)
print(json.loads(meta)["output"]["dtype"])
"""


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_exported_actor_runs_without_lightning_torchrl_gymnasium_or_rl_lightning(checkpoints, fmt, tmp_path):
    model = load_checkpoint(checkpoints["sac"])
    obs = random_observations(model, 10)
    path = str(tmp_path / f"actor.{'pt' if fmt == 'torchscript' else 'onnx'}")
    export_policy(model, path, fmt)
    np.save(tmp_path / "obs.npy", obs)
    out = subprocess.run(
        [sys.executable, "-c", _BLOCK_TRAINING_STACK, path, str(tmp_path / "obs.npy"), str(tmp_path / "act.npy")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "float32"  # the contract travelled in the file
    np.testing.assert_allclose(np.load(tmp_path / "act.npy"), model.predict(obs), rtol=1e-5, atol=1e-5)


def test_a_failed_export_leaves_the_existing_file_as_it_was(checkpoints, tmp_path, monkeypatch):
    model = load_checkpoint(checkpoints["dqn"])
    path = tmp_path / "actor.pt"
    path.write_bytes(b"an earlier export")

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch.jit, "save", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        export_policy(model, path, "torchscript")
    assert path.read_bytes() == b"an earlier export"
    assert os.listdir(tmp_path) == ["actor.pt"]  # no temporary file left


def test_export_refuses_an_unknown_format_and_an_untrained_model(tmp_path):
    with pytest.raises(ValueError, match="torchscript, onnx"):
        export_policy(PPO(), tmp_path / "a.tflite", "tflite")
    with pytest.raises(ValueError, match="no policy to export yet"):
        export_policy(PPO(), tmp_path / "a.pt", "torchscript")
    assert not os.listdir(tmp_path)


def test_torchscript_file_holds_the_contract_as_strict_json_and_no_critic(checkpoints, tmp_path):
    model = load_checkpoint(checkpoints["ppo_discrete"])
    path = tmp_path / "actor.pt"
    export_policy(model, path, "torchscript")
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(f"extra/{METADATA_KEY}"))

        def refuse(constant):
            raise ValueError(f"{constant} is not JSON")

        meta = json.loads(archive.read(name), parse_constant=refuse)  # no Infinity/NaN, as strict readers need
    assert meta["output"] == {"name": "action", "dtype": "int64", "shape": ["batch"]}
    assert meta["action_space"] == {"type": "Discrete", "n": 2, "start": 0}
    assert meta["observation_space"]["high"][1] == "inf"  # CartPole's velocities are unbounded
    names = [name for name, _ in torch.jit.load(path).named_parameters()]
    assert names and not any("critic" in name for name in names)  # only what acting needs
    obs = random_observations(model)
    float64 = torch.jit.load(path)(torch.from_numpy(obs.astype(np.float64))).numpy()
    np.testing.assert_array_equal(float64, model.predict(obs.astype(np.float64)))  # as predict takes them


def test_obs_bound_clipping_travels_with_the_actor(checkpoints, tmp_path):
    """Test that a run's obs_bound (clip mode) is applied by the exported actor as evaluation applied it."""
    model = load_checkpoint(checkpoints["ppo_continuous"])
    obs = random_observations(model) * 10
    path = str(tmp_path / "actor.onnx")
    contract = export_policy(model, path, "onnx", obs_bound=2.0)
    assert contract["obs_bound"] == 2.0
    np.testing.assert_allclose(
        run_exported(path, "onnx", obs), model.predict(np.clip(obs, -2.0, 2.0)), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_array_equal(model.predict(obs, obs_bound=2.0), model.predict(np.clip(obs, -2.0, 2.0)))
    assert not np.allclose(run_exported(path, "onnx", obs), model.predict(obs), atol=1e-3)


ONE_SET = {"train": [{}], "test": [{}]}  # the tests' envs ship no object sets


def _fit_ppo(data, root, **model_kwargs):
    pl.seed_everything(0, verbose=False)
    trainer = quiet_trainer(root, max_epochs=2)
    model = PPO(hidden_sizes=[16, 16], **model_kwargs)
    trainer.fit(model, data)
    return model


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_a_dict_policy_with_a_uint8_image_exports_one_input_per_key_and_acts_as_predict(fmt, tmp_path):
    """Test the contract of a Dict policy (inputs named by key, the image as uint8) and its actions against predict."""
    data = tiny_rollout_data(
        env_id="tests.envs.pixel_goal:pixel_goal/PixelGoal-v0", obj_sets={"train": [{}], "test": [{}]}
    )
    encoder = {"cnn_channels": [4], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 16}
    model = _fit_ppo(data, tmp_path, encoder=encoder)
    space = model.spaces[0]
    space.seed(0)
    samples = [space.sample() for _ in range(64)]
    obs = {key: np.stack([s[key] for s in samples]) for key in space.spaces}
    expected = model.predict(obs)
    path = str(tmp_path / f"actor.{'pt' if fmt == 'torchscript' else 'onnx'}")
    contract = export_policy(model, path, fmt)
    assert contract["inputs"] == [
        {"name": "image", "dtype": "uint8", "shape": ["batch", 5, 5, 1]},
        {"name": "position", "dtype": "float32", "shape": ["batch", 2]},
    ]
    assert "input" not in contract
    if fmt == "torchscript":
        actions = torch.jit.load(path)(tuple(torch.from_numpy(obs[i["name"]]) for i in contract["inputs"])).numpy()
        np.testing.assert_array_equal(actions, expected)
    else:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        assert [(i.name, i.type) for i in session.get_inputs()] == [
            ("image", "tensor(uint8)"),
            ("position", "tensor(float)"),
        ]
        actions = session.run(["action"], obs)[0]
        assert (actions == expected).mean() >= 0.95  # an argmax may flip where two logits tie to rounding
    assert actions.dtype == np.int64 and actions.shape == (64,)
    assert len(np.unique(expected)) > 1


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_a_policy_with_a_privileged_critic_exports_and_predicts_from_the_actors_keys_only(fmt, tmp_path):
    """Test observation groups at deployment: the exported policy's only input is the actor's key (no critic weights
    in the file), and predict acts on observations without the privileged key, as the export does."""
    from tests.envs.privileged_task import ENV_ID

    data = tiny_rollout_data(env_id=f"tests.envs.privileged_task:{ENV_ID}", obj_sets={"train": [{}], "test": [{}]})
    model = _fit_ppo(data, tmp_path, encoder={"actor_keys": ["cue"], "critic_keys": ["cue", "offset"]})
    assert list(model.actor_observation_space.spaces) == ["cue"]
    cues = np.eye(4, dtype=np.float32)[np.arange(32) % 4]
    expected = model.predict({"cue": cues})
    assert expected.tolist() == model.predict({"cue": cues, "offset": np.full((32, 1), 5.0, np.float32)}).tolist()
    path = str(tmp_path / f"actor.{'pt' if fmt == 'torchscript' else 'onnx'}")
    contract = export_policy(model, path, fmt)
    assert contract["inputs"] == [{"name": "cue", "dtype": "float32", "shape": ["batch", 4]}]
    if fmt == "torchscript":
        actor = torch.jit.load(path)
        assert not any("critic" in name for name, _ in actor.named_parameters())
        actions = actor((torch.from_numpy(cues),)).numpy()
    else:
        session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
        assert [i.name for i in session.get_inputs()] == ["cue"]
        actions = session.run(["action"], {"cue": cues})[0]
    np.testing.assert_array_equal(actions, expected)


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
def test_multi_discrete_actions_export_as_int64_batch_by_n_with_the_spaces_start(fmt, tmp_path):
    """Test that a MultiDiscrete policy exports int64 [batch, n] env actions (start added), equal to predict."""
    data = tiny_rollout_data(
        env_id="tests.envs.match_task:match_task/MultiDiscrete-v0", obj_sets={"train": [{}], "test": [{}]}
    )
    model = _fit_ppo(data, tmp_path)
    obs = random_observations(model, 64)
    expected = model.predict(obs)
    assert expected.shape == (64, 3) and expected.min() < 0  # start=[1, 0, -2] shifts the env's values
    path = str(tmp_path / f"actor.{'pt' if fmt == 'torchscript' else 'onnx'}")
    contract = export_policy(model, path, fmt)
    assert contract["output"] == {"name": "action", "dtype": "int64", "shape": ["batch", 3]}
    actions = run_exported(path, fmt, obs)
    assert actions.dtype == np.int64
    assert (actions == expected).all(axis=1).mean() >= (1.0 if fmt == "torchscript" else 0.95)


def test_a_recurrent_dict_policy_exports_its_keys_and_state_and_acts_as_predict(tmp_path):
    """Test that a recurrent policy over Dict observations (an image and a vector) exports (it raised: the policy
    reshaped a dict as a tensor) and that the file's actions and states equal predict's, step after step."""
    data = tiny_rollout_data(
        env_id="tests.envs.pixel_goal:pixel_goal/PixelGoal-v0", obj_sets={"train": [{}], "test": [{}]}
    )
    encoder = {"cnn_channels": [4], "cnn_kernels": [2], "cnn_strides": [1], "cnn_features": 16}
    model = _fit_ppo(data, tmp_path, encoder=encoder, recurrent=True, recurrent_size=8, num_minibatches=1)
    path = str(tmp_path / "actor.pt")
    contract = export_policy(model, path, "torchscript")
    assert [i["name"] for i in contract["inputs"]] == ["image", "position"]
    assert contract["state"]["shape"] == ["batch", 2, 1, 8]
    actor, space = torch.jit.load(path), model.spaces[0]
    space.seed(0)
    state = exported_state = np.zeros((16, 2, 1, 8), np.float32)
    for _ in range(3):  # the state carries the steps before
        samples = [space.sample() for _ in range(16)]
        obs = {key: np.stack([s[key] for s in samples]) for key in space.spaces}
        action, state = model.predict(obs, state=state)
        inputs = tuple(torch.from_numpy(obs[i["name"]]) for i in contract["inputs"])
        exported, exported_state = (t.numpy() for t in actor(inputs, torch.from_numpy(exported_state)))
        np.testing.assert_array_equal(exported, action)
        np.testing.assert_allclose(exported_state, state, rtol=1e-6, atol=1e-6)
    assert np.abs(state).max() > 0.01


def _run_recurrent(path: str, fmt: str, obs: np.ndarray, state: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if fmt == "torchscript":
        action, state_out = torch.jit.load(path)(torch.from_numpy(obs), torch.from_numpy(state))
        return action.numpy(), state_out.numpy()
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return tuple(session.run(["action", "state_out"], {"obs": obs, "state_in": state}))


# Two cases cover both formats, both cells and both core layouts (the suite's time budget is tight).
@pytest.mark.parametrize("cell, shared_core, fmt", [("lstm", False, "onnx"), ("gru", True, "torchscript")])
def test_a_recurrent_policy_exports_with_state_and_equals_predict_step_for_step_over_an_episode(
    cell, shared_core, fmt, tmp_path
):
    """Test the state contract (obs, state_in -> action, state_out): over whole CartPole episodes, the exported
    file carrying its own state acts and updates the state as predict(obs, state, episode_start) does."""
    import gymnasium as gym

    data = tiny_rollout_data(obj_sets=ONE_SET)
    model = _fit_ppo(
        data, tmp_path, recurrent=True, cell=cell, shared_core=shared_core, recurrent_size=8, num_minibatches=1
    )
    path = str(tmp_path / f"actor.{'pt' if fmt == 'torchscript' else 'onnx'}")
    contract = export_policy(model, path, fmt)
    parts, cores = (2 if cell == "lstm" else 1), (1 if shared_core else 2)
    assert contract["state"]["shape"] == ["batch", parts, cores, 8]
    assert (contract["state"]["input"], contract["state"]["output"]) == ("state_in", "state_out")
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    state = exported_state = np.zeros((1, parts, cores, 8), np.float32)  # zeros: an episode begins
    steps = episodes = 0
    largest = 0.0
    while episodes < 2:
        batch = obs[None].astype(np.float32)
        action, state = model.predict(batch, state=state)
        exported, exported_state = _run_recurrent(path, fmt, batch, exported_state)
        np.testing.assert_array_equal(exported, action)
        # Equal to float32 rounding: TorchScript's graph may order the LSTM's sums differently (seen: 3e-8),
        # ONNX Runtime has its own kernels.
        tol = 1e-6 if fmt == "torchscript" else 1e-5
        np.testing.assert_allclose(exported_state, state, rtol=tol, atol=tol)
        largest = max(largest, float(np.abs(state).max()))
        obs, _, terminated, truncated, _ = env.step(int(action[0]))
        steps += 1
        if terminated or truncated:  # the next episode begins from zeros, on both sides
            obs, _ = env.reset()
            state = exported_state = np.zeros_like(state)
            episodes += 1
    assert steps > 2 * 8 and largest > 0.01  # the state moved
