"""The ``rl-lightning`` command: a Lightning CLI on the library's classes, plus ``plot``.

    rl-lightning fit --model PPO --data.env CartPole-v1 --trainer.max_epochs 5 --model.clip_coef 0.1
    rl-lightning fit --config conf/cli/ppo.yaml
    rl-lightning test --ckpt_path runs/<run>/checkpoints/last.ckpt     # both object sets
    rl-lightning plot runs/<run> multirun/<sweep> --out curves.png

``fit``, ``validate`` and ``test`` are Lightning's subcommands (``--help`` lists every
argument of the model, data and trainer). Without ``--trainer.default_root_dir`` each
run gets ``runs/<date_time>/``; the default logger is the offline-first
:class:`~rl_lightning.loggers.WandbLogger`. ``validate``/``test`` with ``--ckpt_path``
rebuild the algorithm and its data module (env, object sets, evaluation settings) from
the checkpoint, so no other argument is needed.
"""

from __future__ import annotations

import atexit
import os
import sys
import tempfile
import time
import zipfile
from collections.abc import Sequence

import torch
import yaml
from lightning.pytorch.cli import LightningCLI

from rl_lightning.algos import RLModule
from rl_lightning.algos.base import CHECKPOINT_KEY
from rl_lightning.callbacks import EnvStepProgressBar, PhaseTimer
from rl_lightning.data.base import EnvDataModule

WANDB_LOGGER = "rl_lightning.loggers.WandbLogger"


class RLCLI(LightningCLI):
    """``LightningCLI`` over ``RLModule`` subclasses (``--model PPO``) and the data modules.

    ``--data`` takes ``RolloutDataModule`` (the default) or ``ReplayDataModule`` (for SAC and DQN).
    """

    def __init__(self, args: Sequence[str] | None = None, run: bool = True):
        from_argv = args is None
        args = _with_checkpoint_config(list(sys.argv[1:] if from_argv else args))
        if from_argv:  # LightningCLI warns when given args while sys.argv holds some too
            sys.argv = [sys.argv[0], *args]
        super().__init__(
            RLModule,
            EnvDataModule,  # --data RolloutDataModule (the default) or ReplayDataModule
            subclass_mode_model=True,
            subclass_mode_data=True,
            trainer_defaults={
                "max_epochs": -1,
                "enable_model_summary": False,
                "callbacks": [EnvStepProgressBar(), PhaseTimer()],
                "logger": {"class_path": WANDB_LOGGER},
            },
            seed_everything_default=0,
            auto_configure_optimizers=False,
            args=None if from_argv else args,
            run=run,
        )

    def _parse_ckpt_path(self) -> None:
        """Nothing to do: ``__init__`` already put the checkpoint's settings before the user's arguments.

        (Lightning's own version re-applies the checkpoint's hyperparameters over the
        command line and needs a ``_class_path`` that only CLI-trained checkpoints have.)
        """

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        return {
            "fit": {"model", "train_dataloaders", "val_dataloaders", "datamodule"},
            "validate": {"model", "dataloaders", "datamodule"},
            "test": {"model", "dataloaders", "datamodule"},
        }

    def add_arguments_to_parser(self, parser) -> None:
        parser.set_defaults({"data": {"class_path": "rl_lightning.RolloutDataModule"}})
        # One seed: --seed_everything seeds torch/numpy/python and the data module's envs.
        parser.link_arguments("seed_everything", "data.init_args.seed")

    def before_instantiate_classes(self) -> None:
        """Give the run its own directory and put the W&B run in it."""
        config = self.config[self.subcommand] if self.subcommand else self.config
        trainer = config.trainer
        if trainer.default_root_dir is None:
            trainer.default_root_dir = os.path.join("runs", time.strftime("%Y-%m-%d_%H-%M-%S"))
        for logger in trainer.logger if isinstance(trainer.logger, list) else [trainer.logger]:
            if getattr(logger, "class_path", None) == WANDB_LOGGER:
                if logger.init_args.get("save_dir") in (None, "."):
                    logger.init_args.save_dir = trainer.default_root_dir


def checkpoint_config(ckpt_path: str) -> dict:
    """The ``model``/``data`` config that rebuilds a checkpoint's algorithm and data module.

    Raises:
        SystemExit: With a message naming the file and the fix when it is not a readable
            rl_lightning checkpoint.
    """
    if not os.path.isfile(ckpt_path):
        sys.exit(f"Checkpoint '{ckpt_path}' does not exist. Pass the path of a .ckpt file from a run's checkpoints/.")
    if not zipfile.is_zipfile(ckpt_path):
        sys.exit(
            f"Cannot read checkpoint '{ckpt_path}': it is not a complete checkpoint archive (a write may have "
            "been interrupted, or it is another kind of file). Use an earlier checkpoint from the same directory."
        )
    ckpt = torch.load(ckpt_path, weights_only=True, map_location="cpu")
    meta = ckpt.get(CHECKPOINT_KEY)
    if meta is None:
        sys.exit(f"Checkpoint '{ckpt_path}' was not written by rl_lightning (it has no '{CHECKPOINT_KEY}' entry).")
    model_args = {k: v for k, v in ckpt.get("hyper_parameters", {}).items() if not k.startswith("_")}
    config = {"model": {"class_path": f"rl_lightning.{meta['algorithm']}", "init_args": model_args}}
    data_args = ckpt.get("datamodule_hyper_parameters")
    if data_args:
        data_class = meta.get("datamodule", "rl_lightning.RolloutDataModule")
        data_args = {k: v for k, v in data_args.items() if not k.startswith("_")}
        config["data"] = {"class_path": data_class, "init_args": data_args}
        if "seed" in data_args:  # --seed_everything feeds the data module's seed (a linked argument)
            config["seed_everything"] = data_args.pop("seed")
    return config


def _ckpt_path(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        if arg == "--ckpt_path" and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith("--ckpt_path="):
            return arg.split("=", 1)[1]
    return None


def _with_checkpoint_config(args: list[str]) -> list[str]:
    """``validate``/``test`` with ``--ckpt_path``: the checkpoint's model and data settings go first.

    They are written to a config file placed right after the subcommand, so anything else
    on the command line overrides them.
    """
    ckpt_path = _ckpt_path(args)
    if not (args and args[0] in ("validate", "test") and ckpt_path):
        return args
    config = checkpoint_config(ckpt_path)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="rl_lightning_ckpt_", delete=False) as f:
        yaml.safe_dump(config, f)
    atexit.register(os.unlink, f.name)
    return [args[0], "--config", f.name, *args[1:]]


def main(args: Sequence[str] | None = None) -> RLCLI | None:
    """Entry point of the ``rl-lightning`` console script; returns the CLI (its trainer, model, data)."""
    argv = list(sys.argv[1:] if args is None else args)
    if argv and argv[0] == "plot":
        from rl_lightning.launch.curves import main as plot_main

        plot_main(argv[1:])
        return None
    return RLCLI(args=args)


def console() -> None:
    """The ``rl-lightning`` console script: ``main`` without a return value, so a finished run exits with 0."""
    main()


if __name__ == "__main__":
    console()
