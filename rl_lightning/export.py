"""Export: a trained policy as one self-contained file that maps raw observations to actions.

The exported actor runs with PyTorch alone (TorchScript) or ONNX Runtime alone (ONNX): no Lightning, torchrl, gymnasium
or rl_lightning. It holds everything between an env's observation and its action: the observation normalizer's
statistics (PPO), the networks, the deterministic action (argmax, Gaussian mean, squashed mean, greedy Q) and the
clipping to a ``Box`` action space's bounds that ``env.step`` would otherwise need (and the run's ``obs_bound`` clipping
of observations, when it had one). Its actions are those of ``RLModule.predict`` given the same ``obs_bound``
(``tests/test_export.py`` compares them).

Contract (also stored in the file as the JSON metadata ``rl_lightning``):

- input ``obs``: ``[batch, *observation_shape]``, raw observations as the env returns them (a batch of one for a single
  observation): float32, or uint8 for uint8 images (scaled inside). A ``Dict`` observation space gives one input per
  key, named by the key, in the space's key order (``inputs`` in the metadata lists them: name, dtype, shape);
  ``Discrete`` and ``MultiDiscrete`` keys are int64, ``MultiBinary`` keys int8. TorchScript takes them as one tuple
  argument, ONNX Runtime by name;
- output ``action``: int64 ``[batch]`` for a ``Discrete`` action space, int64 ``[batch, n]``
  for ``MultiDiscrete`` / ``MultiBinary`` (the env's values: ``start`` added), float32
  ``[batch, action_dim]`` within the bounds for a ``Box`` one.

A recurrent policy (``PPO(recurrent=True)``) has one more input and one more output (the
metadata's ``state`` entry gives names and shape):

- input ``state_in``: float32 ``[batch, C, K, H]`` (``C`` 2 for an LSTM's ``h`` and ``c``, 1 for a GRU; ``K`` 1 for a
  shared core, 2 for actor and critic cores; ``H`` the recurrent size), after the observations. Zeros for an env whose
  episode begins with this observation; otherwise the ``state_out`` of that env's previous step;
- output ``state_out``: the state after this step, same shape, after ``action``.

It is the state ``RLModule.predict(obs, state=..., episode_start=...)`` takes and returns.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import os
import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import torch
from torch import nn

from rl_lightning.algos.base import RLModule
from rl_lightning.callbacks.checkpoint import atomic_file
from rl_lightning.envs.obs import storage_dtype
from rl_lightning.nets.actor_critic import ActorCritic
from rl_lightning.spaces import space_to_dict

EXPORT_FORMATS = ("torchscript", "onnx")
#: Name of the metadata entry (a TorchScript extra file, an ONNX metadata property).
METADATA_KEY = "rl_lightning"
#: The ONNX opset written: 18 is the oldest the PyTorch exporter writes, read by ONNX Runtime >= 1.14.
ONNX_OPSET = 18


class DeployedActor(nn.Module):
    """A policy's deterministic actor on raw observation batches, in float32 on the CPU.

    Only what acting needs is kept: PPO's value head is dropped from the copy, DQN acts greedily on its Q-values.

    Args:
        model: A trained algorithm (its ``policy`` is copied; the model is left as it was).
        obs_bound: Clip observations to ``[-obs_bound, obs_bound]`` first, as a run with
            ``obs_bound`` in ``clip`` mode did before its policy saw them.

    Raises:
        ValueError: The model has no policy yet (neither fitted nor loaded from a checkpoint).
    """

    def __init__(self, model: RLModule, obs_bound: float | None = None):
        super().__init__()
        if model.policy is None:
            raise ValueError(f"This {type(model).__name__} has no policy to export yet: export a trained model "
                             "(after trainer.fit, or from load_from_checkpoint).")  # fmt: skip
        policy = copy.deepcopy(model.policy).float().cpu().eval().requires_grad_(False)
        if isinstance(policy, ActorCritic):
            policy.critic = policy.critic_encoder = None  # act(value=False) runs the actor only: no critic in the file
        self.policy = policy
        self.recurrent = policy.initial_state(1) is not None
        self.obs_bound = None if obs_bound is None else float(obs_bound)
        # The inputs are what the policy reads: a privileged critic's keys (observation groups) are not among them.
        observation_space, action_space = model.actor_observation_space, model.spaces[1]
        self.inputs = export_inputs(observation_space)
        self.keys = None if isinstance(observation_space, gym.spaces.Box) else [i["name"] for i in self.inputs]
        self._floats = [i["dtype"] == "float32" for i in self.inputs]
        self.continuous = isinstance(action_space, gym.spaces.Box)
        if self.continuous:
            # Clipped as EnvGroup.env_action (envs/env_group.py) clips before env.step.
            self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))
        else:
            start = getattr(action_space, "start", 0)  # EnvGroup.env_action's shift (MultiBinary has none)
            self.register_buffer("start", torch.as_tensor(start, dtype=torch.int64))
        shape = ["batch", *(int(n) for n in action_space.shape)]  # action spaces are Discrete or one-dimensional
        self.metadata = {
            "format_version": 3,  # 3: the single input only under "inputs" (2 repeated it as "input")
            "algorithm": type(model).__name__,
            "inputs": self.inputs,
            "output": {"name": "action", "dtype": "float32" if self.continuous else "int64", "shape": shape},
            "obs_bound": self.obs_bound,
            "observation_space": space_to_dict(observation_space),
            "action_space": space_to_dict(action_space),
        }
        if self.recurrent:
            self.state_shape = shape = list(policy.initial_state(1).shape)
            self.metadata["state"] = {
                "input": "state_in", "output": "state_out", "dtype": "float32", "shape": ["batch", *shape[1:]],
                "cell": policy.cell, "initial": "zeros, for an env whose episode begins with this observation",
            }  # fmt: skip

    def forward(
        self, obs: torch.Tensor | tuple[torch.Tensor, ...], state: torch.Tensor | None = None
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Deterministic env actions for raw observations: a ``[batch, *observation_shape]`` tensor, or (a
        ``Dict`` space) a tuple of one tensor per key, in the order of the contract's ``inputs``.

        A recurrent policy also takes the state before the step (``state_in``) and returns ``(action, state_out)``.
        """
        parts = [obs] if self.keys is None else list(obs)
        for i, is_float in enumerate(self._floats):
            if is_float:
                parts[i] = parts[i].float()  # a float64 batch acts as predict() would act on it
                if self.obs_bound is not None:
                    parts[i] = parts[i].clamp(-self.obs_bound, self.obs_bound)
        x = parts[0] if self.keys is None else dict(zip(self.keys, parts, strict=True))
        # The caller zeroes a recurrent state where an episode begins, so no step begins one here.
        starts = None if state is None else torch.zeros_like(state[:, 0, 0, 0], dtype=torch.bool)
        action, _, _, state_out = self.policy.act(x, None if state is None else state.float(), starts, True, False)
        action = torch.clamp(action.float(), self.low, self.high) if self.continuous else action.long() + self.start
        return action if state_out is None else (action, state_out)


