"""Load any algorithm's checkpoint without knowing which algorithm wrote it."""

from __future__ import annotations

import copy
import os
from typing import Any

from rl_lightning.algos import ckpt
from rl_lightning.algos.base import CHECKPOINT_KEY, RLModule
from rl_lightning.algos.dqn import DQN
from rl_lightning.algos.ppo import PPO
from rl_lightning.algos.sac import SAC
from rl_lightning.callbacks.checkpoint import check_checkpoint_file
from rl_lightning.data.base import EnvDataModule
from rl_lightning.loggers import LOGGERS_KEY

#: The algorithms by the name a checkpoint records.
ALGORITHMS: dict[str, type[RLModule]] = {cls.__name__: cls for cls in (PPO, SAC, DQN)}


def read_checkpoint(path: str | os.PathLike) -> dict[str, Any]:
    """Read an rl_lightning checkpoint onto the CPU (``weights_only``), refusing anything else clearly.

    Raises:
        FileNotFoundError: The file does not exist.
        ValueError: Naming the file and the fix: not a complete checkpoint archive, not
            readable by ``torch.load``, or not written by rl_lightning.
    """
    path = os.fspath(path)
    checkpoint = check_checkpoint_file(path)  # missing, torn, unreadable, or not rl_lightning's: refused
    meta = checkpoint[CHECKPOINT_KEY]
    if meta.get("algorithm") not in ALGORITHMS:
        raise ValueError(
            f"Checkpoint '{path}' holds a {meta.get('algorithm')!r} model, which this version of rl_lightning "
            f"does not have (it has {', '.join(ALGORITHMS)}). Use the version that wrote it."
        )
    return checkpoint


def check_resume(model: RLModule, datamodule: EnvDataModule, path: str | os.PathLike) -> dict[str, Any]:
    """Make every check that resuming ``model`` on ``datamodule`` from ``path`` makes, before anything runs.

    ``Trainer.fit(ckpt_path=...)`` checks the checkpoint only once its loggers have started
    and written to the run directory (Lightning's CSV logger replaces ``metrics.csv``); the
    front doors call this first, so a refused resume leaves the run directory as it was.
    The checks run on a copy of ``model`` (they build its policy); ``model`` is left as given.

    Returns:
        What the checkpoint kept of the run's loggers (the W&B run id), for
        :func:`rl_lightning.loggers.continue_loggers`.

    Raises:
        FileNotFoundError, ValueError: As :func:`read_checkpoint`; or the checkpoint holds another algorithm, was
            trained on other spaces than ``datamodule``'s env, its weights or settings do not fit ``model``, or its data
            state does not fit ``datamodule`` (``check_resume_state``; each naming the file and the fix).
    """
    checkpoint = read_checkpoint(path)
    probe = copy.deepcopy(model)
    probe._ensure_policy(*datamodule.env_spaces())
    with ckpt.loading(os.fspath(path), strict=probe.strict_loading, overrides={}, datamodule=datamodule):
        probe.on_load_checkpoint(checkpoint)
    if (state := checkpoint.get(type(datamodule).__qualname__)) is not None:  # where Lightning keeps its state_dict
        datamodule.check_resume_state(state)
    return dict(checkpoint.get(LOGGERS_KEY, {}))


def load_checkpoint(path: str | os.PathLike, map_location: Any = "cpu", **kwargs: Any) -> RLModule:
    """The model of any algorithm's checkpoint (``PPO``, ``SAC`` or ``DQN``), in eval mode.

    Args:
        path: A ``.ckpt`` file written by an rl_lightning run.
        map_location: Where the weights go (CPU by default, so a GPU run's file loads anywhere).
        **kwargs: Passed to the algorithm's ``load_from_checkpoint``.

    Raises:
        FileNotFoundError, ValueError: As :func:`read_checkpoint`, or when the weights do
            not fit (see ``RLModule.on_load_checkpoint``).
    """
    return load_with_data_settings(path, map_location, **kwargs)[0]


def load_with_data_settings(
    path: str | os.PathLike, map_location: Any = "cpu", **kwargs: Any
) -> tuple[RLModule, dict[str, Any]]:
    """:func:`load_checkpoint`, plus the data module's settings the run had (``env``, ``obj_sets``,
    ``eval_max_episode_steps``, ...; empty when the checkpoint was saved without a data module)."""
    checkpoint = read_checkpoint(path)
    algorithm = checkpoint[CHECKPOINT_KEY]["algorithm"]
    data = dict(checkpoint.get("datamodule_hyper_parameters") or {})
    del checkpoint  # the weights are read again by load_from_checkpoint; free this copy first
    model = ALGORITHMS[algorithm].load_from_checkpoint(path, map_location=map_location, **kwargs).eval()
    return model, data
