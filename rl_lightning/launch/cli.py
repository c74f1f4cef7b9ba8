"""The ``rl-lightning`` command: a Lightning CLI on the library's classes, plus ``plot``, ``play`` and ``export``.

    rl-lightning fit --model PPO --data.env_id CartPole-v1 --trainer.max_epochs 5 --model.clip_coef 0.1
    rl-lightning fit --config conf/cli/ppo.yaml
    rl-lightning test --ckpt_path runs/<run>/checkpoints/last.ckpt     # both object sets
    rl-lightning plot runs/<run> multirun/<sweep> --out curves.png
    rl-lightning play runs/<run>/checkpoints/last.ckpt --obj-set test --episodes 5 --video test.mp4
    rl-lightning export runs/<run>/checkpoints/last.ckpt --format onnx --out policy.onnx

``fit``, ``validate`` and ``test`` are Lightning's subcommands (``--help`` lists every argument of the model, data and
trainer). Without ``--trainer.default_root_dir`` each run gets ``runs/<date_time>/``; the default logger is the
offline-first :class:`~rl_lightning.loggers.WandbLogger`. ``validate``/``test`` with ``--ckpt_path`` (or a ``--config``
file's ``ckpt_path``) rebuild the algorithm and its data module (env, object sets, evaluation settings) from the
checkpoint, so no other argument is needed.

A mistake ends with one ``error:`` line that names the argument (``--model.lr``) or file and the fix, before any work: a
mistyped argument or class, a value of the wrong type, a value the constructor refuses, trainer settings the machine
cannot run, an env whose spaces the algorithm cannot handle, a checkpoint that is corrupt or does not fit.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import inspect
import os
import re
import shlex
import signal
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from typing import Any, NoReturn

import lightning.pytorch as pl
import yaml
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from rl_lightning.algos import RLModule, read_checkpoint
from rl_lightning.algos.base import CHECKPOINT_KEY
from rl_lightning.algos.loading import check_resume
from rl_lightning.callbacks import EnvStepProgressBar, PhaseTimer
from rl_lightning.checks import check_new_run_dir, did_you_mean
from rl_lightning.data.base import EnvDataModule
from rl_lightning.faults import EnvFault, NumericalFault, TrainingInterrupted
from rl_lightning.loggers import continue_loggers

WANDB_LOGGER = "rl_lightning.loggers.WandbLogger"
SUBCOMMANDS = ("fit", "validate", "test")


def _fail(message: str, code: int = 2) -> NoReturn:
    """End the command with one ``error:`` line (no usage dump, no traceback)."""
    sys.stderr.write(f"error: {' '.join(message.split())}\n")
    sys.stderr.flush()
    raise SystemExit(code)


def _classes(section: str) -> list[str]:
    """The names under which ``--model``/``--data`` (``section``) accept the library's classes, the usual one first."""
    import rl_lightning

    base = RLModule if section == "model" else EnvDataModule
    names = [name for name in rl_lightning.__all__ if isinstance(cls := getattr(rl_lightning, name), type)
             and issubclass(cls, base) and cls is not base]  # fmt: skip
    return sorted(names, key=lambda name: name not in ("PPO", "RolloutDataModule"))


def _init_args(class_path: str) -> list[str]:
    """The constructor arguments of a class given by its import path (``[]`` if it cannot be imported)."""
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(__import__(module, fromlist=[name]), name)
    except (ImportError, AttributeError, ValueError):
        return []
    return [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "args", "kwargs")]


def _help_hint(parser: Any) -> str:
    words = str(getattr(parser, "prog", "")).split()
    sub = words[-1] if words and words[-1] in SUBCOMMANDS else None
    return f"`rl-lightning {sub} --help` lists every argument." if sub else "`rl-lightning --help` lists subcommands."


