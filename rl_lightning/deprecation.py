"""Names renamed to one spelling per concept keep working for one release, with a warning naming the new one."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any


def warn_renamed(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (``DeprecationWarning``, at the caller's caller unless ``stacklevel`` says) that ``old`` is now ``new``."""
    warnings.warn(
        f"{old} is now {new}; the old name goes in the next release.", DeprecationWarning, stacklevel=stacklevel
    )


def renamed_attributes(module: str, renamed: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that serves each old name in ``renamed`` as its new one, with a warning.

    Args:
        module: The module's dotted name (for the message).
        renamed: Old name -> new name.
        namespace: The module's ``globals()``, where the new names live.
    """

    def __getattr__(name: str) -> Any:
        if name in renamed:
            warn_renamed(f"{module}.{name}", f"{module}.{renamed[name]}")
            return namespace[renamed[name]]
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__
