"""Checks of what gymnasium envs return: non-finite observations and rewards, observations out of bounds.

A NaN or inf in the rollout spreads through GAE, the loss and the optimizer state within one update; here the
message can name the env. A step costs one dot product with zeros (IEEE 754: ``0 * inf = NaN``, which propagates),
cheaper than ``np.isfinite(x).all()``, which allocates a mask; the bad env and value are looked up only then.
"""

from __future__ import annotations

import math
import re
import warnings
from typing import Any

import numpy as np

# ``inf * 0`` sets the floating-point "invalid" flag and numpy warns about it; here that is
# the detection itself (wrapping the dot in ``np.errstate`` would cost more than the dot).
warnings.filterwarnings("ignore", "invalid value encountered in dot", RuntimeWarning, re.escape(__name__))

#: What to do with a non-finite (or rejected) value: raise, or cut that env's episode short.
ON_NONFINITE = ("stop", "skip")
#: What to do with an observation outside ``obs_bound``: clip it, or treat it as non-finite.
OBS_BOUND_MODES = ("clip", "reject")


def check_value_options(obs_bound: Any, obs_bound_mode: Any, on_nonfinite: Any = "stop") -> None:
    """Raise a ``ValueError`` naming the first of these arguments that is invalid."""
    number = isinstance(obs_bound, (int, float)) and not isinstance(obs_bound, bool)
    if obs_bound is not None and not (number and 0 < obs_bound < math.inf):
        raise ValueError(f"obs_bound must be a positive finite number or None, got {obs_bound!r}.")
    if obs_bound_mode not in OBS_BOUND_MODES:
        raise ValueError(f"obs_bound_mode must be one of {OBS_BOUND_MODES}, got {obs_bound_mode!r}.")
    if on_nonfinite not in ON_NONFINITE:
        raise ValueError(f"on_nonfinite must be one of {ON_NONFINITE}, got {on_nonfinite!r}.")


def float_paths(space: Any) -> list[tuple[str, ...]]:
    """Where a space's float arrays are: ``[()]`` for a float ``Box``, the keys' paths in a ``Dict`` (integer
    leaves, such as uint8 images, cannot be non-finite and are never checked)."""
    spaces = getattr(space, "spaces", None)
    if isinstance(spaces, dict):
        return [(key, *path) for key, sub in spaces.items() for path in float_paths(sub)]
    dtype, shape = getattr(space, "dtype", None), getattr(space, "shape", None)
    return [()] if dtype is not None and shape is not None and np.issubdtype(dtype, np.floating) else []


def _at(obs: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        obs = obs[key]
    return obs


class ValueChecks:
    """Per-step checks of the float arrays of a batch's observations, and rewards: finite, and within ``obs_bound``
    (``obs_bound_mode``: ``"clip"`` clips and counts, ``"reject"`` treats a value beyond it as non-finite)."""

    def __init__(self, num_envs: int, obs_bound: float | None, obs_bound_mode: str, observation_space: Any):
        self.obs_bound = None if obs_bound is None else float(obs_bound)
        self._paths = float_paths(observation_space)
        self._whole = self._paths == [()]
        self.float_obs = bool(self._paths)
        self.reject = self.float_obs and obs_bound is not None and obs_bound_mode == "reject"
        self.clipping = self.float_obs and obs_bound is not None and obs_bound_mode == "clip"
        self._reward_zeros = np.zeros(num_envs)
        spaces = [_at(observation_space, path) for path in self._paths]
        self._obs_zeros = [np.zeros(num_envs * math.prod(space.shape), dtype=space.dtype) for space in spaces]

    def _floats(self, obs: Any) -> list[np.ndarray]:
        return [obs] if self._whole else [_at(obs, path) for path in self._paths]

    def clean(self, obs: Any, reward: np.ndarray) -> bool:
        """Whether every observation and reward of a step is finite (and, rejecting, within the bound)."""
        # float() first: adding two numpy scalars of different dtypes costs more than the dots.
        total = float(reward.dot(self._reward_zeros))
        if self._whole:  # one float array (the common case, every env step): no walk over keys
            total += float(obs.ravel().dot(self._obs_zeros[0]))
        else:
            for x, zeros in zip(self._floats(obs), self._obs_zeros, strict=True):
                total += float(x.ravel().dot(zeros))
        if not math.isfinite(total):
            return False
        return not (self.reject and any(np.abs(x).max() > self.obs_bound for x in self._floats(obs)))

    def obs_clean(self, obs: Any) -> bool:
        """Whether one observation (or a batch) is finite and, rejecting, within the bound."""
        reject = self.reject
        return all(
            np.isfinite(x).all() and not (reject and np.abs(x).max() > self.obs_bound) for x in self._floats(obs)
        )

    def find(self, obs: Any, reward: np.ndarray | None = None, final_obs: dict[int, Any] | None = None) -> dict:
        """Every env's first bad value, ``{env: (what it is, the fix)}`` (the slow path, after :meth:`clean`)."""
        bound_fix = "raise obs_bound (Hydra: env.obs_bound=...), clip instead with obs_bound_mode=clip"
        obs_fix = "fix the env, or bound observations with obs_bound and obs_bound_mode (Hydra: env.obs_bound=...)"
        faults = {}
        for i in range(len(self._reward_zeros)):
            if reward is not None and not math.isfinite(reward[i]):
                faults[i] = f"Non-finite reward {float(reward[i])!r}", "fix the env's reward"
                continue
            candidates = [("observation", p, _at(obs, p)[i]) for p in self._paths]
            if final_obs and i in final_obs:
                candidates += [("final observation", p, _at(final_obs[i], p)) for p in self._paths]
            for what, path, x in candidates:
                x = np.asarray(x)
                bad, out = ~np.isfinite(x), False
                if not bad.any() and self.reject:
                    bad, out = np.abs(x) > self.obs_bound, True
                if bad.any():
                    index = tuple(int(k) for k in np.argwhere(bad)[0])
                    value = f"{what}{''.join(f'[{key!r}]' for key in path)} value {float(x[index])!r}"
                    value += f" at index {index}" if index else ""
                    if out:
                        faults[i] = f"Out-of-bound {value}, outside obs_bound={self.obs_bound}", bound_fix
                    else:
                        faults[i] = f"Non-finite {value}", obs_fix
                    break
        return faults

    def clip(self, obs: Any) -> int:
        """Clip ``obs``'s float arrays in place to ``[-obs_bound, obs_bound]`` (clip mode); return the count clipped."""
        if not self.clipping:
            return 0
        count = 0
        for x in self._floats(obs):
            hits = int(np.count_nonzero(np.abs(x) > self.obs_bound))
            if hits:
                np.clip(x, -self.obs_bound, self.obs_bound, out=x)
                count += hits
        return count


def nonfinite_message(problem: str, fix: str, label: str, episode_step: int | None) -> str:
    """The :class:`~rl_lightning.faults.NumericalFault` message: the bad value, where it came from and the fixes."""
    at = f" at step {episode_step} of its episode" if episode_step is not None else " at reset"
    return (
        f"{problem} from {label}{at}. To go on: {fix}; or cut such episodes short and continue with "
        "on_nonfinite='skip' on the data module (Hydra: env.on_nonfinite=skip)."
    )