def export_inputs(observation_space: gym.Space) -> list[dict[str, Any]]:
    """The exported file's inputs: ``obs`` for a ``Box``, one per key of a ``Dict`` (name, dtype, shape)."""
    if isinstance(observation_space, gym.spaces.Box):
        return [_input("obs", observation_space)]
    if isinstance(observation_space, gym.spaces.Dict):
        return [_input(key, sub) for key, sub in observation_space.spaces.items()]
    raise TypeError(f"Only Box and Dict observation spaces can be exported, got {observation_space}.")


def _input(name: str, space: gym.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Box):
        return {"name": name, "dtype": storage_dtype(space).name, "shape": ["batch", *(int(n) for n in space.shape)]}
    if isinstance(space, (gym.spaces.Discrete, gym.spaces.MultiDiscrete)):
        return {"name": name, "dtype": "int64", "shape": ["batch", *(int(n) for n in space.shape)]}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"name": name, "dtype": "int8", "shape": ["batch", *(int(n) for n in space.shape)]}
    raise TypeError(f"Observation key {name!r} ({space}) cannot be an input of an exported policy.")


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """The contract as strict JSON: unbounded space limits are written ``"inf"`` / ``"-inf"``.

    ``json.dumps`` would write ``Infinity``, which strict readers (JavaScript's
    ``JSON.parse``, Go, serde) refuse; MuJoCo observation spaces are unbounded.
    """

    def plain(value: Any) -> Any:
        if isinstance(value, float) and math.isinf(value):
            return "inf" if value > 0 else "-inf"
        if isinstance(value, Mapping):
            return {k: plain(v) for k, v in value.items()}
        return [plain(v) for v in value] if isinstance(value, (list, tuple)) else value

    return json.dumps(plain(metadata), allow_nan=False)


