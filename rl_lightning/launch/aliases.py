"""Hydra keys of earlier releases, kept for one release: rewritten to their new names with a warning.

``train.py`` rewrites its command line through :func:`renamed_overrides` before Hydra sees it,
so ``data.gamma=0.9`` (before the learning settings moved to the algorithm) still runs, as
``algo.gamma=0.9``, and ``env.id=...`` as ``env.env_id=...``. The Lightning CLI needs no
table: the data modules still accept the old arguments and warn.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from rl_lightning.data.datamodule import MOVED_TO_ALGORITHM

#: Old key -> new key (``docs/glossary.md`` lists the renames).
RENAMED_KEYS = {"env.id": "env.env_id", **{f"data.{name}": f"algo.{name}" for name in MOVED_TO_ALGORITHM}}

_OVERRIDE = re.compile(r"^(?P<prefix>[+~]*)(?P<key>[\w.]+)(?P<rest>=.*)?$", re.S)


def renamed_overrides(overrides: Sequence[str]) -> tuple[list[str], list[str]]:
    """Rewrite old keys in Hydra overrides to their new names.

    Args:
        overrides: Command-line arguments as Hydra receives them (flags such as ``-m`` pass through).

    Returns:
        ``(overrides, warnings)``: the rewritten arguments and one message per renamed key
        (naming the new key).
    """
    out, notes = [], []
    for arg in overrides:
        match = _OVERRIDE.match(arg)
        new = RENAMED_KEYS.get(match["key"]) if match else None
        if new is None:
            out.append(arg)
            continue
        out.append(f"{match['prefix']}{new}{match['rest'] or ''}")
        notes.append(f"{match['key']} is now {new}; the old key goes in the next release (this run uses {new}).")
    return out, notes