def explain_parse_error(message: str, parser: Any) -> str:
    """One line for a jsonargparse parsing error: the argument (``--model.lr``), what is wrong and the fix.

    Args:
        message: jsonargparse's message (several indented lines of nested union errors).
        parser: The parser that failed (its options feed the did-you-mean).
    """
    hint = _help_hint(parser)
    if choice := re.search(r"invalid choice: '([^']*)' \(choose from (.*?)\)", message):
        options = [*re.findall(r"'([^']+)'", choice.group(2)), *TOOLS]
        return (
            f"Unknown subcommand '{choice.group(1)}'.{did_you_mean(choice.group(1), options)} Choose one of: "
            f"{', '.join(options)} (e.g. rl-lightning fit --model PPO)."
        )
    if required := re.search(r"arguments are required: (?:\w+\.)?(model|data)\b", message):
        options = _classes(required.group(1))
        return (
            f"Missing --{required.group(1)}: name the class to build, one of {', '.join(options)} "
            f"(e.g. rl-lightning fit --{required.group(1)} {options[0]}, or a --config file that sets it)."
        )
    if unrecognized := re.search(r"unrecognized arguments: (.*)", message):
        flag = next((a for a in unrecognized.group(1).split() if a.startswith("-")), unrecognized.group(1).strip())
        flag = flag.split("=", 1)[0]
        options = sorted(set(re.findall(r"--[\w.]+", parser.format_help())))  # the options its help lists
        return f"Unknown argument {flag}.{did_you_mean(flag, options)} Fix the spelling; {hint}"
    if (key := re.match(r'\s*Parser key "([^"]+)"', message)) is None:
        return f"{message.strip().splitlines()[0]} {hint}"
    section = key.group(1)
    flag = f"--{section}"
    if section == "config":
        return f"--config: {message.split(':', 1)[1].strip()}. Pass the path of a YAML config (e.g. conf/cli/ppo.yaml)."
    path = re.search(r"Expected a dot import path string: (\S+)", message) or re.search(
        r"Import path (\S+) does not", message
    )
    if path and section == "trainer.logger":
        given = path.group(1)
        return (
            f"Unknown --trainer.logger class '{given}'.{did_you_mean(given, LIBRARY_LOGGERS, 0.8)} Choose one of "
            f"{', '.join(LIBRARY_LOGGERS)} (the library's, which keep a run's logs across a resume), another "
            "logger by its import path (lightning.pytorch.loggers.MLFlowLogger, or your own: mypkg.MyLogger), "
            "or false for none."
        )
    nested = re.search(r"class_path '([\w.]+)':\s*(?:Parser key \"([^\"]+)\":\s*)?(.*)", message, flags=re.S)
    if path and section in ("model", "data") and not (nested and nested.group(2)):  # not one of the class's arguments
        options = _classes(section)
        given = path.group(1).rpartition(".")[2]
        return (
            f"Unknown {flag} class '{path.group(1)}'.{did_you_mean(given, options)} Choose one of: "
            f"{', '.join(options)} (e.g. {flag} {options[0]})."
        )
    if nested:
        class_path, arg, why = nested.groups()
        name = class_path.rpartition(".")[2]
        option = re.search(r"Option '(\w+)' is not accepted", why)
        if option and name in ("RLModule", "EnvDataModule"):  # --model.lr with no --model PPO before it
            options = _classes(section)
            return (
                f"{flag}.{option.group(1)} needs the class first: pass {flag} (one of {', '.join(options)}) "
                f"before {flag}.{option.group(1)}, e.g. {flag} {options[0]} {flag}.{option.group(1)} ..."
            )
        if option:
            args = _init_args(class_path)
            return (
                f"Unknown argument {flag}.{option.group(1)}: {name} takes no '{option.group(1)}'."
                f"{did_you_mean(option.group(1), args)} Its arguments: {', '.join(args)}."
            )
        if arg:  # the argument's own error comes before the other union alternatives ("- Expected ...")
            union = re.search(r"Does not validate against any of the Union subtypes.*?Given value: [^\n]*", why, re.S)
            # An argument of a union type (int | None): its own block of alternatives, up to its given value.
            why = union.group(0) if union else re.split(r"\n\s*- ", why, maxsplit=1)[0]
            return f"Invalid value for {flag}.{arg}: {_expected(why)} Fix {flag}.{arg}; {hint}"
        if section == "trainer.logger":  # an import path that does not import
            reason = why.strip().splitlines()[0]
            return (
                f"--trainer.logger {class_path} cannot be built: {reason}. Give the import path of a logger class "
                f"Python can import (installed, or on PYTHONPATH), one of {', '.join(LIBRARY_LOGGERS)}, or false."
            )
    return f"Invalid value for {flag}: {_expected(message)} Fix {flag}; {hint}"