def _example(actor: DeployedActor) -> tuple[Any, ...]:
    """The example arguments of ``forward``: the observations, and a recurrent policy's state."""
    # A batch of 2: export specializes sizes 0 and 1, so the batch axis stays dynamic from 2 up.
    parts = tuple(torch.zeros(2, *i["shape"][1:], dtype=getattr(torch, i["dtype"])) for i in actor.inputs)
    obs = parts[0] if actor.keys is None else parts
    return (obs, torch.zeros(2, *actor.state_shape[1:])) if actor.recurrent else (obs,)


def _torchscript(actor: DeployedActor, path: str) -> None:
    with warnings.catch_warnings():
        # PyTorch marks torch.jit deprecated in favour of torch.export; TorchScript files
        # still load and run with torch.jit.load, which is what this format is for.
        warnings.filterwarnings("ignore", message=r".*torch\.jit.*deprecated", category=DeprecationWarning)
        warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
        traced = torch.jit.trace(actor, _example(actor))
        torch.jit.save(traced, path, _extra_files={METADATA_KEY: metadata_json(actor.metadata)})


def _onnx(actor: DeployedActor, path: str) -> None:
    try:
        import onnx
        import onnxscript  # noqa: F401  (torch.onnx.export's exporter needs it)
    except ImportError as err:
        raise ImportError(
            f"ONNX export needs the onnx and onnxscript packages ({err.name} is missing): "
            "pip install 'rl_lightning[export]', or export with --format torchscript."
        ) from None
    batch = {0: torch.export.Dim("batch", min=1)}
    dynamic_shapes = {"obs": batch if actor.keys is None else tuple(batch for _ in actor.inputs)}
    names, outputs = [i["name"] for i in actor.inputs], ["action"]
    if actor.recurrent:
        dynamic_shapes["state"] = batch
        names, outputs = [*names, "state_in"], ["action", "state_out"]
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)  # its notes on optional torchvision ops are not ours
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # external_data=False: one file, weights inside.
            torch.onnx.export(actor, _example(actor), path, input_names=names, output_names=outputs,
                              dynamic_shapes=dynamic_shapes, opset_version=ONNX_OPSET, dynamo=True,
                              external_data=False, verbose=False)  # fmt: skip
    finally:
        exporter_log.setLevel(level)
    proto = onnx.load(path)
    entry = proto.metadata_props.add()
    entry.key, entry.value = METADATA_KEY, metadata_json(actor.metadata)
    onnx.save(proto, path)


def export_policy(
    model: RLModule, path: str | os.PathLike, format: str = "onnx", metadata: Mapping[str, Any] | None = None,
    obs_bound: float | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Write ``model``'s deterministic actor to ``path`` as TorchScript or ONNX.

    The file is written beside ``path`` first and moved over it once complete, so a failed
    export leaves an existing file as it was.

    Args:
        model: A trained algorithm.
        path: The file to write (``.pt`` for TorchScript, ``.onnx`` for ONNX, by convention).
        format: ``"torchscript"`` or ``"onnx"``.
        metadata: More entries for the stored contract (``rl-lightning export``: ``env_id``, ``wrappers``).
        obs_bound: The run's ``obs_bound`` when its mode was ``clip`` (see :class:`DeployedActor`).

    Returns:
        The contract stored in the file (input, output, spaces, algorithm).

    Raises:
        ValueError: Unknown format, or a model with no policy.
        ImportError: ONNX export without the ``onnx``/``onnxscript`` packages (naming the install).
    """
    if format not in EXPORT_FORMATS:
        raise ValueError(f"Unknown export format {format!r}; choose one of {', '.join(EXPORT_FORMATS)}.")
    actor = DeployedActor(model, obs_bound)
    actor.metadata.update(metadata or {})
    with atomic_file(os.fspath(path)) as tmp:
        (_torchscript if format == "torchscript" else _onnx)(actor, tmp)
    return actor.metadata
