"""A training process for the interruption tests: ``python -m tests.callbacks.interrupt_probe ROOT PHASE [CKPT]``.

It trains PPO on CartPole-v1 (4 x 32 steps per epoch, a 1,536-step budget, interval
checkpoints every epoch) and, when ``PHASE`` is ``rollout`` or ``update``, pauses once at a
fixed point of the third epoch (env step 20 of its rollout, or its fifth minibatch),
prints ``PAUSED <phase>`` and waits there for the test to send a signal. ``CKPT`` resumes.
The last line is ``INTERRUPTED <env_steps> <global_step> <checkpoint>`` or
``FINISHED <env_steps> <global_step>``.
"""

from __future__ import annotations

import sys
import time
import warnings

import lightning.pytorch as pl

from rl_lightning import PPO, RolloutDataModule
from rl_lightning.algos import ppo as ppo_module
from rl_lightning.envs import EnvGroup
from rl_lightning.faults import TrainingInterrupted, interrupt_request

ROLLOUT_STEPS, NUM_ENVS, BUDGET = 32, 4, 1536
PAUSE_EPOCH = 2  # the third epoch


def wait_for_signal(phase: str) -> None:
    print(f"PAUSED {phase}", flush=True)
    deadline = time.monotonic() + 60
    while interrupt_request.signal_name is None:  # the handler sets it
        if time.monotonic() > deadline:
            sys.exit("no signal came within 60 s")
        time.sleep(0.01)


def main() -> None:
    warnings.filterwarnings("ignore")
    root, phase = sys.argv[1], sys.argv[2]
    ckpt_path = sys.argv[3] if len(sys.argv) > 3 else None
    counts = {"steps": 0, "minibatches": 0}
    if phase == "rollout":
        step = EnvGroup.step

        def paused_step(self, actions):
            counts["steps"] += 1
            if counts["steps"] == PAUSE_EPOCH * ROLLOUT_STEPS + 20:
                wait_for_signal(phase)
            return step(self, actions)

        EnvGroup.step = paused_step
    elif phase == "update":
        loss = ppo_module.ppo_loss

        def paused_loss(*args, **kwargs):
            counts["minibatches"] += 1
            if counts["minibatches"] == PAUSE_EPOCH * 4 * 4 + 5:  # 4 update epochs x 4 minibatches per epoch
                wait_for_signal(phase)
            return loss(*args, **kwargs)

        ppo_module.ppo_loss = paused_loss
    pl.seed_everything(0)
    # No evaluation during fit (eval_interval beyond the run): the training envs are the only ones stepping.
    data = RolloutDataModule(
        env_id="CartPole-v1", num_envs=NUM_ENVS, rollout_steps=ROLLOUT_STEPS, eval_interval=1000, eval_episodes=1
    )
    model = PPO(total_timesteps=BUDGET, save_interval=1, keep_last=2)
    trainer = pl.Trainer(
        max_epochs=-1,
        default_root_dir=root,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    try:
        trainer.fit(model, data, ckpt_path=ckpt_path)
    except TrainingInterrupted as err:
        print(f"INTERRUPTED {data.env_steps} {trainer.global_step} {err.checkpoint}", flush=True)
        sys.exit(3)
    print(f"FINISHED {data.env_steps} {trainer.global_step}", flush=True)


if __name__ == "__main__":
    main()