def _expected(text: str) -> str:
    """``Expected a <class 'int'>. Got value: abc`` (or a union's list of them) as ``expected int, got 'abc'``."""
    errors = "\n".join(line for line in text.splitlines() if not line.strip().startswith("Given value type"))
    types = list(dict.fromkeys(t.replace("NoneType", "null") for t in re.findall(r"<class '(?:\w+\.)*(\w+)'>", errors)))
    given = re.search(r"(?:Got value|Given value): (.*)", text)
    if not types:
        return " ".join(text.split()[:40])
    got = f", got '{given.group(1).strip()}'" if given else ""
    return f"expected {' or '.join(types)}{got}."


class _Parser(LightningArgumentParser):
    """Lightning's argument parser, whose errors are one line naming the argument and the fix."""

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if not self.exit_on_error:  # jsonargparse probing a value: it handles the error itself
            super().error(message, ex)
        _fail(explain_parse_error(message, getattr(ex, "subcommand_parser", None) or self))


class RLCLI(LightningCLI):
    """``LightningCLI`` over ``RLModule`` subclasses (``--model PPO``) and the data modules.

    ``--data`` takes ``RolloutDataModule`` (the default) or ``ReplayDataModule`` (for SAC and DQN).
    """

    def __init__(self, args: Sequence[str] | None = None, run: bool = True):
        from_argv = args is None
        self._given_args = list(sys.argv[1:] if from_argv else args)  # for the resume command
        subcommand = next((a for a in self._given_args if a in SUBCOMMANDS), "fit")
        config_file = "config.yaml" if subcommand == "fit" else f"{subcommand}_config.yaml"
        #: The model and data config of the checkpoint validate/test rebuild (``None`` without one).
        args, self.checkpoint_config = _with_checkpoint_config(_with_library_loggers(list(self._given_args)))
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
            parser_class=_Parser,
            parser_kwargs={"description": f"Subcommands: {', '.join(SUBCOMMANDS + tuple(TOOLS))} (each with --help)."},
            # A fit goes on over its run's config.yaml (a resume, or one a refused run left); validate, test: their own.
            save_config_kwargs={"overwrite": True, "config_filename": config_file},
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        """Parse, holding ``ckpt_path`` back until :meth:`before_instantiate_classes` (from the command line or a
        config file): Lightning's CLI would re-apply the checkpoint's hyperparameters over the command line (and
        refuse those of a checkpoint it did not write)."""
        super().parse_arguments(parser, args)
        self.ckpt_path = None
        if subcommand := self.config.get("subcommand"):
            self.ckpt_path, self.config[subcommand].ckpt_path = self.config[subcommand].get("ckpt_path"), None

    def _subcommand_config(self) -> Namespace:
        return self.config[self.subcommand] if self.subcommand else self.config

    def instantiate_classes(self) -> None:
        """Build the model, data module and trainer; an argument they refuse ends with one line naming its flag."""
        try:
            super().instantiate_classes()
        except Exception as err:
            if (message := self._explain_instantiation_error(err)) is None:
                raise
            _fail(message)

    def _explain_instantiation_error(self, err: Exception) -> str | None:
        from rl_lightning.launch.errors import culprit_key, library_error

        config = self._subcommand_config()
        trainer_refused = isinstance(err, (TypeError, ValueError)) and _section_that_raised(err) == "trainer"
        if isinstance(err, MisconfigurationException) or trainer_refused:
            keys = ("accelerator", "devices", "strategy", "num_nodes")
            settings = ", ".join(f"--trainer.{key} {config.trainer.get(key)}" for key in keys)
            return (
                f"The trainer settings cannot run here ({settings}): {err} Pick settings this machine supports "
                "(e.g. --trainer.accelerator cpu --trainer.devices 1)."
            )
        if (refusal := library_error(err)) is None:
            return None
        section = _section_that_raised(refusal)
        init_args = {name: config.get(f"{name}.init_args") for name in (section, "model", "data") if name}
        groups = [(name, args.as_dict()) for name, args in init_args.items() if isinstance(args, Namespace)]
        text = " ".join(str(refusal).split())
        if (key := culprit_key(text, groups)) is None:
            return f"The --{section or 'model'} arguments are refused: {text} Fix them; {_help_hint(self.parser)}"
        section, _, arg = key.partition(".")
        return (
            f"Invalid value for --{key}: {text} Fix --{key} (or {arg} under {section}: init_args: in a --config file)."
        )

    def fit(self, **kwargs: Any) -> None:
        """``fit``: Lightning's CLI calls its own method of a subcommand's name in place of the trainer's."""
        with self._refusals_in_one_line():
            self.model.check_datamodule(self.datamodule)  # before the loggers start and the config is saved
            self._check_start(kwargs.get("ckpt_path"))
            self.trainer.fit(**kwargs)

    def validate(self, **kwargs: Any) -> None:
        """``validate``, as :meth:`fit`."""
        with self._refusals_in_one_line(), _evaluation_warnings():
            self.trainer.validate(**kwargs)

    def test(self, **kwargs: Any) -> None:
        """``test``, as :meth:`fit`."""
        with self._refusals_in_one_line(), _evaluation_warnings():
            self.trainer.test(**kwargs)

    @contextlib.contextmanager
    def _refusals_in_one_line(self):
        """A refusal of the library (spaces, checkpoint, data module) ends with one line; a stop, with its resume."""
        from rl_lightning.launch.errors import library_error

        try:
            yield
        except (TrainingInterrupted, EnvFault) as err:
            resume = f"\nResume with:\n  {self._resume_command(err)}" if getattr(err, "checkpoint", None) else ""
            print(f"{err}{resume}", file=sys.stderr, flush=True)
            # 128 + the signal's number, as a shell reports a process a signal stopped (143 for SIGTERM).
            name = getattr(err, "signal_name", "")
            sys.exit(128 + getattr(signal, name).value if name.startswith("SIG") and hasattr(signal, name) else 1)
        except NumericalFault as err:
            _fail(f"Numerical fault: {err}", code=1)
        except Exception as err:
            if getattr(self.model, "loops_started", False):  # not a refusal: the run was under way
                raise
            refusal = library_error(err)
            if refusal is None and isinstance(err, MisconfigurationException):
                refusal = err  # Lightning refusing the trainer settings for this model
            if refusal is None:
                raise
            _fail(str(refusal), code=1)

    def _check_against_checkpoint(self, saved: dict) -> None:
        """Refuse (one line) another algorithm than the checkpoint's, or another env its object sets would not run."""
        given, algorithm = self._subcommand_config(), saved["model"]["class_path"].rpartition(".")[2]
        model = str(given.model.class_path).rpartition(".")[2]
        if model != algorithm:  # named on the command line or in a config file
            _fail(f"{self.ckpt_path} holds a {algorithm} model, not a {model} one: drop the --model you gave "
                  f"({self.subcommand} builds the checkpoint's), or pass a {model} run's checkpoint.")  # fmt: skip
        env_id, sets = given.data.init_args.get("env_id"), given.data.init_args.get("obj_sets") or {}
        named = {variation.get("env_id") for group in sets.values() for variation in group} - {None}
        if env_id != saved.get("data", {}).get("init_args", {}).get("env_id", env_id) and named - {env_id}:
            _fail(f"--data.env_id {env_id}: the checkpoint's object sets name {', '.join(sorted(named))} in their "
                  f"variations, so {self.subcommand} would run that env. Pass --data.obj_sets with variations of "
                  f"{env_id} too, or drop --data.env_id.")  # fmt: skip

    def _resume_command(self, err: BaseException) -> str:
        """``rl-lightning fit`` with this run's arguments, its run directory and the checkpoint just written."""
        given, replaced = self._given_args, ("--ckpt_path", "--trainer.default_root_dir")
        # Each replaced flag is dropped with its value (the next argument, or after "=").
        args = [a for prev, a in zip(["", *given], given, strict=False)
                if prev not in replaced and a.split("=")[0] not in replaced]  # fmt: skip
        root = getattr(err, "run_dir", None) or self.trainer.default_root_dir
        extra = ["--trainer.default_root_dir", str(root), "--ckpt_path", str(getattr(err, "checkpoint", ""))]
        return "rl-lightning " + " ".join(shlex.quote(a) for a in [*args, *extra])

    def _check_start(self, ckpt_path: str | None) -> None:
        """Check a resume before the run directory is touched (its W&B run goes on), or a fresh fit's directory.

        Lightning checks a checkpoint only once its loggers have started and the config is
        saved; a refused resume must leave the run as it was (``algos.loading.check_resume``).
        """
        if ckpt_path and isinstance(self.datamodule, EnvDataModule):
            continue_loggers(self.trainer.loggers, check_resume(self.model, self.datamodule, ckpt_path))
        elif not ckpt_path:  # on every rank: one that went on alone would wait for the others in DDP's setup
            root = self.trainer.default_root_dir
            fix = f"Resume it with --ckpt_path <its checkpoint> --trainer.default_root_dir {root}, or pass another"
            try:
                check_new_run_dir(root, f"{fix} --trainer.default_root_dir.")
            except ValueError as err:
                _fail(str(err))

    @staticmethod
    def subcommands() -> dict[str, set[str]]:
        """Lightning's subcommands (with the trainer arguments they skip), less ``predict``: :data:`SUBCOMMANDS`."""
        return {name: skipped for name, skipped in LightningCLI.subcommands().items() if name in SUBCOMMANDS}

    def add_arguments_to_parser(self, parser) -> None:
        parser.set_defaults({"data": {"class_path": "rl_lightning.RolloutDataModule"}})
        # One seed: --seed_everything seeds torch/numpy/python and the data module's envs.
        parser.link_arguments("seed_everything", "data.init_args.seed")

    def before_instantiate_classes(self) -> None:
        """Put ``ckpt_path`` back in the config; give the run its own directory and the library loggers' files in it.

        Their files (and the checkpoints, which Lightning puts under the first logger's directory) then stay in the run
        directory, and a resume appends to them there rather than starting a ``version_1`` beside them.
        """
        if self.subcommand:
            self.config[self.subcommand].ckpt_path = self.ckpt_path
        if self.checkpoint_config is not None:
            self._check_against_checkpoint(self.checkpoint_config)
        trainer = self._subcommand_config().trainer
        if trainer.enable_progress_bar is False:  # Lightning refuses a progress bar callback then
            defaults = self.trainer_defaults
            defaults["callbacks"] = [c for c in defaults["callbacks"] if not isinstance(c, EnvStepProgressBar)]
        if trainer.default_root_dir is None:
            trainer.default_root_dir = os.path.join("runs", time.strftime("%Y-%m-%d_%H-%M-%S"))
        for logger in trainer.logger if isinstance(trainer.logger, list) else [trainer.logger]:
            if not str(getattr(logger, "class_path", "")).startswith("rl_lightning.loggers."):
                continue
            if (given := logger.init_args.get("save_dir")) not in (None, "."):
                # A directory of the user's: Lightning's version_N under it keeps runs apart, and a resume goes on in
                # the version its checkpoint is in (it started a new one: the run's metrics split in two).
                run = os.path.realpath(os.path.join(self.ckpt_path or "", os.pardir, os.pardir))
                logs = os.path.realpath(os.path.join(given, logger.init_args.get("name") or ""))  # its version_N's
                name, mine = os.path.basename(run), bool(self.ckpt_path) and os.path.dirname(run) == logs
                if mine and name.startswith("version_") and logger.init_args.get("version", "") is None:
                    logger.init_args.version = name
                continue
            logger.init_args.save_dir = trainer.default_root_dir
            for key in ("name", "version"):  # CSV and TensorBoard: no lightning_logs/version_N under it
                if key in logger.init_args and logger.init_args[key] is None and logger.class_path != WANDB_LOGGER:
                    logger.init_args[key] = ""


