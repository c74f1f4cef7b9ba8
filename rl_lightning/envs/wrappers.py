"""Gymnasium wrappers named in a config, applied to every env a run makes; and the few wrappers the library ships.

A run's ``wrappers`` (Hydra ``env.wrappers``, ``RolloutDataModule(wrappers=...)``) is a
list of specs, each a wrapper's import path or a mapping of it and its arguments::

    wrappers:
      - {wrapper: gymnasium.wrappers.FilterObservation, filter_keys: [image, direction]}
      - rl_lightning.envs.wrappers.SuccessFromReward

Specs are plain strings and numbers, so checkpoints keep them (``play``, ``export`` and a
resume rebuild the same envs) and async workers receive them by pickling. They are checked
when the data module is built (importable, callable, arguments its signature takes), and
applied in order right after ``gymnasium.make`` of each variation, under the object-set
wrapper: the policy sees the wrapped observations, the object sets still override the
raw env's attributes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

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


def _import(path: str) -> Callable[..., gym.Env]:
    return import_callable(
        path, "Wrapper", "a wrapper class or a function env -> env", "gymnasium.wrappers.FrameStackObservation"
    )


def check_wrappers(specs: Sequence[WrapperSpec] | None) -> list[WrapperSpec]:
    """Check every spec (importable, callable, arguments it takes) and return them as plain values.

    Raises:
        TypeError: A spec that is neither a path nor a mapping with ``wrapper``, or a list that is not a list.
        ValueError: A wrapper that cannot be imported, or arguments its signature does not take, naming it.
    """
    if specs is None:
        return []
    if isinstance(specs, (str, Mapping)) or not isinstance(specs, Sequence):
        raise TypeError(f"wrappers must be a list of wrapper specs, got {specs!r}.")
    plain = []
    for spec in specs:
        path, kwargs = _split(spec)
        target = _import(path)
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
        env = _import(path)(env, **kwargs)
    return env


class FireReset(gym.Wrapper):
    """Presses FIRE after each reset, for Atari games that wait for it to start (Breakout launches the ball).

    CleanRL's ``FireResetEnv`` (from OpenAI Baselines' ``atari_wrappers.py``): FIRE, then
    action 2, resetting again should either end the episode. Place it after
    ``AtariPreprocessing``, which owns the no-op starts.

    Args:
        env: An ALE env whose action 1 is FIRE.

    Raises:
        ValueError: The env's action 1 is not FIRE (the game needs no FIRE to start: drop the wrapper).
    """

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

    For tasks that pay only on success and say nothing about it (MiniGrid pays
    ``1 - 0.9 * steps / max_steps`` on reaching the goal, 0 otherwise), so evaluation's
    ``eval/success_rate`` is defined. A truncated episode did not succeed.

    Args:
        env: The env to wrap.
        threshold: The final reward must exceed it.
    """

    def __init__(self, env: gym.Env, threshold: float = 0.0):
        super().__init__(env)
        self.threshold = float(threshold)

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        if terminated or truncated:
            info = {**info, "is_success": bool(terminated and reward > self.threshold)}
        return obs, reward, terminated, truncated, info
