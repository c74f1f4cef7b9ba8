"""Gymnasium wrappers named in a config, applied to every env a run makes; and the few wrappers the library ships.

A run's ``wrappers`` (Hydra ``env.wrappers``) is a list of specs, each a wrapper's import path or a mapping of it
and its arguments (``{wrapper: gymnasium.wrappers.FilterObservation, filter_keys: [image]}``): plain values, which
checkpoints keep and async workers receive pickled. They are applied in order right after ``gymnasium.make`` of
each variation, under the object-set wrapper: the policy sees the wrapped observations, the object sets still
override the raw env's attributes.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from rl_lightning.checks import import_callable

#: The key of a spec mapping that names the wrapper (the other keys are its arguments).
WRAPPER_KEY = "wrapper"

WrapperSpec = str | Mapping[str, Any]


def _split(spec: Any) -> tuple[str, dict[str, Any]]:
    if isinstance(spec, str):
        return spec, {}
    if isinstance(spec, Mapping) and isinstance(spec.get(WRAPPER_KEY), str):
        return spec[WRAPPER_KEY], {k: v for k, v in spec.items() if k != WRAPPER_KEY}
    raise TypeError(
        f"A wrapper spec is an import path or a mapping with a '{WRAPPER_KEY}' key and the wrapper's arguments, got "
        f"{spec!r}. Write e.g. {{'{WRAPPER_KEY}': 'gymnasium.wrappers.FrameStackObservation', 'stack_size': 4}} "
        "(Hydra: env.wrappers=[...])."
    )


#: Imports a spec's wrapper, naming the fix when it cannot.
_import = functools.partial(import_callable, what="Wrapper", wanted="a wrapper class or a function env -> env",
                            example="gymnasium.wrappers.FrameStackObservation")  # fmt: skip


def check_wrappers(specs: Sequence[WrapperSpec] | None) -> list[WrapperSpec]:
    """Check every spec (importable, callable, arguments it takes: else a ``ValueError`` naming it; a malformed spec
    or list: ``TypeError``) and return them as plain values."""
    if specs is None:
        return []
    if isinstance(specs, (str, Mapping)) or not isinstance(specs, Sequence):
        raise TypeError(f"wrappers must be a list of wrapper specs, got {specs!r}.")
    plain = []
    for spec in specs:
        path, kwargs = _split(spec)
        if isinstance(target := _import(path), type) and not issubclass(target, gym.Wrapper):
            raise ValueError(f"Wrapper '{path}' is a class but not a gymnasium.Wrapper. Give a wrapper class or a "
                             "function env -> env (e.g. gymnasium.wrappers.FrameStackObservation).")  # fmt: skip
        try:
            inspect.signature(target).bind(None, **kwargs)
        except TypeError as err:
            raise ValueError(f"Wrapper '{path}' does not take the arguments {sorted(kwargs)}: {err}.") from None
        except ValueError:  # no signature to read (a builtin): let the call tell
            pass
        plain.append(path if not kwargs else {WRAPPER_KEY: path, **kwargs})
    return plain


def apply_wrappers(env: gym.Env, specs: Sequence[WrapperSpec]) -> gym.Env:
    """``env`` wrapped by each spec in order (specs checked by :func:`check_wrappers`)."""
    for spec in specs:
        path, kwargs = _split(spec)
        if not isinstance(env := _import(path)(env, **kwargs), gym.Env):
            raise ValueError(f"Wrapper '{path}' returned {type(env).__name__}, not a gymnasium env: a wrapper function "
                             "takes the env and returns it wrapped.")  # fmt: skip
    return env


class FireReset(gym.Wrapper):
    """Presses FIRE after each reset, for Atari games that wait for it to start (Breakout launches the ball): CleanRL's
    ``FireResetEnv`` (from OpenAI Baselines' ``atari_wrappers.py``). Place it after ``AtariPreprocessing``, which owns
    the no-op starts; an env whose action 1 is not FIRE is refused."""

    def __init__(self, env: gym.Env):
        super().__init__(env)
        meanings = env.unwrapped.get_action_meanings() if hasattr(env.unwrapped, "get_action_meanings") else []
        if len(meanings) < 3 or meanings[1] != "FIRE":
            raise ValueError(
                f"FireReset needs an Atari env whose action 1 is FIRE; {env.spec.id if env.spec else env} has "
                f"{meanings or 'no action meanings'}. Leave the wrapper out for this game."
            )

    def reset(self, **kwargs):
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset()
        return obs, info


class SuccessFromReward(gym.Wrapper):
    """Reports ``info["is_success"]`` at the end of each episode: terminated with a reward above ``threshold``.

    For tasks that pay only on success and say nothing about it (MiniGrid pays ``1 - 0.9 * steps / max_steps`` on
    reaching the goal, 0 otherwise), so evaluation's ``eval/success_rate`` is defined.
    """

    def __init__(self, env: gym.Env, threshold: float = 0.0):
        super().__init__(env)
        self.threshold = float(threshold)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = {**info, "is_success": bool(terminated and reward > self.threshold)}
        return obs, reward, terminated, truncated, info


class KeepEntries(gym.ObservationWrapper):
    """A 1-D ``Box`` observation cut down to the entries at ``indices`` (in that order); other spaces, or an index
    out of range, are refused naming the valid ones.

    ``KeepEntries(env, indices=[0, 2])`` on CartPole keeps the cart position and the pole angle: the CartPole of
    sb3-contrib's ``RecurrentPPO`` tests and RL-Zoo's ``CartPoleNoVel-v1`` (their ``MaskVelocityWrapper`` zeroes the
    velocities; dropping them is the same information), which only a recurrent policy solves (``+experiment=ppo_lstm``).
    """

    def __init__(self, env: gym.Env, indices: Sequence[int]):
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"KeepEntries needs a 1-D Box observation, got {space}; use it on vector observations.")
        indices = [int(i) for i in indices]
        bad = [i for i in indices if not 0 <= i < space.shape[0]]
        if not indices or bad:
            raise ValueError(
                f"KeepEntries indices={indices}: each must lie in 0..{space.shape[0] - 1} (the observation has "
                f"{space.shape[0]} entries), and at least one is needed."
            )
        self.indices = np.asarray(indices)
        self.observation_space = gym.spaces.Box(space.low[self.indices], space.high[self.indices], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        """The kept entries."""
        return observation[self.indices]