def _section_that_raised(err: BaseException) -> str | None:
    """``"model"``, ``"data"`` or ``"trainer"``: whose constructor raised ``err`` (the innermost in its traceback)."""
    section, tb, owners = None, err.__traceback__, {RLModule: "model", EnvDataModule: "data", pl.Trainer: "trainer"}
    while tb is not None:
        owner = tb.tb_frame.f_locals.get("self")
        section = next((name for cls, name in owners.items() if isinstance(owner, cls)), section)
        tb = tb.tb_next
    return section


def checkpoint_config(ckpt_path: str) -> dict:
    """The ``model``/``data`` config that rebuilds a checkpoint's algorithm and data module.

    Raises:
        SystemExit: With a message naming the file and the fix when it is not a readable rl_lightning checkpoint.
    """
    try:
        ckpt = read_checkpoint(ckpt_path)
    except (FileNotFoundError, ValueError) as err:
        sys.exit(str(err))
    meta = ckpt[CHECKPOINT_KEY]
    model_args, data_args = (
        {k: v for k, v in (ckpt.get(entry) or {}).items() if not k.startswith("_")}
        for entry in ("hyper_parameters", "datamodule_hyper_parameters")
    )
    config = {"model": {"class_path": f"rl_lightning.{meta['algorithm']}", "init_args": model_args}}
    if data_args:
        config["data"] = {"class_path": meta["datamodule"], "init_args": data_args}
    for section in config.values():  # settings an earlier version had: the checkpoint, not the command, names them
        module, _, name = section["class_path"].rpartition(".")
        accepted = inspect.signature(getattr(importlib.import_module(module), name)).parameters
        gone = sorted(set(section["init_args"]) - set(accepted))
        if gone and not any(p.kind == p.VAR_KEYWORD for p in accepted.values()):
            sys.exit(
                f"{ckpt_path} holds {name} settings this version of rl_lightning does not have: {gone} (removed or "
                "renamed since the checkpoint was written). Evaluate it with the version that wrote it, or train "
                "again with this one."
            )
    if "seed" in data_args:  # --seed_everything feeds the data module's seed (a linked argument)
        config["seed_everything"] = data_args.pop("seed")
    return config


