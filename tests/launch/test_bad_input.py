"""Bad input through every front door ends with one message naming the culprit and the fix, before any work.

One table: each row is a front door (``api``: the Python API; ``hydra``: ``train.py``'s
config, driven in-process the way ``train.py`` runs it; ``cli``: ``rl-lightning``,
in-process through ``main``), the input, and the text the message must contain: the
culprit (argument, config key, flag or file) and the fix. A few rows run the real entry
points as subprocesses, to show they print the message and exit non-zero without a
traceback. Checkpoint rows check that the file pointed at is unchanged afterwards, and
rows that reach ``fit`` that no env step was taken and no checkpoint written.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from hydra import compose, initialize_config_dir

from rl_lightning import DQN, PPO, SAC, ReplayDataModule, RolloutDataModule
from rl_lightning.launch.app import train
from rl_lightning.launch.cli import main
from rl_lightning.launch.errors import ConfigError, check_overrides
from tests.helpers import quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data
from tests.launch.conftest import REPO, TRAIN, offline_env, run

CONF = os.path.join(REPO, "conf")
RL_LIGHTNING = os.path.join(os.path.dirname(sys.executable), "rl-lightning")
NO_GPU = pytest.mark.skipif(torch.cuda.is_available(), reason="the machine has a GPU: trainer=gpu runs")


@dataclasses.dataclass
class Ctx:
    """What a row can use: the checkpoint files and a directory of its own; ``fit`` records what it built."""

    files: SimpleNamespace
    tmp: str
    built: dict[str, Any] = dataclasses.field(default_factory=dict)

    def fit(self, model: pl.LightningModule, data: pl.LightningDataModule, **kwargs: Any) -> None:
        """``Trainer.fit`` with checkpointing into this row's directory (recorded for the checks after)."""
        trainer = quiet_trainer(self.tmp, max_epochs=1)
        self.built.update(data=data, trainer=trainer)
        trainer.fit(model, data, **kwargs)


