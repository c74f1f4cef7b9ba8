"""Gymnasium spaces to and from plain dicts, so checkpoints load with ``weights_only=True``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def space_to_dict(space: gym.Space) -> dict[str, Any]:
    """Describe a ``Box`` or ``Discrete`` space with plain Python types."""
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "low": space.low.tolist(),
            "high": space.high.tolist(),
            "dtype": str(space.dtype),
        }
    raise TypeError(f"Only Box and Discrete spaces can be stored in a checkpoint, got {space}.")


def space_from_dict(spec: dict[str, Any]) -> gym.Space:
    """Rebuild a space written by :func:`space_to_dict`."""
    if spec["type"] == "Discrete":
        return gym.spaces.Discrete(spec["n"], start=spec["start"])
    if spec["type"] == "Box":
        dtype = np.dtype(spec["dtype"])
        return gym.spaces.Box(np.array(spec["low"], dtype=dtype), np.array(spec["high"], dtype=dtype), dtype=dtype)
    raise ValueError(f"Unknown space type {spec['type']!r} in checkpoint.")
