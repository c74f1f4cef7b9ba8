"""Gymnasium spaces to and from plain dicts, so checkpoints load with ``weights_only=True``.

The spaces the algorithms take are stored: ``Box`` of any rank (vectors, and images
``HxWxC`` / ``CxHxW``), ``Discrete``, ``MultiDiscrete``, ``MultiBinary`` and ``Dict`` of
them (nested too). A ``Box`` whose bounds are one number each (an image's 0..255) is
stored by its shape and the two numbers, not by a bound per pixel. And what a policy takes and gives against
its spaces: observations as a batch (:func:`single_to_batch`), actions as the env takes them (:func:`env_action`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from rl_lightning.envs.obs import Obs, map_obs

#: The spaces :func:`space_to_dict` stores.
STORED_SPACES = "Box, Discrete, MultiDiscrete, MultiBinary and Dict"


def env_action(space: gym.Space, action: np.ndarray) -> np.ndarray:
    """A policy's actions as ``space`` takes them: a ``Box``'s clipped to its bounds (the log-probability refers to
    the sample), ``Discrete`` and ``MultiDiscrete`` indices shifted by ``start`` (the policy counts from 0)."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(action, space.low, space.high)
    return action if getattr(space, "start", None) is None else action + space.start


def single_to_batch(obs: Obs, space: gym.Space) -> tuple[Obs, bool]:
    """``obs`` as a batch, and whether it was one observation (its leaves have the space's rank)."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            raise TypeError(
                f"This policy was trained on Dict observations with keys {sorted(space.spaces)}; pass a dict of arrays "
                f"(one entry per key), got {type(obs).__name__}."
            )
        if missing := sorted(set(space.spaces) - set(obs)):
            raise ValueError(f"The observation lacks the key(s) {missing}; this policy reads {sorted(space.spaces)}.")
        key = next(iter(space.spaces))
        single = np.ndim(obs[key]) == len(space.spaces[key].shape)
    else:
        single = np.ndim(obs) == len(space.shape)
    if single:
        obs = map_obs(lambda x: np.asarray(x)[None], obs)
    for key, sub in space.spaces.items() if isinstance(space, gym.spaces.Dict) else [(None, space)]:
        shape = np.shape(obs if key is None else obs[key])
        if sub.shape is not None and tuple(shape[1:]) != tuple(sub.shape):  # (a nested Dict has no shape)
            what = "observations" if key is None else f"'{key}' observations"
            raise ValueError(
                f"This policy reads {what} of shape {tuple(sub.shape)} (one) or (B, *{tuple(sub.shape)}) (a batch); "
                f"got {tuple(shape[1:]) if single else shape}."
            )
    return obs, single


def describe(observation_space: gym.Space, action_space: gym.Space) -> str:
    """``"Box(4,) observations, Discrete(2) actions"``: what a policy is built for, bounds aside (equal descriptions:
    one policy acts in both)."""
    return f"{_shape_of(observation_space)} observations, {_shape_of(action_space)} actions"


def _shape_of(space: gym.Space) -> str:
    if isinstance(space, gym.spaces.Dict):
        return f"Dict({', '.join(f'{key}: {_shape_of(sub)}' for key, sub in space.spaces.items())})"
    if isinstance(space, gym.spaces.Box):
        return f"Box{tuple(space.shape)}"
    return f"Discrete({int(space.n)})" if isinstance(space, gym.spaces.Discrete) else str(space)


def _bound(values: np.ndarray) -> Any:
    """One number where every entry is the same (JSON-safe: ``inf`` stays a float), else the nested list."""
    flat = values.reshape(-1)
    return flat[0].item() if flat.size and (flat == flat[0]).all() else values.tolist()


def space_to_dict(space: gym.Space) -> dict[str, Any]:
    """Describe a space with plain Python types.

    Raises:
        TypeError: For a space outside :data:`STORED_SPACES` (a ``Tuple``, ``Graph``, ``Text``...),
            naming it and the gymnasium wrapper that turns it into one of them.
    """
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "low": _bound(space.low),
            "high": _bound(space.high),
            "dtype": str(space.dtype),
        }
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "start": space.start.tolist()}
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": np.asarray(space.n).tolist()}
    if isinstance(space, gym.spaces.Dict):
        return {"type": "Dict", "spaces": {key: space_to_dict(sub) for key, sub in space.spaces.items()}}
    raise TypeError(
        f"Only {STORED_SPACES} spaces can be stored in a checkpoint, got {space}. Turn it into one of them with a "
        "gymnasium wrapper (e.g. gymnasium.wrappers.FlattenObservation, or FilterObservation to drop a Dict key)."
    )


def space_from_dict(spec: dict[str, Any]) -> gym.Space:
    """Rebuild a space written by :func:`space_to_dict` (or by earlier versions: ``Box`` bounds as lists, no shape)."""
    kind = spec["type"]
    if kind == "Discrete":
        return gym.spaces.Discrete(spec["n"], start=spec["start"])
    if kind == "Box":
        dtype = np.dtype(spec["dtype"])
        low, high = np.array(spec["low"], dtype=dtype), np.array(spec["high"], dtype=dtype)
        shape = tuple(spec["shape"]) if "shape" in spec else low.shape
        return gym.spaces.Box(np.full(shape, low), np.full(shape, high), shape=shape, dtype=dtype)
    if kind == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(np.array(spec["nvec"]), start=np.array(spec["start"]))
    if kind == "MultiBinary":
        return gym.spaces.MultiBinary(spec["n"])
    if kind == "Dict":
        return gym.spaces.Dict({key: space_from_dict(sub) for key, sub in spec["spaces"].items()})
    raise ValueError(f"Unknown space type {kind!r} in checkpoint (this version stores {STORED_SPACES}).")