# Each row: door, input (Python: a function of Ctx; Hydra: overrides; CLI: arguments; '{ppo}' and
# the like name the checkpoint files), the texts the message must contain, and marks.
ROWS = [
    # ------------------------------------------------------------------ Python API
    ("api", "ppo-negative-lr", lambda c: PPO(lr=-1.0), ["lr must be a positive number", "-1.0"]),
    ("api", "ppo-zero-hidden-size", lambda c: PPO(hidden_sizes=[64, 0]), ["hidden_sizes", "list of positive integers"]),
    ("api", "sac-empty-hidden-sizes", lambda c: SAC(hidden_sizes=[]), ["hidden_sizes", "non-empty list"]),
    ("api", "ppo-zero-budget", lambda c: PPO(total_timesteps=0), ["total_timesteps", "positive integer"]),
    ("api", "sac-tau-above-one", lambda c: SAC(tau=2.0), ["tau must be a number in (0, 1]", "2.0"]),
    ("api", "dqn-unknown-loss", lambda c: DQN(loss_function="mse"), ["loss_function", "'huber'", "'mse'"]),
    ("api", "switch-given-as-text", lambda c: DQN(double_dqn="no"), ["double_dqn must be true or false, got 'no'"]),
    ("api", "utd-ratio-nan", lambda c: ReplayDataModule(utd_ratio=float("nan")), ["utd_ratio must be a finite number"]),
    ("api", "utd-ratio-inf", lambda c: ReplayDataModule(utd_ratio=float("inf")), ["utd_ratio must be a finite number"]),
    (
        "api",
        "scratch-dir-unusable",  # a raw FileNotFoundError at the first write, in the middle of the fit
        lambda c: c.fit(
            SAC(), ReplayDataModule(env_id="Pendulum-v1", storage="memmap", scratch_dir="/proc/rl-lightning-scratch")
        ),  # no mkdir in /proc
        ["scratch_dir=", "cannot hold the memory-mapped replay buffer", "storage=memory"],
    ),
    (
        "api",
        "minibatches-do-not-divide-rollout",
        lambda c: c.fit(PPO(num_minibatches=3), RolloutDataModule(num_envs=2, rollout_steps=16)),
        ["num_minibatches=3", "16 x 2 = 32", "choose a divisor"],
    ),
    (
        "api",
        "steps-per-epoch-not-multiple-of-envs",
        lambda c: ReplayDataModule(num_envs=3, steps_per_epoch=100),
        ["steps_per_epoch=100", "num_envs=3", "choose a multiple"],
    ),
    (
        "api",
        "unknown-env-id",
        lambda c: RolloutDataModule(env_id="CartPol-v1"),
        ["'CartPol-v1'", "Did you mean", "'CartPole-v1'"],
    ),
    (
        "api",
        "unknown-object-set",
        lambda c: RolloutDataModule(eval_obj_sets=["train", "ood"]),
        ["eval_obj_sets: unknown object set 'ood'", "available: ['test', 'train']"],
    ),
    ("api", "unknown-storage", lambda c: ReplayDataModule(storage="disk"), ["storage", "'memory'", "'disk'"]),
    (
        "api",
        "dqn-on-continuous-actions",
        lambda c: c.fit(DQN(total_timesteps=100), tiny_replay_data("Pendulum-v1")),
        ["DQN", "needs a Discrete action space", "Box", "use SAC"],
    ),
    (
        "api",
        "sac-on-discrete-actions",
        lambda c: c.fit(SAC(total_timesteps=100), tiny_replay_data("CartPole-v1")),
        ["SAC acts in a 1-D Box action space", "Discrete(2)", "use DQN or PPO"],
    ),
    (
        "api",
        "ppo-on-replay-data",
        lambda c: c.fit(tiny_ppo(total_timesteps=100), tiny_replay_data("CartPole-v1")),
        [
            "PPO learns from a RolloutDataModule, got a ReplayDataModule",
            "Pass RolloutDataModule(env_id=...)",
            "Hydra: data=rollout, as +experiment=ppo sets",
        ],  # fmt: skip
    ),
    (
        "api",
        "load-truncated-checkpoint",
        lambda c: PPO.load_from_checkpoint(c.files.truncated),
        ["{truncated}", "not a complete checkpoint archive", "earlier checkpoint"],
    ),
    (
        "api",
        "load-text-file",
        lambda c: PPO.load_from_checkpoint(c.files.text),
        ["{text}", "it is not a checkpoint archive, but another kind of file", "checkpoints/ directory"],
    ),
    (
        "api",
        "load-exported-torchscript-policy",
        lambda c: PPO.load_from_checkpoint(c.files.scripted),
        ["'{scripted}' is an exported TorchScript policy", "load it with torch.jit.load", "the run's .ckpt file"],
    ),
    (
        "api",
        "load-missing-checkpoint",
        lambda c: PPO.load_from_checkpoint(c.files.missing),
        ["{missing}", "does not exist", "checkpoints/"],
    ),
    (
        "api",
        "load-other-algorithm",
        lambda c: DQN.load_from_checkpoint(c.files.ppo),
        ["{ppo}", "holds a PPO model, not a DQN one", "PPO.load_from_checkpoint"],
    ),
    (
        "api",
        "load-checkpoint-not-from-rl-lightning",
        lambda c: PPO.load_from_checkpoint(c.files.foreign),
        ["{foreign}", "not written by rl_lightning", "Load it with the class that wrote it"],
    ),
    (
        "api",
        "load-with-other-hidden-sizes",
        lambda c: PPO.load_from_checkpoint(c.files.ppo, hidden_sizes=[32]),
        ["{ppo}", "hidden_sizes: checkpoint [64, 64], given [32]", "Drop hidden_sizes=..."],
    ),
    (
        "api",
        "resume-with-other-hidden-sizes",
        lambda c: c.fit(
            tiny_ppo(total_timesteps=10_000, hidden_sizes=[32]), tiny_rollout_data(), ckpt_path=c.files.ppo
        ),
        ["{ppo}", "hidden_sizes: checkpoint [64, 64], this model [32]", "Build the model with the checkpoint's"],
    ),
    (
        "api",
        "resume-on-env-with-other-spaces",
        lambda c: c.fit(
            tiny_ppo(total_timesteps=10_000),
            tiny_rollout_data(env_id="Acrobot-v1", obj_sets={"train": [{}], "test": [{}]}),
            ckpt_path=c.files.ppo,
        ),
        ["{ppo}", "trained on CartPole-v1", "Discrete(2)", "built for Acrobot-v1", "env_id='CartPole-v1'"],
    ),
    (
        "api",
        "resume-from-truncated-checkpoint",
        lambda c: c.fit(tiny_ppo(total_timesteps=10_000), tiny_rollout_data(), ckpt_path=c.files.truncated),
        ["{truncated}", "not a complete checkpoint archive"],
    ),
    (
        "api",
        "resume-from-missing-checkpoint",
        lambda c: c.fit(tiny_ppo(total_timesteps=10_000), tiny_rollout_data(), ckpt_path=c.files.missing),
        ["{missing}", "does not exist"],
    ),
    # ------------------------------------------------------------------ Hydra (train.py)
    ("hydra", "unknown-key", ["algo.lrr=1e-3"], ["'algo.lrr'", "Did you mean 'lr'", "+algo.lrr=..."]),
    (
        "hydra",
        "unknown-experiment",
        ["+experiment=ppo_contnuous"],
        ["Unknown experiment 'ppo_contnuous'", "Did you mean 'ppo_continuous'", "+experiment="],
    ),
    (
        "hydra",
        "variation-of-an-unknown-env",  # was put on env.env_id, which is right
        ["env.obj_sets={{train:[{{}}],test:[{{env_id:CartPol-v1}}]}}"],
        ["'env.obj_sets.test'", "obj_sets.test: a variation's env_id", "'CartPol-v1'"],
    ),
    (
        "hydra",
        "test-set-of-other-spaces",  # trained first, then failed at the first evaluation
        ["env.obj_sets={{train:[{{seeds:[0,10]}}],test:[{{env_id:Acrobot-v1}}]}}"],
        [
            "Object set 'test' builds envs of Box(6,) observations, Discrete(3) actions",
            "object set 'train'",
            "Box(4,) observations, Discrete(2) actions",
            "the same spaces",
        ],
    ),  # fmt: skip
    (
        "hydra",
        "variation-keyword-the-env-does-not-take",  # a raw TypeError from gymnasium.make while the envs were built
        ["env.obj_sets={{train:[{{make_kwargs:{{bogus:1}}}}],test:[{{}}]}}"],
        [
            "Variation 'CartPole-v1' passes make_kwargs {{'bogus': 1}}",
            "unexpected keyword argument 'bogus'",
            "Fix or drop them in the object set",
        ],
    ),  # fmt: skip
    (
        "hydra",
        "wrapper-class-not-a-wrapper",  # a raw "'TimeLimit' object is not iterable" from dict(env)
        ["env.wrappers=[{{wrapper:builtins.dict}}]"],
        ["'env.wrappers'", "Wrapper 'builtins.dict' is a class but not a gymnasium.Wrapper", "function env -> env"],
    ),
    (
        "hydra",
        "wrapper-function-returns-no-env",
        ["env.wrappers=[builtins.print]"],
        ["Wrapper 'builtins.print' returned NoneType, not a gymnasium env", "returns it wrapped"],
    ),
    ("hydra", "debug-not-a-switch", ["debug=no"], ["debug must be true or false, got 'no'", "debug=false"]),
    ("hydra", "trainer-devices-not-a-number", ["trainer.devices=abc"], ["trainer settings cannot run", "`devices`"]),
    ("hydra", "max-epochs-not-a-number", ["trainer.max_epochs=abc"], ["trainer.max_epochs must be int, got 'abc'"]),
    (
        "hydra",
        "data-target-unimportable",
        ["data._target_=foo.Bar"],
        ["'data._target_' names 'foo.Bar'", "(No module named 'foo')"],
    ),
    ("hydra", "actor-not-a-module", ["algo.actor=5"], ["actor must be a torch.nn.Module", "got 5"]),
    (
        "hydra",
        "wandb-mode-misspelt",
        ["logger=wandb", "logger.wandb.mode=on"],
        ["Invalid config value in 'logger.wandb.mode'", "got 'on'"],
    ),
    ("hydra", "unknown-logger", ["logger=tensorbord"], ["Unknown logger 'tensorbord'", "'tensorboard'", "logger="]),
    # In a list of loggers Hydra says "Could not load", naming no options: they are read from conf/logger.
    (
        "hydra",
        "unknown-logger-in-a-list",
        ["logger=[tensorboard,cvs]"],
        ["Unknown logger 'cvs'. Did you mean 'csv'? Choose one of: csv, ", "tensorboard", "logger=[wandb,csv]"],
    ),
    ("hydra", "unparsable-override", ["algo.lr=[1,"], ["Cannot parse", "algo.lr=[1,", "key=value"]),
    (
        "hydra",
        "unquoted-checkpoint-name",
        ["ckpt_path=runs/x/checkpoints/epoch=3-env_steps=4096.ckpt"],
        ["Cannot parse", "quote a value that holds '='", "ckpt_path='runs/x/checkpoints/epoch=3-env_steps=4096.ckpt'"],
    ),
    (
        "hydra",
        "num-envs-not-a-number",
        ["env.num_envs=abc"],
        ["'env.num_envs'", "positive integer", "env.num_envs=..."],
    ),
    ("hydra", "negative-lr", ["algo.lr=-1"], ["'algo.lr'", "positive number", "algo.lr=..."]),
    (
        "hydra",
        "switch-given-as-text",  # 'no' is text to Hydra, which `if` took for on
        ["+experiment=dqn", "data.save_replay_buffer=no"],
        ["'data.save_replay_buffer'", "save_replay_buffer must be true or false, got 'no'"],
    ),
    ("hydra", "negative-seed", ["seed=-1"], ["seed must be an integer in [0, 2**32), got -1", "seed=0"]),
    (
        "hydra",
        "empty-object-set",
        ["env.obj_sets={{train:[],test:[{{}}]}}"],  # braces doubled: the rows are str.format templates
        ["'env.obj_sets.train'", "non-empty list of variations", "env.obj_sets.train=..."],
    ),
    (
        "hydra",
        "minibatches-do-not-divide-rollout",
        ["algo.num_minibatches=3"],
        ["num_minibatches=3", "choose a divisor", "algo.num_minibatches=..."],
    ),
    (
        "hydra",
        "unknown-env-id",
        ["env.env_id=CartPol-v1"],
        ["'env.env_id'", "Did you mean", "'CartPole-v1'", "env.env_id=..."],
    ),
    ("hydra", "env-id-not-a-string", ["env.env_id=123"], ["'env.env_id'", "gymnasium id string", "env.env_id=..."]),
    (
        "hydra",
        "unknown-object-set",
        ["env.train_obj_set=tset"],
        ["'env.train_obj_set'", "train_obj_set: unknown object set 'tset'", "env.train_obj_set=..."],
    ),
    (
        "hydra",
        "object-set-not-a-name",  # its value held no quotes: the error was put on env.eval_obj_sets, which holds 'test'
        ["env.train_obj_set=3"],
        ["'env.train_obj_set'", "train_obj_set: unknown object set 3", "env.train_obj_set=..."],
    ),
    (
        "hydra",
        "unknown-vectorization",
        ["env.vectorization=threads"],
        ["'env.vectorization'", "'sync'", "env.vectorization=..."],
    ),
    (
        "hydra",
        "dqn-unknown-loss",
        ["+experiment=dqn", "algo.loss_function=mse"],
        ["'algo.loss_function'", "'huber'", "algo.loss_function=..."],
    ),
    ("hydra", "test-ckpt-worst", ["test_ckpt=worst"], ["test_ckpt", "'worst'", "test_ckpt=best"]),
    ("hydra", "gpu-trainer-without-gpu", ["trainer=gpu"], ["cannot run here", "trainer=default"], [NO_GPU]),
    (
        "hydra",
        "dqn-on-continuous-actions",
        ["algo=dqn", "data=replay", "env=pendulum"],
        ["DQN", "needs a Discrete action space", "use SAC"],
        [],
    ),
    (
        "hydra",
        "ppo-on-replay-data",
        ["algo=ppo", "data=replay"],
        ["PPO learns from a RolloutDataModule", "Hydra: data=rollout"],
        [],
    ),
    ("hydra", "resume-missing-checkpoint", ["ckpt_path={missing}"], ["ckpt_path:", "{missing}", "does not exist"]),
    (
        "hydra",
        "resume-truncated-checkpoint",
        ["ckpt_path={truncated}"],
        ["ckpt_path:", "{truncated}", "not a complete checkpoint archive", "earlier checkpoint"],
    ),
    (
        "hydra",
        "resume-last-without-run-dir",
        ["ckpt_path=last"],
        ["ckpt_path:", "last.ckpt", "does not exist", "hydra.run.dir=<the run's directory>"],
    ),
    (
        "hydra",
        "resume-incompatible-config",
        ["ckpt_path={ppo}", "algo.hidden_sizes=[32]", "algo.num_minibatches=2"],
        ["hidden_sizes: checkpoint [64, 64], this model [32]", "{ppo}"],
    ),
    (
        "hydra",
        "resume-other-algorithm",
        ["+experiment=dqn", "ckpt_path={ppo}"],
        ["PPO", "{ppo}", "DQN"],
    ),
    # ------------------------------------------------------------------ rl-lightning CLI
    ("cli", "unknown-subcommand", ["fitt"], ["Unknown subcommand 'fitt'", "Did you mean 'fit'"]),
    ("cli", "missing-model", ["fit"], ["Missing --model", "PPO, DQN, SAC", "--model PPO"]),
    (
        "cli",
        "model-argument-without-model",
        ["fit", "--model.lr", "0.1"],
        ["--model.lr needs the class first", "pass --model", "--model PPO --model.lr"],
    ),
    (
        "cli",
        "unknown-model-class",
        ["fit", "--model", "PPX"],
        ["--model class 'PPX'", "Did you mean 'PPO'", "PPO, DQN, SAC"],
    ),
    (
        "cli",
        "unknown-data-class",
        ["fit", "--model", "PPO", "--data", "ReplayDataModul"],
        ["--data class 'ReplayDataModul'", "Did you mean 'ReplayDataModule'"],
    ),
    (
        "cli",
        "unknown-flag",
        ["fit", "--model", "PPO", "--modl", "PPO"],
        ["Unknown argument --modl", "Did you mean '--model'"],
    ),
    (
        "cli",
        "unknown-model-argument",
        ["fit", "--model", "PPO", "--model.lrr", "1"],
        ["--model.lrr", "Did you mean 'lr'"],
    ),
    (
        "cli",
        "lr-not-a-number",
        ["fit", "--model", "PPO", "--model.lr", "fast"],
        ["--model.lr", "expected float, got 'fast'"],
    ),
    (
        "cli",
        "negative-lr",
        ["fit", "--model", "PPO", "--model.lr", "-1"],
        ["--model.lr", "lr must be a positive number", "Fix --model.lr"],
    ),
    (
        "cli",
        "save-interval-not-a-number",
        ["fit", "--model", "PPO", "--model.save_interval", "x"],
        ["Invalid value for --model.save_interval: expected int or null, got 'x'"],
    ),
    (
        "cli",
        "unknown-logger-class",
        ["fit", "--model", "PPO", "--trainer.logger", "MyLogger"],
        ["Unknown --trainer.logger class 'MyLogger'", "CSVLogger, TensorBoardLogger, WandbLogger", "or false"],
    ),
    (
        "cli",
        "misspelt-logger-class",
        ["fit", "--model", "PPO", "--trainer.logger", "CSVLoger"],
        ["Unknown --trainer.logger class 'CSVLoger'", "Did you mean 'CSVLogger'?"],
    ),
    (
        "cli",
        "logger-that-does-not-import",
        ["fit", "--model", "PPO", "--trainer.logger", "mypkg.MyLogger"],
        ["--trainer.logger mypkg.MyLogger cannot be built: No module named 'mypkg'", "PYTHONPATH"],
    ),
    (
        "cli",
        "devices-not-a-number",
        ["fit", "--model", "PPO", "--trainer.devices", "abc"],
        ["trainer settings cannot run here", "--trainer.devices abc"],
    ),
    (
        "cli",
        "actor-not-a-module",
        ["fit", "--model", "PPO", "--model.actor", "5"],
        ["Invalid value for --model.actor: expected Module or null, got '5'"],
    ),
    (
        "cli",
        "max-epochs-not-a-number",
        ["fit", "--model", "PPO", "--trainer.max_epochs", "abc"],
        ["--trainer.max_epochs", "expected int or null, got 'abc'"],
    ),
    (
        "cli",
        "unknown-env-id",
        ["fit", "--model", "PPO", "--data.env_id", "CartPol-v1"],
        ["--data.env_id", "'CartPole-v1'", "Fix --data.env_id"],
    ),
    (
        "cli",
        "unknown-object-set",
        ["fit", "--model", "PPO", "--data.eval_obj_sets", "[train,ood]"],
        ["--data.eval_obj_sets", "eval_obj_sets: unknown object set 'ood'", "Fix --data.eval_obj_sets"],
    ),
    (
        "cli",
        "minibatches-do-not-divide-rollout",
        ["fit", "--model", "PPO", "--data.num_envs", "2", "--data.rollout_steps", "16", "--model.num_minibatches", "3"],
        ["--model.num_minibatches", "choose a divisor", "16 x 2 = 32"],
    ),
    (
        "cli",
        "sac-tau-above-one",
        ["fit", "--model", "SAC", "--data", "ReplayDataModule", "--model.tau", "2"],
        ["--model.tau", "(0, 1]", "Fix --model.tau"],
    ),
    (
        "cli",
        "missing-config-file",
        ["fit", "--model", "PPO", "--config", "{missing}"],
        ["--config", "{missing}", "does not exist"],
    ),
    (
        "cli",
        "gpu-without-gpu",
        ["fit", "--model", "PPO", "--trainer.accelerator", "gpu"],
        ["--trainer.accelerator gpu", "cannot run here", "--trainer.accelerator cpu"],
        [NO_GPU],
    ),
    (
        "cli",
        "dqn-on-continuous-actions",
        ["fit", "--model", "DQN", "--data", "ReplayDataModule", "--data.env_id", "Pendulum-v1"],
        ["DQN", "needs a Discrete action space", "use SAC"],
    ),
    (
        "cli",
        "sac-without-its-data-module",  # the CLI's default --data is PPO's
        ["fit", "--model", "SAC", "--data.env_id", "Pendulum-v1"],
        ["SAC learns from a ReplayDataModule, got a RolloutDataModule", "the CLI: --data ReplayDataModule"],
    ),
    (
        "cli",
        "ppo-on-replay-data",
        ["fit", "--model", "PPO", "--data", "ReplayDataModule", "--data.env_id", "CartPole-v1"],
        ["PPO learns from a RolloutDataModule, got a ReplayDataModule"],
    ),
    (
        "cli",
        "test-truncated-checkpoint",
        ["test", "--ckpt_path", "{truncated}"],
        ["{truncated}", "not a complete checkpoint archive", "earlier checkpoint"],
    ),
    (
        "cli",
        "test-exported-torchscript-policy",
        ["test", "--ckpt_path", "{scripted}"],
        ["'{scripted}' is an exported TorchScript policy", "torch.jit.load"],
    ),
    ("cli", "test-missing-checkpoint", ["test", "--ckpt_path", "{missing}"], ["{missing}", "does not exist"]),
    (
        "cli",
        "test-checkpoint-not-from-rl-lightning",
        ["test", "--ckpt_path", "{foreign}"],
        ["{foreign}", "not written by rl_lightning", "checkpoints/"],
    ),
    (
        "cli",
        "test-with-other-hidden-sizes",
        ["test", "--ckpt_path", "{ppo}", "--model.hidden_sizes", "[32]"],
        ["{ppo}", "hidden_sizes: checkpoint [64, 64], this model [32]"],
    ),
    (
        "cli",
        "fit-from-truncated-checkpoint",
        ["fit", "--model", "PPO", "--ckpt_path", "{truncated}"],
        ["{truncated}", "not a complete checkpoint archive"],
    ),
]

