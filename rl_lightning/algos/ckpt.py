"""What a checkpoint stores about its algorithm and spaces, and the checks against it before loading.

Every check runs before Lightning loads a tensor or the data module's counters, so a refused checkpoint leaves the run
(and the file) as it was, and the message names the file, the culprit and the fix.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
from collections.abc import Iterator, Mapping
from typing import Any

import gymnasium as gym
import lightning.pytorch as pl
import torch

from rl_lightning.callbacks.checkpoint import CHECKPOINT_KEY
from rl_lightning.data.base import EnvDataModule
from rl_lightning.spaces import describe, space_from_dict, space_to_dict


def attached_trainer(module: Any) -> pl.Trainer | None:
    """The ``Trainer`` ``module`` is attached to, or ``None`` (Lightning's ``trainer`` property raises without one; a
    plain ``nn.Module`` has none)."""
    try:
        return module.trainer
    except (RuntimeError, AttributeError):
        return None


def checkpoint_entry(module: pl.LightningModule) -> dict[str, Any]:
    """What :data:`CHECKPOINT_KEY` holds for ``module``: enough to rebuild its policy without envs."""
    datamodule = getattr(attached_trainer(module), "datamodule", None)
    return {
        "algorithm": type(module).__name__,
        "datamodule": f"{type(datamodule).__module__}.{type(datamodule).__name__}" if datamodule else None,
        "observation_space": space_to_dict(module.spaces[0]),
        "action_space": space_to_dict(module.spaces[1]),
    }


def checked_spaces(module: pl.LightningModule, checkpoint: dict[str, Any]) -> tuple[gym.Space, gym.Space]:
    """The spaces a checkpoint was trained on, after checking it was written by this library for ``module``'s class.

    Raises:
        ValueError: Naming the file and the fix when the checkpoint was not written by rl_lightning, holds another
            algorithm, or was trained on other observation or action spaces than the env ``module`` was built for.
    """
    name = type(module).__name__
    where = _where(module)
    if (meta := checkpoint.get(CHECKPOINT_KEY)) is None:
        raise ValueError(
            f"{where} was not written by rl_lightning (it has no '{CHECKPOINT_KEY}' entry), so {name} cannot "
            "rebuild its policy from it. Load it with the class that wrote it, or pass a checkpoint from an "
            "rl_lightning run's checkpoints/ directory."
        )
    algorithm = meta["algorithm"]
    if algorithm != name:
        raise ValueError(
            f"{where} holds a {algorithm} model, not a {name} one. Load it with {algorithm}.load_from_checkpoint "
            f"(Hydra: algo={algorithm.lower()}; CLI: --model {algorithm}), or pass a {name} checkpoint."
        )
    spaces = (space_from_dict(meta["observation_space"]), space_from_dict(meta["action_space"]))
    if module.spaces is not None and module.spaces != spaces:
        raise ValueError(_spaces_mismatch(module, where, checkpoint, spaces))
    return spaces


def check_weights(module: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
    """Refuse a checkpoint whose ``state_dict`` does not fit ``module`` (naming the settings that differ).

    Raises:
        ValueError: Naming the file, the settings or tensor shapes that differ, and the fix.
    """
    if (problem := _weights_mismatch(module, checkpoint)) is not None:
        raise ValueError(f"{_where(module)} does not fit this {type(module).__name__}: {problem}")


@contextlib.contextmanager
def loading(
    path: str | None, strict: bool, overrides: Mapping[str, Any], datamodule: pl.LightningDataModule | None = None
) -> Iterator[None]:
    """Tell the checks which file ``load_from_checkpoint`` reads, its strictness and the settings given to it.

    ``on_load_checkpoint`` has no trainer there to ask for the file's name or the
    strictness, and Lightning has written the settings given over the checkpoint's by then.
    ``datamodule``: the data the model is to resume on (a check before ``fit``), named in messages.
    """
    token = _LOADING.set({"path": path, "strict": strict, "overrides": dict(overrides), "datamodule": datamodule})
    try:
        yield
    finally:
        _LOADING.reset(token)


def _where(module: pl.LightningModule) -> str:
    """The file being loaded, for messages: the trainer's ``ckpt_path`` (fit/validate/test) or
    ``load_from_checkpoint``'s."""
    trainer = attached_trainer(module)
    path = trainer.ckpt_path if trainer is not None else (_LOADING.get() or {}).get("path")
    return f"Checkpoint '{os.fspath(path)}'" if path else "This checkpoint"


#: The file and strictness of a ``load_from_checkpoint`` in progress (no trainer holds them there).
_LOADING: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("rl_lightning_loading", default=None)


