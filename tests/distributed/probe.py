"""Fits an algorithm with DDP on CPU and writes what every rank saw (run by the DDP tests, not collected).

    python tests/distributed/probe.py OUT_DIR [--algo ppo|dqn] [--devices 2] [--num-nodes 1] [--epochs 3]
                                      [--backend gymnasium|torch] [--recurrent]

Lightning's DDP launcher starts the other local ranks by re-running this script; under
torchrun (one process per "node") Lightning reads the rank from torchrun's environment.
Each rank writes ``OUT_DIR/rank<r>.json``: per epoch a hash of its weights, the global and
local env-step counts, its own episode returns and the reduced metric; its env seeds;
its share of evaluation episodes.
"""

from __future__ import annotations

import argparse
import faulthandler
import hashlib
import json
import os
import signal
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import lightning.pytorch as pl  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402

from rl_lightning import DQN, PPO, ReplayDataModule, RolloutDataModule  # noqa: E402
from rl_lightning.callbacks import EvaluationVideo  # noqa: E402
from rl_lightning.faults import TrainingInterrupted  # noqa: E402

NUM_ENVS, ROLLOUT_STEPS, STEPS_PER_EPOCH, EVAL_EPISODES = 2, 16, 40, 3


def weights_hash(module: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for tensor in module.state_dict().values():
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def buffer_hash(data: ReplayDataModule) -> str | None:
    if not len(data.buffer):
        return None
    stored = data.buffer.storage[: len(data.buffer)]
    digest = hashlib.sha256()
    for key in ("obs", "action", "reward", "next_obs", "terminated"):
        digest.update(stored[key].contiguous().numpy().tobytes())
    return digest.hexdigest()


class Probe(pl.Callback):
    def __init__(self, sigterm_epoch: int | None = None):
        self.record: dict = {"epochs": [], "eval": []}
        self.sigterm_epoch = sigterm_epoch

    def on_fit_start(self, trainer, pl_module):
        data = trainer.datamodule
        envs = data.train_envs
        if isinstance(data, ReplayDataModule):  # what a resume restored into this rank's shard
            self.record["buffer_at_start"] = buffer_hash(data)
        self.record.update(
            rank=trainer.global_rank,
            world_size=trainer.world_size,
            env_seeds=[envs.seed + i for i in range(envs.num_envs)],
            eval_share=EVAL_EPISODES // trainer.world_size + (trainer.global_rank < EVAL_EPISODES % trainer.world_size),
        )

    def on_train_epoch_end(self, trainer, pl_module):
        data = trainer.datamodule
        rollout = data.last_collection
        returns = [float(r) for r in rollout.episodes.returns]
        # Callbacks' epoch-end hooks run before the module's, which logs this epoch's value:
        # this is the previous epoch's reduced metric.
        reduced = trainer.callback_metrics.get("rollout/episode_return")
        self.record["epochs"].append(
            {
                "weights": weights_hash(pl_module),
                "env_steps": data.env_steps,
                "local_transitions": int(
                    NUM_ENVS * ROLLOUT_STEPS if isinstance(data, RolloutDataModule) else STEPS_PER_EPOCH
                ),
                "local_returns": returns,
                "reduced_return": None if reduced is None else float(reduced),
                "buffer_size": len(data.buffer) if isinstance(data, ReplayDataModule) else None,
                "buffer": buffer_hash(data) if isinstance(data, ReplayDataModule) else None,
            }
        )

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if isinstance(batch, TensorDict) and "state" in batch.keys():  # a recurrent policy's rollout [T, N]
            record = {
                "rollout_shape": list(batch.batch_size),
                "minibatches": [],
                "first_step_starts": batch["episode_start"][0].tolist(),
                "obs": batch["obs"].flatten().tolist(),
            }
            self.record.setdefault("sequences", []).append(record)
            rollout_obs = batch["obs"]
            policy = pl_module.policy
            evaluate = type(policy).evaluate_actions

            def spy(obs, action, episode_start, state):
                # Which of this rank's env sequences the minibatch replays: its columns matched to the rollout's.
                record["minibatches"].append(
                    [
                        next(n for n in range(rollout_obs.shape[1]) if torch.equal(obs[:, j], rollout_obs[:, n]))
                        for j in range(obs.shape[1])
                    ]
                )
                return evaluate(policy, obs, action, episode_start, state)

            policy.evaluate_actions = spy

    def on_train_epoch_start(self, trainer, pl_module):
        # --sigterm-epoch: rank 0 alone receives SIGTERM as this epoch starts.
        if trainer.current_epoch == self.sigterm_epoch and trainer.global_rank == 0:
            os.kill(os.getpid(), signal.SIGTERM)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0):
        if batch["prefix"] == "eval":  # this rank's own episodes of the train set
            self.record["eval"].append({"local_returns": [float(r) for r in batch["return"]]})

    def on_validation_end(self, trainer, pl_module):
        if self.record["eval"] and "eval/return_mean" in trainer.callback_metrics:
            self.record["eval"][-1]["reduced"] = float(trainer.callback_metrics["eval/return_mean"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--algo", default="ppo", choices=["ppo", "dqn"])
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--num-nodes", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save", action="store_true", help="checkpoint every epoch under OUT/checkpoints")
    parser.add_argument("--resume", default=None, help="a checkpoint to resume from")
    parser.add_argument("--sigterm-epoch", type=int, default=None, help="rank 0 gets SIGTERM as this epoch starts")
    parser.add_argument("--video", action="store_true", help="film every evaluation (EvaluationVideo, rank 0)")
    parser.add_argument("--recurrent", action="store_true", help="PPO with an LSTM core")
    parser.add_argument("--backend", default="gymnasium", choices=["gymnasium", "torch"], help="what steps the envs")
    parser.add_argument(
        "--watchdog", type=float, default=None, help="after this many seconds, print every thread's stack and exit 1"
    )
    args = parser.parse_args()
    # A rank that crashes (even at interpreter exit) or hangs says where, so the test's
    # failure shows the stack instead of a bare timeout.
    faulthandler.enable()
    if args.watchdog:
        faulthandler.dump_traceback_later(args.watchdog, exit=True)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    pl.seed_everything(0, verbose=False)
    if args.algo == "ppo":
        recurrent = {"recurrent": True, "recurrent_size": 8} if args.recurrent else {}
        model = PPO(hidden_sizes=[16, 16], total_timesteps=100_000, update_epochs=2, num_minibatches=2, **recurrent)
        data = RolloutDataModule(
            env_id="CartPole-v1",
            num_envs=NUM_ENVS,
            rollout_steps=ROLLOUT_STEPS,
            eval_episodes=EVAL_EPISODES,
            eval_max_episode_steps=30,
            backend=args.backend,
        )
    else:
        model = DQN(
            hidden_sizes=[16, 16],
            total_timesteps=100_000,
            target_update_interval=5,
            save_interval=1 if args.save else None,
        )
        data = ReplayDataModule(
            env_id="CartPole-v1",
            num_envs=NUM_ENVS,
            steps_per_epoch=STEPS_PER_EPOCH,
            learning_starts=20,
            batch_size=8,
            eval_episodes=EVAL_EPISODES,
            eval_max_episode_steps=30,
            save_replay_buffer=True,
            backend=args.backend,
        )
    probe = Probe(args.sigterm_epoch)
    trainer = pl.Trainer(
        accelerator="cpu",
        strategy="ddp",
        devices=args.devices,
        num_nodes=args.num_nodes,
        max_epochs=args.epochs,
        logger=False,
        enable_checkpointing=args.save,
        default_root_dir=args.out,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[probe, *([EvaluationVideo(video_interval=1)] if args.video else [])],
    )
    try:
        trainer.fit(model, data, ckpt_path=args.resume)
    except TrainingInterrupted as err:
        probe.record["interrupted"] = {
            "env_steps": data.env_steps,
            "global_step": trainer.global_step,
            "weights": weights_hash(model),
            "checkpoint": err.checkpoint,
        }
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"rank{trainer.global_rank}.json"), "w") as f:
        json.dump(probe.record, f)
    # The process group ends before the interpreter does, as torch.distributed's docs ask: left to interpreter exit,
    # gloo's threads once aborted a rank of the torchrun test on a loaded machine ("terminate called without an
    # active exception") after its fit had finished.
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