# The real entry points as subprocesses (a few seconds each): the message, a non-zero exit, no traceback.
PROCESS_ROWS = [
    ("hydra", "num-envs-not-a-number", ["env.num_envs=abc"], ["Config error:", "'env.num_envs'", "env.num_envs=..."]),
    # A learning setting in the data group is an unknown key there, pointing to the algorithm's.
    (
        "hydra",
        "learning-setting-under-data",
        ["data.num_minibatches=3"],
        ["Config error:", "Unknown config key 'data.num_minibatches'", "Did you mean 'algo.num_minibatches'?"],
    ),
    ("cli", "negative-lr", ["fit", "--model", "PPO", "--model.lr", "-1"], ["error:", "--model.lr", "positive number"]),
    (
        "cli",
        "test-truncated-checkpoint",
        ["test", "--ckpt_path", "{truncated}"],
        ["{truncated}", "not a complete checkpoint archive"],
    ),
]


def _params(rows, prefix=""):
    params = []
    for door, name, given, expected, *marks in rows:
        params.append(pytest.param(door, given, expected, id=f"{prefix}{door}-{name}", marks=marks[0] if marks else ()))
    return params


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> SimpleNamespace:
    """A 1-epoch PPO checkpoint on CartPole-v1 (hidden sizes [64, 64]) and broken files made from it."""
    root = tmp_path_factory.mktemp("checkpoints")
    pl.seed_everything(0)
    trainer = quiet_trainer(str(root / "fit"), max_epochs=1)
    trainer.fit(tiny_ppo(total_timesteps=10_000, save_interval=1), tiny_rollout_data())
    (ppo,) = glob.glob(str(root / "fit" / "**" / "last.ckpt"), recursive=True)
    good = Path(ppo).read_bytes()
    assert zipfile.is_zipfile(ppo)
    (root / "truncated.ckpt").write_bytes(good[:1000])
    (root / "text.ckpt").write_text("not a checkpoint\n")
    torch.save({"state_dict": {}, "hyper_parameters": {}, "pytorch-lightning_version": "2.6.6"}, root / "foreign.ckpt")
    torch.jit.save(torch.jit.script(torch.nn.Linear(2, 1)), root / "scripted.pt")  # as rl-lightning export writes
    names = ("truncated", "text", "foreign")
    return SimpleNamespace(ppo=ppo, missing=str(root / "missing.ckpt"), scripted=str(root / "scripted.pt"),
                           **{n: str(root / f"{n}.ckpt") for n in names})  # fmt: skip


