"""Argument checks shared by the algorithms, the data modules, the envs and the front doors.

Each takes the arguments by name (``check_positive(lr=lr)``), so its message names the argument, the value and what is
allowed; a bad value is refused at construction, before any env is built or step taken.
"""

from __future__ import annotations

import difflib
import glob
import importlib
import math
import multiprocessing
import numbers
import os
from collections.abc import Callable, Sequence
from typing import Any


def did_you_mean(word: str, options: Sequence[str], cutoff: float = 0.6) -> str:
    """`` Did you mean 'a' or 'b'?`` for the ``options`` closest to ``word`` (up to three), ``""`` if none is close."""
    close = difflib.get_close_matches(word, list(options), n=3, cutoff=cutoff)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_positive(**values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a positive number (``None`` allowed if given)."""
    for name, value in values.items():
        if value is not None and not (_is_number(value) and value > 0):
            raise ValueError(f"{name} must be a positive number, got {value!r}.")


def check_one_of(options: Sequence[Any], hint: str = "", **values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not one of ``options`` (``hint``: where to set it)."""
    for name, value in values.items():
        if value not in options:
            raise ValueError(f"{name} must be one of {tuple(options)}, got {value!r}{hint}.")


def check_non_negative(**values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a number >= 0."""
    for name, value in values.items():
        if not (_is_number(value) and value >= 0):
            raise ValueError(f"{name} must be a non-negative number, got {value!r}.")


def check_positive_int(none: str | None = None, **values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a positive integer (``none``: what ``None`` means,
    where it is allowed, e.g. ``"None (keep all)"``)."""
    for name, value in values.items():
        if not (value is None and none is not None) and not (_is_int(value) and value > 0):
            allowed = f"a positive integer or {none}" if none is not None else "a positive integer"
            raise ValueError(f"{name} must be {allowed}, got {value!r}.")


def check_bool(**values: Any) -> None:
    """Raise a ``TypeError`` naming the first switch that is not ``True`` or ``False`` (Hydra passes ``no`` or
    ``off`` on as text, which ``if`` would take for on)."""
    if bad := next((name for name, value in values.items() if type(value).__name__ not in ("bool", "bool_")), None):
        raise TypeError(f"{bad} must be true or false, got {values[bad]!r}. Write {bad}=true or {bad}=false.")


def check_finite(none: str | None = None, **values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a finite number (``none``: what ``None`` means,
    where it is allowed)."""
    for name, value in values.items():
        if not (value is None and none is not None) and not (_is_number(value) and math.isfinite(value)):
            allowed = f"a finite number or {none}" if none is not None else "a finite number"
            raise ValueError(f"{name} must be {allowed}, got {value!r}.")


def check_replay_sizes(buffer_size: Any, batch_size: Any, num_envs: int = 0) -> None:
    """Raise a ``ValueError`` naming the settings unless a replay buffer of ``buffer_size`` transitions can fill a batch
    of ``batch_size`` (else no gradient step is ever taken); ``num_envs``: ``optimize_memory_usage``'s buffer, which
    never draws the newest vector step and must hold two."""
    check_positive_int(buffer_size=buffer_size, batch_size=batch_size)
    if num_envs and buffer_size < 2 * num_envs:
        raise ValueError(
            f"buffer_size={buffer_size} is too small for optimize_memory_usage with {num_envs} envs: it must hold at "
            f"least two vector steps ({2 * num_envs} transitions)."
        )
    if batch_size > buffer_size - num_envs:
        unsampled = f" (optimize_memory_usage never draws the newest {num_envs})" if num_envs else ""
        raise ValueError(
            f"batch_size={batch_size} is more than the {buffer_size - num_envs} transitions a buffer_size="
            f"{buffer_size} buffer draws from{unsampled}: no gradient step would ever be taken. Raise buffer_size or "
            "lower batch_size."
        )


def check_seed(seed: Any) -> None:
    """Raise a ``ValueError`` unless ``seed`` is an integer in ``[0, 2**32)`` (what numpy's and gymnasium's seeding
    take, and Lightning's ``seed_everything``)."""
    if not (_is_int(seed) and 0 <= seed < 2**32):
        raise ValueError(f"seed must be an integer in [0, 2**32), got {seed!r}.")


def check_new_run_dir(run_dir: str, fix: str) -> None:
    """Refuse a fresh run in a directory holding an earlier run's ``checkpoints/*.ckpt`` or ``metrics.csv``, which it
    would write over (runs in its subdirectories are not in the way); ``fix`` says how this front door resumes it."""
    kept = [os.path.join("checkpoints", "*.ckpt"), "metrics.csv"]
    if found := sorted(f for pattern in kept for f in glob.glob(os.path.join(glob.escape(run_dir), pattern))):
        if not any(f.endswith(".ckpt") for f in found):  # nothing to resume from (algo.save_interval=null)
            fix = "It keeps no checkpoint to resume from; " + fix.rpartition(", or ")[2]
        raise ValueError(f"{run_dir} holds an earlier run ({found[0]}), which a fresh run would write over. {fix}")


def same_device(a: Any, b: Any) -> bool:
    """Whether torch devices ``a`` and ``b`` are one: ``cuda`` (ManiSkill3's GPU envs) is the current one, ``cuda:0``
    for a policy Lightning placed there (it makes each rank's device the current one)."""
    return a.type == b.type and (a.index == b.index or None in (a.index, b.index))


def check_unit_interval(open_low: bool = False, **values: Any) -> None:
    """Raise a ``ValueError`` naming the first argument that is not a number in [0, 1] (``open_low``: (0, 1])."""
    for name, value in values.items():
        if not (_is_number(value) and (0.0 < value <= 1.0 if open_low else 0.0 <= value <= 1.0)):
            raise ValueError(f"{name} must be a number in {'(0, 1]' if open_low else '[0, 1]'}, got {value!r}.")


def check_hidden_sizes(hidden_sizes: Any, allow_empty: bool = False) -> None:
    """Raise a ``ValueError`` unless ``hidden_sizes`` is a sequence of positive integers (non-empty unless
    ``allow_empty``: PPO's heads may be single linear layers, as on CleanRL's Atari CNN)."""
    if (not isinstance(hidden_sizes, Sequence) or isinstance(hidden_sizes, str) or not (hidden_sizes or allow_empty)
            or any(not _is_int(h) or h <= 0 for h in hidden_sizes)):  # fmt: skip
        kind = "list" if allow_empty else "non-empty list"
        raise ValueError(f"hidden_sizes must be a {kind} of positive integers, got {hidden_sizes!r}.")


def import_callable(path: str, what: str, wanted: str, example: str) -> Callable[..., Any]:
    """The callable at the dotted import ``path`` (``package.module.name``), or a ``ValueError`` with the fix.

    Args:
        path: Full import path of the callable.
        what: What the caller calls it in messages (``"Wrapper"``, ``"env.env_factory"``).
        wanted: What it must be (``"a wrapper class or a function env -> env"``).
        example: A path that would work, shown in the messages.
    """
    module, _, name = path.rpartition(".")
    try:
        target = getattr(importlib.import_module(module), name) if module else None
    except ImportError as err:
        raise ValueError(
            f"{what} '{path}' cannot be imported ({err}). Install the package that holds it, or check the path "
            f"(e.g. {example})."
        ) from None
    except AttributeError:
        target = None
    if not callable(target):
        raise ValueError(
            f"{what} '{path}' is not a callable in an importable module; name {wanted} by its full import path "
            f"(e.g. {example})."
        )
    return target


#: What to do with a non-finite (or rejected) value: raise, or cut that env's episode short.
ON_NONFINITE = ("stop", "skip")
#: What to do with an observation outside ``obs_bound``: clip it, or treat it as non-finite.
OBS_BOUND_MODES = ("clip", "reject")


def check_value_options(obs_bound: Any, obs_bound_mode: Any, on_nonfinite: Any = "stop") -> None:
    """Raise a ``ValueError`` naming the first of these arguments that is invalid."""
    if obs_bound is not None and not (_is_number(obs_bound) and 0 < obs_bound < math.inf):
        raise ValueError(f"obs_bound must be a positive finite number or None, got {obs_bound!r}.")
    check_one_of(OBS_BOUND_MODES, obs_bound_mode=obs_bound_mode)
    check_one_of(ON_NONFINITE, on_nonfinite=on_nonfinite)


def check_max_env_restarts(value: Any) -> None:
    """Raise a ``ValueError`` naming ``max_env_restarts`` unless it is an integer >= 0."""
    if not _is_int(value) or value < 0:
        raise ValueError(f"max_env_restarts must be a non-negative integer (0: never recreate an env), got {value!r}.")


def check_worker_options(worker_start_method: Any, worker_timeout: Any) -> None:
    """Raise a ``ValueError`` naming the setting unless the start method exists here and the time limit is positive."""
    methods = [*multiprocessing.get_all_start_methods(), None]
    check_one_of(methods, " (None: fork on Linux)", worker_start_method=worker_start_method)
    check_positive(worker_timeout=worker_timeout)