def _spaces_mismatch(module: pl.LightningModule, where: str, checkpoint: dict[str, Any], spaces: tuple) -> str:
    """Explain a checkpoint trained on other spaces than the env this model was built for."""
    saved_data = _plain_value(dict(checkpoint.get("datamodule_hyper_parameters") or {}))
    trainer = attached_trainer(module)
    datamodule = getattr(trainer, "datamodule", None) if trainer else (_LOADING.get() or {}).get("datamodule")
    env = datamodule.env_id if isinstance(datamodule, EnvDataModule) else "the data module's env"
    own_data = _plain_value(dict(datamodule.hparams)) if isinstance(datamodule, EnvDataModule) else {}
    saved_env = saved_data.get("env_id")
    # The settings that shape the spaces and differ are named; where none does, the object sets' variations are left.
    differ = [f"{key}={saved_data[key]!r}" for key in ("env_id", "env_factory", "backend", "wrappers", "train_obj_set")
              if key in own_data and key in saved_data and own_data[key] != saved_data[key]]  # fmt: skip
    fallback = ["obj_sets as in the checkpoint"] if own_data else [f"env_id={saved_env!r}"] if saved_env else []
    settings = f" ({', '.join(differ or fallback)})" if differ or fallback else ""
    saved, own = describe(*spaces), describe(*module.spaces)
    if own == saved:  # the same shapes: the bounds differ
        saved, own = (f"{space[0]} observations, {space[1]} actions" for space in (spaces, module.spaces))
    return (
        f"{where} was trained on {saved_env or 'another env'} ({saved}), but this {type(module).__name__} was "
        f"built for {env} ({own}). Give the data module the env settings the checkpoint was trained on"
        f"{settings}, or train from scratch without the checkpoint."
    )


def _plain_value(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain_value(v) for v in value]
    return {k: _plain_value(v) for k, v in value.items()} if isinstance(value, Mapping) else value


def _saved_hparams(checkpoint: dict[str, Any], loading: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint's own settings (``load_from_checkpoint`` has written the ones it was given over them)."""
    hparams = dict(checkpoint.get("hyper_parameters") or {})
    overrides, path = loading.get("overrides") or {}, loading.get("path")
    if overrides and path:
        try:  # only on the way to an error: mmap reads the settings without the tensors
            original = torch.load(path, map_location="cpu", weights_only=True, mmap=True).get("hyper_parameters")
        except Exception:  # noqa: BLE001 - then the settings given are compared as they are
            original = None
        if original:
            hparams.update({key: original[key] for key in overrides if key in original})
    return hparams


def _weights_mismatch(module: pl.LightningModule, checkpoint: dict[str, Any]) -> str | None:
    """Why the checkpoint's ``state_dict`` cannot load into ``module`` (``None`` if it can).

    Compared before loading, so the user gets the settings that differ rather than PyTorch's
    list of tensors. Tensors whose shapes differ always refuse the load; entries present on
    one side only do when the settings differ too (otherwise the load may not be strict).
    """
    saved = checkpoint.get("state_dict") or {}
    own = module.state_dict()
    shapes = [
        (key, tuple(saved[key].shape), tuple(value.shape))
        for key, value in own.items()
        if key in saved and hasattr(saved[key], "shape") and tuple(saved[key].shape) != tuple(value.shape)
    ]
    if not shapes and set(saved) == set(own):
        return None
    loading = _LOADING.get() or {}
    saved_hparams = _saved_hparams(checkpoint, loading)
    differ = [
        (key, _plain_value(saved_hparams[key]), _plain_value(value))
        for key, value in module.hparams.items()
        if not key.startswith("_") and key in saved_hparams and _plain_value(saved_hparams[key]) != _plain_value(value)
    ]
    if not shapes and not (differ and module.strict_loading and loading.get("strict", True)):
        return None
    name = type(module).__name__
    if given := [key for key, _, _ in differ if key in (loading.get("overrides") or {})]:
        settings = "; ".join(f"{key}: checkpoint {old!r}, given {new!r}" for key, old, new in differ if key in given)
        return (
            f"it was trained with other settings than those given to {name}.load_from_checkpoint ({settings}). "
            f"Drop {', '.join(f'{key}=...' for key in given)}: load_from_checkpoint takes the settings from the "
            "checkpoint."
        )
    # The settings that shape the networks and differ (a budget or interval may change on a resume); where none does,
    # the tensors (a user's own modules are not in the settings).
    if differ := [item for item in differ if item[0] in getattr(module, "network_settings", ())]:
        settings = "; ".join(f"{key}: checkpoint {old!r}, this model {new!r}" for key, old, new in differ)
        return (
            f"it was trained with other settings ({settings}). Build the model with the checkpoint's settings, "
            f"or load it with {name}.load_from_checkpoint(path), which takes them from the checkpoint."
        )
    only = (sorted(set(saved) - set(own))[:3], sorted(set(own) - set(saved))[:3])  # entries of one side's only
    tensors = "; ".join(f"{key}: checkpoint {old}, this model {new}" for key, old, new in shapes[:3]) or (
        f"only in the checkpoint: {only[0]}; only in this model: {only[1]}")  # fmt: skip
    return (
        f"its tensors differ ({tensors}{'; ...' if len(shapes) > 3 else ''}). Build the model with the "
        "networks the checkpoint was trained with (pass the same actor/critic modules)."
    )