def _fill(text: str, files: SimpleNamespace) -> str:
    return text.format(**vars(files))


def _snapshot(files: SimpleNamespace) -> dict[str, bytes]:
    return {path: Path(path).read_bytes() for path in vars(files).values() if os.path.exists(path)}


def _api_message(given: Callable[[Ctx], Any], ctx: Ctx) -> str:
    with pytest.raises(Exception) as info:  # the row's texts are the check
        given(ctx)
    assert isinstance(info.value, (ValueError, TypeError, FileNotFoundError)), repr(info.value)
    if "data" in ctx.built:  # the refusal came before any work
        assert ctx.built["data"].env_steps == 0
        assert ctx.built["trainer"].global_step == 0
        assert not glob.glob(os.path.join(ctx.tmp, "**", "*.ckpt"), recursive=True)
    return str(info.value)


def _hydra_message(overrides: list[str], tmp: str) -> str:
    """What ``python train.py OVERRIDES`` reports, in-process: check the overrides, compose, ``train``."""
    extra = [f"run_dir={tmp}"] + ([] if any(o.startswith("logger=") for o in overrides) else ["logger=csv"])
    with pytest.raises(ConfigError) as info:
        check_overrides(CONF, "config", overrides)
        with initialize_config_dir(config_dir=CONF, version_base="1.3"):
            cfg = compose("config", overrides=[*overrides, *extra])
        train(cfg)
    message = f"Config error: {info.value}"
    assert "\n" not in message, message
    assert not glob.glob(os.path.join(tmp, "**", "*.ckpt"), recursive=True)
    return message


