"""``rl-lightning``: the Lightning CLI (fit, then test from the checkpoint) and its configs."""

from __future__ import annotations

import csv
import glob
import os
import subprocess
import sys
import warnings

import pytest
import yaml
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from rl_lightning.launch.app import build_model
from rl_lightning.launch.cli import RLCLI, checkpoint_config, main
from tests.launch.conftest import REPO, offline_env, run

RL_LIGHTNING = os.path.join(os.path.dirname(sys.executable), "rl-lightning")


def _rows(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_cli_fit_then_test_from_checkpoint(tmp_path):
    """Test that `rl-lightning fit` checkpoints and `test --ckpt_path` evaluates both object sets from it; a checkpoint
    holding a setting this version lacks is refused naming the file and the setting."""
    fit = run(
        [
            "-m",
            "rl_lightning.launch.cli",
            "fit",
            "--model",
            "PPO",
            "--data.env_id",
            "CartPole-v1",
            "--data.num_envs",
            "2",
            "--data.rollout_steps",
            "16",
            "--model.clip_coef",
            "0.1",
            "--trainer.max_epochs",
            "2",
            "--data.eval_episodes",
            "2",
            "--seed_everything",
            "5",
            "--trainer.default_root_dir",
            "fit",
            "--trainer.logger",
            "CSVLogger",
            "--trainer.logger.save_dir",
            "fit",
        ],
        tmp_path,
    )
    assert fit.returncode == 0, fit.stderr[-3000:]
    ckpts = glob.glob(str(tmp_path / "fit" / "**" / "checkpoints" / "*.ckpt"), recursive=True)
    assert len(ckpts) == 1
    config = checkpoint_config(ckpts[0])
    assert config["model"]["init_args"]["clip_coef"] == 0.1 and config["data"]["init_args"]["num_envs"] == 2
    assert config["seed_everything"] == 5  # the data module's seed came from --seed_everything

    test = run(
        [
            "-m",
            "rl_lightning.launch.cli",
            "test",
            "--ckpt_path",
            ckpts[0],
            "--trainer.logger",
            "CSVLogger",
            "--trainer.logger.save_dir",
            "test",
        ],
        tmp_path,
    )
    assert test.returncode == 0, test.stderr[-3000:]
    (metrics,) = glob.glob(str(tmp_path / "test" / "**" / "metrics.csv"), recursive=True)
    (row,) = _rows(metrics)
    assert row["eval/return_mean"] and row["eval_ood/return_mean"] and row["eval_ood/generalization_gap"]
    # 2 epochs x 2 envs x 16 steps: the test reports the checkpoint's env-step count.
    assert float(row["time/env_steps"]) == 64
    # A checkpoint of an earlier version, with a setting since removed: named as the checkpoint's, not as a typo.
    import torch

    earlier = torch.load(ckpts[0], weights_only=False)
    earlier["datamodule_hyper_parameters"]["prioritized"] = True
    torch.save(earlier, tmp_path / "earlier.ckpt")
    refusal = r"earlier.ckpt holds RolloutDataModule settings .*\['prioritized'\].*wrote it"
    with pytest.raises(SystemExit, match=refusal):
        checkpoint_config(str(tmp_path / "earlier.ckpt"))


def test_cli_test_refuses_a_corrupt_checkpoint_with_the_fix(tmp_path):
    """Test that `rl-lightning test --ckpt_path` on a truncated file names the file and what to do."""
    bad = tmp_path / "last.ckpt"
    bad.write_bytes(b"PK\x03\x04 truncated")
    proc = run(["-m", "rl_lightning.launch.cli", "test", "--ckpt_path", str(bad)], tmp_path)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr and "earlier checkpoint" in proc.stderr


@pytest.mark.parametrize("name", ["ppo", "ppo_continuous"])
def test_cli_configs_parse_and_match_the_hydra_experiments(name, tmp_path, monkeypatch):
    """Test that conf/cli/<name>.yaml parses into the same model and data settings as experiment/<name>.yaml."""
    monkeypatch.chdir(tmp_path)
    cli = RLCLI(args=["--config", os.path.join(REPO, "conf", "cli", f"{name}.yaml")], run=False)
    with initialize_config_dir(config_dir=os.path.join(REPO, "conf"), version_base="1.3"):
        cfg = compose("config", overrides=[f"+experiment={name}", f"run_dir={tmp_path}"])
    algo = build_model(cfg).hparams  # the settings the Hydra app's model keeps
    for key, value in cli.model.hparams.items():
        if key.startswith("_"):  # the CLI's own bookkeeping (_class_path, _instantiator)
            continue
        expected = algo[key]
        assert (list(expected) if isinstance(expected, tuple) else expected) == (
            list(value) if isinstance(value, tuple) else value
        ), key
    env = {("env" if k == "id" else k): v for k, v in OmegaConf.to_container(cfg.env).items()}
    expected = {**env, **OmegaConf.to_container(cfg.data), "seed": cfg.seed}
    for key, value in cli.datamodule.hparams.items():
        if key != "obj_sets" and not key.startswith("_"):
            assert expected[key] == (list(value) if isinstance(value, tuple) else value), key


def test_cli_tests_a_checkpoint_written_by_the_hydra_app(tmp_path, monkeypatch):
    """Test that a checkpoint with no CLI bookkeeping (_class_path) still rebuilds its model and data for `test`."""
    from tests.launch.conftest import TINY, run_train

    proc = run_train([*TINY, "logger=csv", "callbacks=none", "hydra.run.dir=hydra_run"], tmp_path)
    assert "LeafSpec" not in proc.stderr  # Lightning's use of a deprecated torch API, which a user cannot act on
    monkeypatch.chdir(tmp_path)
    ckpt = str(tmp_path / "hydra_run" / "checkpoints" / "last.ckpt")
    with warnings.catch_warnings(record=True) as caught:  # the filters in force, as a user's run has them
        cli = main(["test", "--ckpt_path", ckpt, "--trainer.logger", "false"])
    # Lightning's advice to add the checkpoint's callbacks (interval and best checkpoints, fit-only) is not shown.
    assert not [w for w in caught if "callbacks used to create the checkpoint" in str(w.message)]
    assert type(cli.model).__name__ == "PPO" and cli.model.hparams.total_timesteps == 512
    assert cli.datamodule.hparams.num_envs == 8 and cli.datamodule.hparams.env_id == "CartPole-v1"
    metrics = cli.trainer.callback_metrics
    assert "eval/return_mean" in metrics and "eval_ood/return_mean" in metrics
    assert float(metrics["time/env_steps"]) == 512


def test_cli_default_logger_is_offline_wandb_inside_the_run_dir(tmp_path, monkeypatch):
    """Test that without logger arguments the CLI logs to W&B (offline with no key) under its own run directory, and
    takes Lightning's W&B arguments."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "none"))
    cli = RLCLI(args=["--model", "PPO", "--data.env_id", "CartPole-v1"], run=False)
    logger = cli.trainer.logger
    assert type(logger).__name__ == "WandbLogger" and logger.mode == "offline"
    assert logger.save_dir == cli.trainer.default_root_dir and cli.trainer.default_root_dir.startswith("runs/")
    # Lightning's W&B arguments pass through the library logger's **kwargs.
    named = RLCLI(args=["--model", "PPO", "--trainer.logger.name", "first", "--trainer.logger.tags", "[a]"], run=False)
    given = named.config.trainer.logger.init_args
    assert (given.name, given.tags) == ("first", ["a"])


@pytest.mark.parametrize("name", ["CSVLogger", "TensorBoardLogger"])
def test_cli_library_loggers_write_in_the_run_dir(name, tmp_path, monkeypatch):
    """Test that `--trainer.logger CSVLogger` (or TensorBoardLogger) alone writes in the run directory, as the
    Hydra app's loggers do, not in ./version_0 (where a resume started a version_1 beside it)."""
    monkeypatch.chdir(tmp_path)
    args = ["--model", "PPO", "--trainer.logger", name, "--trainer.default_root_dir", "run"]
    cli = RLCLI(args=args, run=False)
    assert os.path.normpath(cli.trainer.logger.log_dir) == "run"
    given = RLCLI(args=[*args, "--trainer.logger.version", "v2"], run=False)  # a version the user names is kept
    assert os.path.normpath(given.trainer.logger.log_dir) == os.path.join("run", "v2")
    # A directory of the user's: Lightning's version_N under it keeps one run's files from another's.
    own = RLCLI(args=[*args, "--trainer.logger.save_dir", "logs"], run=False)
    assert os.path.normpath(own.trainer.logger.log_dir) == os.path.join("logs", "version_0")


def test_cli_fit_keeps_an_earlier_runs_results_and_test_keeps_its_config(tmp_path, monkeypatch, capsys):
    """Test that a fit into a directory a refused fit left (only its config.yaml) runs, that a fresh fit into a
    directory holding a run's results is refused leaving them as they were, that `test` into the run's directory
    writes test_config.yaml beside the fit's config.yaml (with the progress bar off), and that `test --model` naming
    another algorithm than the checkpoint's, or an env its object sets would not run, is refused for that reason."""
    monkeypatch.chdir(tmp_path)
    root = ["--trainer.default_root_dir", "run", "--trainer.logger", "CSVLogger"]
    with pytest.raises(SystemExit):  # SAC refuses CartPole's discrete actions once the envs are built
        main(["fit", "--model", "SAC", "--data", "ReplayDataModule", "--data.env_id", "CartPole-v1", *root])
    assert os.listdir("run") == ["config.yaml"]
    fit = ["fit", "--model", "PPO", "--data.num_envs", "2", "--data.rollout_steps", "16", *root]
    main([*fit, "--model.total_timesteps", "32", "--model.save_interval", "1", "--data.eval_episodes", "1"])
    saved = {name: (tmp_path / "run" / name).read_bytes() for name in ("config.yaml", "metrics.csv")}
    assert b"PPO" in saved["config.yaml"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(fit)
    err = capsys.readouterr().err
    assert "run holds an earlier run" in err and "Resume it with --ckpt_path" in err
    assert {name: (tmp_path / "run" / name).read_bytes() for name in saved} == saved
    no_bar = ["--trainer.enable_progress_bar", "false"]  # was refused: Lightning's check against our bar's callback
    cli = main(["test", "--ckpt_path", "run/checkpoints/last.ckpt", *root, *no_bar])
    assert cli.trainer.progress_bar_callback is None and "eval/return_mean" in cli.trainer.callback_metrics
    assert (tmp_path / "run" / "config.yaml").read_bytes() == saved["config.yaml"]
    assert b"ckpt_path: run/checkpoints/last.ckpt" in (tmp_path / "run" / "test_config.yaml").read_bytes()
    capsys.readouterr()
    (tmp_path / "sac.yaml").write_text("model:\n  class_path: rl_lightning.SAC\n")
    for named in (["--model", "SAC"], ["--config", "sac.yaml"]):  # another algorithm: its own reason, not the data's
        with pytest.raises(SystemExit):
            main(["test", "--ckpt_path", "run/checkpoints/last.ckpt", *named, *root])
        assert "holds a PPO model, not a SAC one: drop the --model" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the checkpoint's object sets run CartPole whatever env_id says
        main(["test", "--ckpt_path", "run/checkpoints/last.ckpt", "--data.env_id", "Acrobot-v1", *root])
    assert "object sets name CartPole-v1 in their variations" in capsys.readouterr().err


def test_cli_resume_goes_on_in_the_version_dir_of_a_logger_save_dir_the_user_gave(tmp_path, monkeypatch):
    """Test that with --trainer.logger.save_dir given, a resume from a checkpoint of that directory's version_0 goes on
    appending to version_0's metrics.csv (it started a version_1, splitting the run's metrics in two)."""
    monkeypatch.chdir(tmp_path)
    fit = ["fit", "--model", "PPO", "--data.num_envs", "2", "--data.rollout_steps", "16", "--data.eval_episodes", "1"]
    fit += ["--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", "logs", "--model.save_interval", "1"]
    main([*fit, "--model.total_timesteps", "32"])
    (run,) = glob.glob("logs/**/version_0", recursive=True)
    main([*fit, "--model.total_timesteps", "64", "--ckpt_path", f"{run}/checkpoints/last.ckpt"])
    assert glob.glob("logs/**/version_*", recursive=True) == [run]
    with open(f"{run}/metrics.csv") as f:
        steps = [row["time/env_steps"] for row in csv.DictReader(f) if row.get("train/policy_loss")]
    assert [float(step) for step in steps] == [32.0, 64.0]
    # A checkpoint of another directory whose name begins alike ("logs_old") resumes into a new version of "logs",
    # leaving version_0's run as it was (its last.ckpt and metrics were written over).
    main(
        [
            *fit[:-4],
            "--trainer.logger.save_dir",
            "logs_old",
            "--model.save_interval",
            "1",
            "--model.total_timesteps",
            "32",
        ]
    )
    before = {name: open(f"{run}/{name}", "rb").read() for name in ("metrics.csv", "checkpoints/last.ckpt")}
    main([*fit, "--model.total_timesteps", "64", "--ckpt_path", "logs_old/version_0/checkpoints/last.ckpt"])
    assert sorted(glob.glob("logs/**/version_*", recursive=True)) == [run, run.replace("version_0", "version_1")]
    assert {name: open(f"{run}/{name}", "rb").read() for name in before} == before


def test_cli_resumes_from_a_ckpt_path_in_a_config_file_and_prints_it(tmp_path, monkeypatch, capsys):
    """Test that a ckpt_path written in a --config file resumes as --ckpt_path does (with the command line's settings,
    not the checkpoint's), that `test` builds its model and data from it as from --ckpt_path, and that --print_config
    shows a given --ckpt_path."""
    monkeypatch.chdir(tmp_path)
    fit = ["fit", "--model", "PPO", "--data.num_envs", "2", "--data.rollout_steps", "16", "--data.eval_episodes", "1"]
    fit += ["--trainer.default_root_dir", "run", "--trainer.logger", "CSVLogger", "--model.save_interval", "1"]
    main([*fit, "--model.total_timesteps", "32"])
    (tmp_path / "resume.yaml").write_text("ckpt_path: run/checkpoints/last.ckpt\n")
    main([*fit, "--model.total_timesteps", "64", "--config", "resume.yaml"])
    assert (tmp_path / "run" / "checkpoints" / "epoch=1-env_steps=64.ckpt").is_file()
    cli = main(["test", "--config", "resume.yaml", "--trainer.logger", "false"])  # no --model: the checkpoint's
    assert type(cli.model).__name__ == "PPO" and cli.model.hparams.total_timesteps == 64
    assert cli.datamodule.hparams.num_envs == 2 and "eval_ood/return_mean" in cli.trainer.callback_metrics
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main([*fit, "--ckpt_path", "run/checkpoints/last.ckpt", "--print_config"])
    assert "ckpt_path: run/checkpoints/last.ckpt" in capsys.readouterr().out


def test_console_script_resumes_a_ddp_run_on_both_ranks(tmp_path):
    """Test that `rl-lightning fit --ckpt_path` under DDP resumes on both ranks: Lightning starts the other rank by
    running the command again, which must still hold --ckpt_path (without it, that rank refused the used run dir)."""
    script = os.path.join(os.path.dirname(sys.executable), "rl-lightning")
    args = ["fit", "--model", "PPO", "--data.num_envs", "2", "--data.rollout_steps", "16", "--data.eval_episodes", "2"]
    args += ["--trainer.accelerator", "cpu", "--trainer.strategy", "ddp", "--trainer.devices", "2"]
    args += ["--trainer.logger", "CSVLogger", "--trainer.default_root_dir", "run", "--model.save_interval", "1"]
    last = os.path.join("run", "checkpoints", "last.ckpt")
    for extra in (["--model.total_timesteps", "128"], ["--model.total_timesteps", "256", "--ckpt_path", last]):
        proc = subprocess.run(
            [script, *args, *extra], cwd=tmp_path, env=offline_env(str(tmp_path)), capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "epoch=3-env_steps=256.ckpt").is_file()
    with open(tmp_path / "run" / "metrics.csv", newline="") as file:
        steps = {int(float(row["time/env_steps"])) for row in csv.DictReader(file) if row["time/env_steps"]}
    assert {64, 128, 192, 256} <= steps  # the first run's rows kept, the resumed run's after them


def test_console_script_fits_dqn_on_replay_data_and_exits_zero(tmp_path):
    """Test that the installed `rl-lightning` fits DQN with --data ReplayDataModule and exits with status 0."""
    script = os.path.join(os.path.dirname(sys.executable), "rl-lightning")
    args = ["fit", "--model", "DQN", "--model.hidden_sizes", "[16,16]", "--model.total_timesteps", "100"]
    args += ["--model.save_interval", "1"]
    args += ["--data", "ReplayDataModule", "--data.env_id", "CartPole-v1", "--data.steps_per_epoch", "100"]
    args += ["--data.learning_starts", "50", "--data.batch_size", "32", "--data.eval_episodes", "1"]
    args += ["--trainer.default_root_dir", "fit"]
    args += ["--trainer.logger", "CSVLogger", "--trainer.logger.save_dir", "fit"]
    proc = subprocess.run(
        [script, *args], cwd=tmp_path, env=offline_env(str(tmp_path)), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (ckpt,) = glob.glob(str(tmp_path / "fit" / "**" / "checkpoints" / "last.ckpt"), recursive=True)
    config = checkpoint_config(ckpt)
    assert config["model"]["class_path"] == "rl_lightning.DQN"
    assert config["data"]["class_path"].endswith("ReplayDataModule")


def test_cli_sigterm_prints_a_resume_command_that_finishes_the_budget(tmp_path):
    """Test that SIGTERM stops `rl-lightning fit` with exit 143 and a command that resumes to the same budget."""
    import shlex
    import signal

    import torch

    from tests.launch.conftest import signal_after_first_checkpoint

    root = tmp_path / "runs" / "cli"
    # Both library loggers the resume must continue: metrics.csv in the run directory, and W&B (offline).
    csv_args = {"save_dir": str(root), "name": "", "version": ""}
    loggers = [
        {"class_path": "rl_lightning.loggers.CSVLogger", "init_args": csv_args},
        {"class_path": "rl_lightning.loggers.WandbLogger", "init_args": {"save_dir": str(root)}},
    ]
    (tmp_path / "loggers.yaml").write_text(yaml.safe_dump({"trainer": {"logger": loggers}}))
    args = ["fit", "--model", "PPO", "--model.total_timesteps", "4096", "--model.save_interval", "1"]
    args += ["--config", str(tmp_path / "loggers.yaml")]
    proc = signal_after_first_checkpoint(
        [RL_LIGHTNING, *args, "--trainer.default_root_dir", str(root)], tmp_path, str(root / "checkpoints")
    )
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr_text[-3000:]
    command = proc.stderr_text.split("Resume with:")[1].strip().splitlines()[0]
    resume = shlex.split(command)
    assert resume[0] == "rl-lightning" and resume[-2:] == ["--ckpt_path", str(root / "checkpoints" / "last.ckpt")]
    assert resume[-4:-2] == ["--trainer.default_root_dir", str(root)]
    done = subprocess.run(
        [RL_LIGHTNING, *resume[1:]], cwd=tmp_path, env=offline_env(str(tmp_path)), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    final = torch.load(root / "checkpoints" / "last.ckpt", weights_only=False)
    assert final["RolloutDataModule"]["env_steps"] == 4096
    # The resumed run appended to the interrupted run's metrics.csv: every epoch's row once.
    hparams = final["datamodule_hyper_parameters"]
    epoch = hparams["num_envs"] * hparams["rollout_steps"]
    rows = _rows(str(root / "metrics.csv"))
    assert [int(float(r["step"])) for r in rows if r.get("time/rollout_seconds")] == list(range(epoch, 4097, epoch))
    # ... and its W&B run went on under the interrupted run's id.
    runs = [name for name in os.listdir(root / "wandb") if name.startswith("offline-run-")]
    assert len(runs) == 2 and len({name.rsplit("-", 1)[1] for name in runs}) == 1, runs


def test_top_level_help_names_every_subcommand(capsys):
    """Test that `rl-lightning --help` names play, export and plot beside Lightning's fit, validate and test (its usage
    line, Lightning's, lists only those three)."""
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "Subcommands: fit, validate, test, plot, play, export" in out


def test_a_model_given_the_wrong_data_module_is_refused_before_its_run_starts(tmp_path, monkeypatch, capsys):
    """Test that `fit --model SAC` without `--data ReplayDataModule` is refused before the loggers start and the config
    is saved (it left runs/<time>/ with a config.yaml and an offline W&B run behind), naming the flag."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main(["fit", "--model", "SAC", "--trainer.default_root_dir", "run"])
    err = capsys.readouterr().err
    assert "SAC learns from a ReplayDataModule" in err and "--data ReplayDataModule" in err
    assert not (tmp_path / "run" / "config.yaml").exists() and not (tmp_path / "run" / "wandb").exists()


@pytest.mark.parametrize("subcommand", ["fit", "test"])
def test_a_checkpoint_named_by_lightnings_keyword_is_refused_with_the_file_to_give(
    subcommand, tmp_path, monkeypatch, capsys
):
    """Test that ``--ckpt_path last`` (Hydra's spelling) names the file the CLI takes, before the run directory is
    touched: it was refused as "Checkpoint 'last' does not exist"."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit):
        main([subcommand, "--ckpt_path", "last", "--trainer.default_root_dir", "run"])
    assert (
        "the CLI takes the checkpoint's file, e.g. --ckpt_path <run>/checkpoints/last.ckpt" in capsys.readouterr().err
    )
    assert not os.path.exists("run")
