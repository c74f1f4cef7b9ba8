"""Train from a config: the Hydra front door (configs in ``conf/``).

    python train.py +experiment=ppo                      # PPO on CartPole-v1, tuned
    python train.py +experiment=ppo_continuous           # PPO on InvertedPendulum-v5 (MuJoCo)
    python train.py +experiment=ppo algo.lr=1e-3 env.num_envs=16 logger=[tensorboard,csv] seed=3
    python train.py +experiment=ppo trainer=ddp trainer.devices=2
    python train.py -m +experiment=ppo seed=1,2,3         # a sweep: one run per seed under multirun/
    python train.py +experiment=ppo debug=true           # a few-second warm-up first

Each run writes checkpoints, logs, ``config.yaml`` and ``summary.json`` under its run
directory (``runs/<date_time>``) and ends with a printed summary.
"""

from __future__ import annotations

import os
import signal
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from rl_lightning.faults import EnvFault, NumericalFault, TrainingInterrupted
from rl_lightning.launch.app import check_resume_before_hydra, sweeping, train
from rl_lightning.launch.errors import ConfigError, check_overrides

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "conf")
#: The jobs of a sweep (``-m``) that ended in an env or numerical fault, each with its run directory.
FAILED: list[str] = []


def failed_jobs() -> str:
    """What a sweep's end says of its jobs that failed (``""``: none)."""
    return f"\n{len(FAILED)} job(s) of the sweep failed: " + "; ".join(FAILED) if FAILED else ""


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    try:
        summary = train(cfg)
    except ConfigError as err:
        sys.exit(f"Config error: {err}{failed_jobs()}")  # a config error or a signal ends the sweep
    except (TrainingInterrupted, EnvFault, NumericalFault) as err:
        command = getattr(err, "resume_command", None) if getattr(err, "checkpoint", None) else None
        prefix = "Numerical fault: " if isinstance(err, NumericalFault) else ""
        print(f"{prefix}{err}" + (f"\nResume with:\n  {command}" if command else ""), file=sys.stderr, flush=True)
        if sweeping() and not isinstance(err, TrainingInterrupted):
            # One job's fault ends that job, not the sweep: the others run, and the command fails after them.
            job = HydraConfig.get()
            FAILED.append(f"{job.runtime.output_dir} ({' '.join(job.overrides.task)}): {type(err).__name__}")
            return None
        # 128 + the signal's number, as a shell reports a process a signal stopped (143 for SIGTERM).
        name = getattr(err, "signal_name", "")
        if FAILED:
            print(failed_jobs().strip(), file=sys.stderr)
        sys.exit(128 + getattr(signal, name).value if name.startswith("SIG") and hasattr(signal, name) else 1)
    # The return value is what Hydra's sweepers optimize.
    return None if summary is None else summary.eval_return


if __name__ == "__main__":
    # Hydra's own messages for a typo'd key or an unknown option are terse; compose once
    # first and explain. (Skipped inside DDP child processes, which rerun this script.)
    if "LOCAL_RANK" not in os.environ or os.environ.get("LOCAL_RANK") == "0":
        overrides = [a for a in sys.argv[1:] if not a.startswith("-")]
        try:
            check_overrides(CONFIG_DIR, "config", overrides)
            if not {"-m", "--multirun"} & set(sys.argv[1:]):  # a sweep's jobs are checked as they start
                check_resume_before_hydra(CONFIG_DIR, "config", overrides)
        except ConfigError as err:
            sys.exit(f"Config error: {err}")
    main()
    if FAILED:
        sys.exit(failed_jobs().strip() + " (the others ran)")