def _cli_message(args: list[str], capsys) -> str:
    """What ``rl-lightning ARGS`` reports, in-process (no logger, so nothing leaves the temp dir)."""
    if args[0] in ("fit", "validate", "test"):
        args = [*args, "--trainer.logger", "false"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code not in (0, None)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # One line: jsonargparse's usage and nested union errors are gone (sys.exit(text) prints at exit).
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    if isinstance(info.value.code, str):
        lines.append(info.value.code)
    assert len(lines) == 1, err
    assert not glob.glob(os.path.join("**", "*.ckpt"), recursive=True)
    return lines[0]


@pytest.mark.parametrize(("door", "given", "expected"), _params(ROWS))
def test_bad_input_gets_one_message_naming_the_culprit_and_the_fix(
    door, given, expected, files, tmp_path, capsys, monkeypatch
):
    """Test that each kind of bad input, at each front door, stops before any work with a message naming it."""
    before = _snapshot(files)
    if door == "api":
        message = _api_message(given, Ctx(files, str(tmp_path)))
    elif door == "hydra":
        message = _hydra_message([_fill(o, files) for o in given], str(tmp_path))
    else:
        monkeypatch.chdir(tmp_path)  # the CLI's runs/ land here
        message = _cli_message([_fill(a, files) for a in given], capsys)
    for text in expected:
        assert _fill(text, files) in message, message
    assert _snapshot(files) == before  # the checkpoints pointed at are untouched


@pytest.mark.parametrize(("door", "given", "expected"), _params(PROCESS_ROWS, prefix="process-"))
def test_entry_points_print_the_message_and_exit_non_zero(door, given, expected, files, tmp_path):
    """Test that `python train.py` and `rl-lightning` print the message and exit non-zero, without a traceback."""
    args = [_fill(a, files) for a in given]
    if door == "hydra":
        proc = run([TRAIN, *args], str(tmp_path))
    else:
        proc = subprocess.run(
            [RL_LIGHTNING, *args, "--trainer.logger", "false"],
            cwd=tmp_path,
            env=offline_env(str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=300,
        )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    for text in expected:
        assert _fill(text, files) in last, proc.stderr[-3000:]