def _ckpt_path(args: Sequence[str]) -> str | None:
    """The ``ckpt_path`` the arguments give, from ``--ckpt_path`` or a ``--config`` file (the last one wins)."""
    path = None
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        value = value if eq else (args[i + 1] if i + 1 < len(args) else "")
        if flag == "--ckpt_path":
            path = value
        elif flag == "--config" and os.path.isfile(value):  # a missing or malformed file is the parser's to name
            config = None
            with open(value) as f, contextlib.suppress(yaml.YAMLError, UnicodeDecodeError):
                config = yaml.safe_load(f)
            path = config.get("ckpt_path", path) if isinstance(config, dict) else path
    return None if path in (None, "", "null", "None") else str(path)


#: ``--trainer.logger CSVLogger`` and the like mean the library's loggers (which keep a run's logs across a
#: resume): the short names alone would be ambiguous, as Lightning's classes of the same name are loggers too.
LIBRARY_LOGGERS = ("CSVLogger", "TensorBoardLogger", "WandbLogger")


def _with_library_loggers(args: list[str]) -> list[str]:
    """``--trainer.logger <short name>`` of a library logger, written as its import path."""
    out = []
    for i, arg in enumerate(args):
        flag, eq, value = arg.partition("=")
        if eq and flag == "--trainer.logger" and value in LIBRARY_LOGGERS:
            arg = f"{flag}=rl_lightning.loggers.{value}"
        elif i and args[i - 1] == "--trainer.logger" and arg in LIBRARY_LOGGERS:
            arg = f"rl_lightning.loggers.{arg}"
        out.append(arg)
    return out


