"""The one switch of the fast path, and the package versions its private-API shortcuts were written against.

``RL_LIGHTNING_FAST=0`` in the environment (read at import, so spawned and torchrun workers
inherit it), :func:`set_enabled` or the :func:`disabled` context turn every shortcut off:
the library then runs only public torch, Lightning and gymnasium APIs.

A shortcut that reaches into a package's private attributes also checks that package's
version: outside the range it was written and tested against it stays off (one debug-level
log line says so), whatever the switch says.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import logging
import os
from collections.abc import Iterator

#: The environment variable that turns the fast path off (``0``) or on (``1``, the default).
ENV_VAR = "RL_LIGHTNING_FAST"

#: ``[low, high)`` major.minor versions whose private APIs the shortcuts use as written
#: (the code was written against torch 2.13, Lightning 2.6 and gymnasium 1.4).
WRITTEN_AGAINST: dict[str, tuple[tuple[int, int], tuple[int, int]]] = {
    "torch": ((2, 6), (2, 14)),
    "lightning": ((2, 4), (2, 7)),
    "gymnasium": ((1, 1), (1, 5)),
}

_log = logging.getLogger(__name__)
_OFF, _ON = ("0", "false", "off", "no"), ("", "1", "true", "on", "yes")


def _from_environment() -> bool:
    value = os.environ.get(ENV_VAR, "1").strip().lower()
    if value in _OFF:
        return False
    if value in _ON:
        return True
    raise ValueError(
        f"{ENV_VAR}={os.environ[ENV_VAR]!r} is neither on nor off. Set {ENV_VAR}=1 for the fast path (the default) "
        f"or {ENV_VAR}=0 to run only public torch, Lightning and gymnasium APIs."
    )


_enabled = _from_environment()


def enabled() -> bool:
    """Whether the fast path is on (the switch; each shortcut also checks its own conditions)."""
    return _enabled


def set_enabled(on: bool) -> None:
    """Turn every shortcut on or off for this process (objects built while it was off stay plain).

    Raises:
        TypeError: ``on`` is not a bool.
    """
    global _enabled
    if not isinstance(on, bool):
        raise TypeError(f"set_enabled takes True or False, got {on!r}.")
    _enabled = on


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Run a block with every shortcut off, then restore the switch."""
    before = _enabled
    set_enabled(False)
    try:
        yield
    finally:
        set_enabled(before)


def _major_minor(version: str) -> tuple[int, int]:
    parts = [int("".join(c for c in part if c.isdigit()) or 0) for part in version.split(".")[:2]]
    return parts[0], parts[1] if len(parts) > 1 else 0


def version_supported(package: str, version: str | None = None) -> bool:
    """Whether ``package`` (by default the installed one) lies in the range its shortcuts were written against."""
    if version is None:
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return False
    low, high = WRITTEN_AGAINST[package]
    ok = low <= _major_minor(version) < high
    if not ok:
        _log.debug(
            "rl_lightning.fast: %s %s lies outside %s.%s-%s.%s, which its shortcuts were written against; "
            "they stay off and the plain path runs.",
            package, version, *low, high[0], high[1] - 1,
        )  # fmt: skip
    return ok


#: Per package: whether its version admits the shortcuts that use its private APIs (read once).
SUPPORTED = {package: version_supported(package) for package in WRITTEN_AGAINST}


def on_for(package: str) -> bool:
    """The switch, and ``package``'s version check: whether a shortcut into ``package``'s internals may run."""
    return _enabled and SUPPORTED[package]


def is_class(obj: object, qualified_name: str) -> bool:
    """Whether ``obj``'s class is exactly ``module.Name`` (no subclass, which may override what a shortcut mirrors).

    By name: the fast path imports nothing of the package's core, which calls it.
    """
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}" == qualified_name
