"""Loggers: Weights & Biases that works with no account and no network.

Every metric the modules log carries ``time/env_steps``, and they log ``step`` as the env
step count, which Lightning hands to every logger as its x-axis (TensorBoard, CSV, W&B).
"""

from __future__ import annotations

import netrc
import os
from urllib.parse import urlparse

from lightning.pytorch.loggers import WandbLogger as _LightningWandbLogger

WANDB_MODES = ("auto", "online", "offline")


def wandb_api_key_configured() -> bool:
    """Whether a W&B API key is configured (``WANDB_API_KEY`` or a ``~/.netrc`` entry, as ``wandb login`` writes)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC")).authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


class WandbLogger(_LightningWandbLogger):
    """Lightning's ``WandbLogger`` with an ``auto`` mode and env steps as the x-axis.

    ``mode="auto"`` (the default) logs online when an API key is configured and offline
    otherwise, so a run on a machine with no account and no network still writes a full
    offline run under ``save_dir/wandb`` (upload it later with ``wandb sync``).
    ``"online"`` insists on uploading and fails early, with the fix, when no key is
    configured; ``"offline"`` never touches the network.

    Args:
        save_dir: Directory the ``wandb/`` run folder is written under.
        project: W&B project name.
        mode: ``"auto"``, ``"online"`` or ``"offline"``.
        **kwargs: Passed to Lightning's ``WandbLogger`` (``name``, ``tags``, ``group``, ...).
    """

    def __init__(self, save_dir: str = ".", project: str = "rl_lightning", mode: str = "auto", **kwargs):
        if mode not in WANDB_MODES:
            raise ValueError(f"W&B mode must be one of {WANDB_MODES}, got {mode!r}.")
        has_key = wandb_api_key_configured()
        if mode == "online" and not has_key:
            raise ValueError(
                "W&B mode 'online' needs an API key, and none is configured: run `wandb login` or set "
                "WANDB_API_KEY, or log offline (mode 'offline' or 'auto') and upload later with `wandb sync`."
            )
        self.mode = mode if mode != "auto" else ("online" if has_key else "offline")
        os.makedirs(save_dir, exist_ok=True)
        super().__init__(save_dir=save_dir, project=project, offline=self.mode == "offline", **kwargs)

    @property
    def experiment(self):
        """The W&B run; on creation, ``time/env_steps`` is declared the step metric of every curve."""
        fresh = self._experiment is None
        run = super().experiment
        if fresh and getattr(run, "define_metric", None):
            run.define_metric("time/env_steps")
            run.define_metric("*", step_metric="time/env_steps", step_sync=True)
        return run
