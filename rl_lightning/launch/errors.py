"""Config errors as one paragraph that names the key and the fix, not a deep traceback.

Three moments can fail: composing the config (a typo'd key, an unknown group option, bad override syntax; checked by
:func:`check_overrides` before Hydra starts the job), building the objects from it (a wrong type or an impossible value,
an unknown env; explained by :func:`explain_build_error`) and starting the run (an env whose spaces the algorithm cannot
handle, a checkpoint that does not fit; explained by :func:`explain_run_error`). :func:`raised_by_library` and
:func:`culprit_key` serve the ``rl-lightning`` CLI too.
"""

from __future__ import annotations

import linecache
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, InstantiationException
from lightning.fabric.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from rl_lightning.checks import did_you_mean


class ConfigError(Exception):
    """A configuration mistake, explained for the user."""


def check_overrides(config_dir: str, config_name: str, overrides: Sequence[str]) -> None:
    """Compose the config once to catch composition mistakes before Hydra runs the job.

    Raises:
        ConfigError: With the key, what is wrong, and the fix.
    """
    try:  # the overrides with every sweep (seed=1,2,3) as its first value
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        single = [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_sweep_override()
                  else o.input_line for o in parsed if not o.key_or_group.startswith("hydra")]  # fmt: skip
    except HydraException as err:
        raise ConfigError(
            f"Cannot parse the command-line overrides {list(overrides)}: {str(err).splitlines()[0]}. "
            "Write overrides as key=value (e.g. algo.lr=1e-3 env.num_envs=16), lists as [a,b], sweeps "
            "with -m key=a,b; quote a value that holds '=' or ',' (\"ckpt_path='runs/x/checkpoints/epoch=3-"
            "env_steps=4096.ckpt'\")."
        ) from None
    try:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            compose(config_name, overrides=single)
    except HydraException as err:
        raise ConfigError(_explain_composition(str(err), config_dir, config_name, single)) from None


def _explain_composition(message: str, config_dir: str, config_name: str, overrides: list[str]) -> str:
    if missing := re.search(r"Could not (?:find|load) '([\w/]+)/([\w.-]+)'", message):  # load: in a list of options
        group, option = missing.groups()
        options = re.findall(r"^\t(\S+)$", message.split("Config search path")[0], flags=re.M) or sorted(
            name.removesuffix(".yaml") for name in os.listdir(os.path.join(config_dir, group)))  # fmt: skip
        return (
            f"Unknown {group} '{option}'.{did_you_mean(option, options)} Choose one of: {', '.join(options)} "
            f"(e.g. {'+' if group == 'experiment' else ''}{group}={options[0] if options else '...'}"
            + (", or several: logger=[wandb,csv])." if group == "logger" else ").")
        )
    if override := re.search(r"Could not override '([\w.]+)'", message):
        key = override.group(1)
        parent, _, leaf = key.rpartition(".")
        keys = _keys_at(config_dir, config_name, overrides, key, parent)
        where = f"'{parent}'" if parent else "the top level"
        # A key that lives in another group (a learning setting under data., an env setting under algo.): name it.
        elsewhere = [f"{group}.{leaf}" for group in ("algo", "data", "env", "trainer") if group != parent
                     and leaf in _keys_at(config_dir, config_name, overrides, key, group)]  # fmt: skip
        hint = f" Did you mean '{elsewhere[0]}'?" if elsewhere else did_you_mean(leaf, keys)
        return (
            f"Unknown config key '{key}'.{hint} Keys of {where}: {', '.join(keys)}. "
            f"Fix the spelling; to add a new key on purpose, write +{key}=..."
        )
    return f"The config could not be composed: {' '.join(message.split())}"


def _keys_at(config_dir: str, config_name: str, overrides: list[str], bad: str, parent: str) -> list[str]:
    """Keys under ``parent`` in the config composed without the offending override."""
    rest = [o for o in overrides if not o.lstrip("+~").startswith(bad + "=")]
    try:
        with initialize_config_dir(config_dir=config_dir, version_base="1.3"):
            cfg = compose(config_name, overrides=rest)
        node = OmegaConf.select(cfg, parent) if parent else cfg
        return sorted(node.keys()) if isinstance(node, DictConfig) else []
    except HydraException:
        return []