def _with_checkpoint_config(args: list[str]) -> tuple[list[str], dict | None]:
    """``validate``/``test`` with a ``ckpt_path``: the checkpoint's model and data settings go first; the arguments,
    and that config (``None`` without one).

    They are written to a config file placed right after the subcommand, so anything else
    on the command line overrides them.
    """
    ckpt_path = _ckpt_path(args)
    if ckpt_path in ("last", "best", "hpc", "registry"):  # Lightning's names for a checkpoint it looks up
        _fail(f"ckpt_path {ckpt_path}: the CLI takes the checkpoint's file, e.g. --ckpt_path "
              "<run>/checkpoints/last.ckpt with --trainer.default_root_dir <run> (the command an interrupted fit "
              "prints).")  # fmt: skip
    if not (args and args[0] in ("validate", "test") and ckpt_path):
        return args, None
    config = checkpoint_config(ckpt_path)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", prefix="rl_lightning_ckpt_", delete=False) as f:
        yaml.safe_dump(config, f)
    atexit.register(os.unlink, f.name)
    return [args[0], "--config", f.name, *args[1:]], config


@contextlib.contextmanager
def _evaluation_warnings():
    """Without Lightning's advice to add the checkpoint's callbacks: the library's act only in a fit, not here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", ".*callbacks used to create the checkpoint need to be provided")
        yield


#: Subcommands that are not Lightning's, each an argparse ``main`` of its own.
TOOLS = {
    "plot": "rl_lightning.launch.curves",
    "play": "rl_lightning.launch.play",
    "export": "rl_lightning.launch.export",
}


def main(args: Sequence[str] | None = None) -> RLCLI | None:
    """Entry point of the ``rl-lightning`` console script; returns the CLI (its trainer, model, data)."""
    argv = list(sys.argv[1:] if args is None else args)
    if argv and argv[0] in TOOLS:
        importlib.import_module(TOOLS[argv[0]]).main(argv[1:])
        return None
    return RLCLI(args=args)


def console() -> None:
    """The ``rl-lightning`` console script: ``main`` without a return value, so a finished run exits with 0."""
    main()


if __name__ == "__main__":
    console()