def explain_build_error(err: Exception, cfg: DictConfig) -> str | None:
    """Explain an error raised while building the run's objects; ``None`` if it is not a config mistake."""
    group = None
    if isinstance(err, InstantiationException):
        found = re.search(r"full_key: ([\w.]+)", str(err))
        group = found.group(1).split(".")[0] if found else None
        target = re.search(r"Error locating target '([^']+)'", str(err))
        if target and found:
            cause = err
            while cause.__cause__ is not None:  # the import's own error (a module the target's module imports)
                cause = cause.__cause__
            return (
                f"Config key '{found.group(1)}._target_' names '{target.group(1)}', which cannot be imported "
                f"({str(cause).strip().splitlines()[0]}). Give the import path of a class Python can import "
                "(installed, or on PYTHONPATH), with what it imports."
            )
        err = err.__cause__ or err
    if isinstance(err, MissingMandatoryValue):
        key = _config_key(err.full_key or "?", cfg)
        return f"Config key '{key}' has no value ('???'). Set it on the command line ({key}=...) or in the config file."
    if isinstance(err, OmegaConfBaseException):
        key = _config_key(getattr(err, "full_key", None) or "?", cfg)
        return f"Config key '{key}' cannot be used: {str(err).splitlines()[0]}. Fix it: {key}=..."
    # ValueErrors are the constructors' argument checks; of TypeErrors only a wrong or
    # missing keyword is the config's doing (anything else is a bug and keeps its traceback).
    config_type_error = isinstance(err, TypeError) and (
        re.search(r"unexpected keyword|missing \d+ required", str(err)) or raised_by_library(err)
    )
    if group == "trainer" and (isinstance(err, (MisconfigurationException, ValueError)) or (
        isinstance(err, TypeError) and not config_type_error)):  # fmt: skip
        return (
            f"The trainer settings cannot run here: {str(err).strip()} Pick settings this machine supports "
            "(e.g. trainer=default, or trainer.accelerator=cpu trainer.devices=1)."
        )
    if not (isinstance(err, ValueError) or config_type_error):
        return None
    text = str(err).strip()
    # The key the message is about (``lr must be ...``: ``algo.lr``; ``'tset'``: ``env.train_obj_set``).
    names = dict.fromkeys(g for g in (group, "algo", "data", "env", "trainer", "logger", "callbacks") if g)
    key = culprit_key(text, [(n, OmegaConf.to_container(cfg[n])) for n in names if isinstance(cfg.get(n), DictConfig)])
    fix = f" Fix it on the command line ({key}=...) or in the config file." if key else ""
    where = f" in '{key}'" if key else (f" in group '{group}'" if group else "")
    return f"Invalid config value{where}: {text}{fix}"


def _config_key(key: str, cfg: DictConfig) -> str:
    """Where a data-module argument lives in the config: the env group's keys are merged into ``data``."""
    group, _, name = key.partition(".")
    in_env = group == "data" and isinstance(cfg.get("env"), DictConfig) and name in cfg.env.keys()  # "???" too
    return f"env.{name}" if in_env else key


#: The package's directory: errors raised by code under it are the library's own.
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def raised_by_library(err: BaseException) -> bool:
    """Whether ``err`` is one of rl_lightning's own refusals: raised by a ``raise`` statement in the package.

    Those messages name what was wrong and the fix (a bad argument, spaces an algorithm cannot
    handle, a checkpoint that does not fit). An error that surfaced from inside an operation
    (``1 + None``, a failing tensor op) is a bug and keeps its traceback.
    """
    if (tb := err.__traceback__) is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    filename = os.path.abspath(tb.tb_frame.f_code.co_filename)
    in_package = filename.startswith(_PACKAGE_DIR + os.sep)
    return in_package and linecache.getline(filename, tb.tb_lineno).lstrip().startswith("raise ")


def library_error(err: BaseException | None) -> BaseException | None:
    """The library's own refusal in ``err``'s chain of causes (``raise ... from``, as jsonargparse wraps it)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if raised_by_library(err):
            return err
        seen.add(id(err))
        err = err.__cause__
    return None


def culprit_key(text: str, groups: Sequence[tuple[str, Mapping[str, Any]]]) -> str | None:
    """The ``group.key`` an error message is about, or ``None``.

    In order: the argument the message starts with (``lr must be ...``, ``num_minibatches=3 ...``; an entry of one:
    ``obj_sets.train: ...``), the first quoted value that one of the arguments holds (``Unknown object set 'tset'``;
    the value after ``got`` first, then the others), any argument named among its first words.

    Args:
        text: The error message.
        groups: ``(group, arguments)`` pairs, searched in order.
    """
    lead = re.match(r"\s*([A-Za-z_]\w*)((?:\.\w+)*)", text)  # an argument, or a dotted entry of one (obj_sets.train)
    if lead:
        for group, args in groups:
            if lead.group(1) in args:
                return f"{group}.{lead.group(1)}{lead.group(2)}"
    for quoted in [*re.findall(r"got '([^']+)'", text), *re.findall(r"'([^']+)'", text)]:  # the given value first
        for group, args in groups:
            if key := _key_holding(args, quoted):
                return f"{group}.{key}"
    for word in re.findall(r"[A-Za-z_]\w*", text)[:12]:
        for group, args in groups:
            if word in args:
                return f"{group}.{word}"
    return None


def _key_holding(args: Mapping[str, Any], quoted: str) -> str | None:
    """The (dotted) key of ``args`` whose value is ``quoted`` or a list holding it (``wandb.mode``) or holding a mapping
    that holds it (``wrappers``: ``[{wrapper: ...}]``)."""
    for key, value in args.items():
        if value == quoted or isinstance(value, (list, tuple)) and any(
                v == quoted or isinstance(v, Mapping) and _key_holding(v, quoted) for v in value):  # fmt: skip
            return key
        if inner := (_key_holding(value, quoted) if isinstance(value, Mapping) else None):
            return f"{key}.{inner}"
    return None


def explain_run_error(err: Exception, cfg: DictConfig) -> str | None:
    """Explain an error raised while the run starts or runs (``fit``, ``test``); ``None`` if it is not the config's.

    The library refuses what it cannot do before any work: an algorithm on spaces it cannot
    handle (DQN on continuous actions), an algorithm on the wrong data module, a checkpoint
    that does not fit. Those refusals already name the culprit and the fix.
    """
    if isinstance(err, MisconfigurationException):  # Lightning's refusal of trainer settings
        return f"Lightning refuses these settings: {' '.join(str(err).split())} Fix the trainer group (trainer.*=...)."
    refusal = library_error(err)
    return None if refusal is None else " ".join(str(refusal).split())
