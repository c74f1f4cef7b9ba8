"""GPU check of the scale-out pieces: a CPU or bf16 actor copy of a GPU learner, and optimizer offload.

    python -m benchmarks.gpu_scaleout_check [--out gpu_check.json]

Needs a CUDA GPU. PPO on CartPole-v1 with a deliberately wide network (so the optimizer
state is measurable) learns on the GPU for a few epochs:

1. ``ActorSync(device="cpu", verify=True)``: rollouts and evaluation act on the CPU; after
   every sync the fingerprint check compares copy and learner. Reports syncs and the median
   time per sync (GPU -> CPU).
2. ``ActorSync(device=None, dtype="bfloat16", verify=True)``: a bf16 copy on the GPU.
3. ``OptimizerOffload``: the Adam state's device while acting and while updating, and the
   GPU memory allocated with the state on the GPU and with it offloaded.
4. SAC (Pendulum-v1) and DQN (CartPole-v1) short fits on the GPU with a CPU actor copy.
5. PPO under ``FSDPStrategy(cpu_offload=True)`` (``trainer=fsdp_offload``): fits, or the error.

Prints and writes one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import lightning.pytorch as pl
import torch

from rl_lightning import DQN, PPO, SAC, ReplayDataModule, RolloutDataModule
from rl_lightning.callbacks import ActorSync, OptimizerOffload
from rl_lightning.nets.actor_copy import ActorCopy

WIDE = [2048, 2048]  # about 8.4M parameters in actor + critic: Adam state about 67 MB


def _trainer(callbacks, max_epochs):
    return pl.Trainer(
        accelerator="gpu",
        devices=1,
        max_epochs=max_epochs,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        callbacks=callbacks,
    )


def _ppo_data():
    return RolloutDataModule(env_id="CartPole-v1", num_envs=8, rollout_steps=64, eval_episodes=4)


class _Probe(pl.Callback):
    """Where the Adam state lives while acting (rollout, evaluation) and while updating, and memory."""

    def __init__(self):
        self.rows: list[dict] = []

    def _row(self, phase, trainer):
        state = trainer.optimizers[0].state if trainer.optimizers else {}
        devices = sorted({str(s["exp_avg"].device) for s in state.values()}) if state else []
        self.rows.append(
            {"phase": phase, "adam_state_devices": devices, "allocated_mb": torch.cuda.memory_allocated() / 2**20}
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if batch_idx == 0:
            self._row("update", trainer)

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if batch_idx == 0 and dataloader_idx == 0:
            self._row("evaluation", trainer)

    def on_train_epoch_start(self, trainer, pl_module):
        self._row("before rollout", trainer)


def check_actor(dtype: str, device: str | None) -> dict:
    sync_times: list[float] = []
    original = ActorCopy.sync

    def timed_sync(actor):
        torch.cuda.synchronize()
        start = time.perf_counter()
        original(actor)
        torch.cuda.synchronize()
        sync_times.append(time.perf_counter() - start)

    ActorCopy.sync = timed_sync
    try:
        pl.seed_everything(0)
        model = PPO(hidden_sizes=WIDE, total_timesteps=100_000)
        trainer = _trainer([ActorSync(device=device, dtype=dtype, verify=True)], max_epochs=4)
        trainer.fit(model, _ppo_data())
    finally:
        ActorCopy.sync = original
    return {
        "actor": f"{dtype} on {device or 'the learner device'}",
        "learner_device": str(next(model.policy.parameters()).device),
        "syncs_verified": len(sync_times),
        "median_sync_ms_including_verify": 1e3 * statistics.median(sync_times) if sync_times else None,
        "policy_loss_finite": bool(torch.isfinite(trainer.callback_metrics["train/policy_loss"])),
    }


def check_offload() -> dict:
    pl.seed_everything(0)
    probe, offload = _Probe(), OptimizerOffload()
    model = PPO(hidden_sizes=WIDE, total_timesteps=100_000)
    trainer = _trainer([offload, probe], max_epochs=3)
    trainer.fit(model, _ppo_data())
    params_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / 2**20
    return {
        "parameters_mb": params_mb,
        "phases": probe.rows,
        "moves": offload.moves,
        "freed_mb_last_offload": offload._freed_bytes / 2**20,
    }


def check_off_policy() -> dict:
    out = {}
    for name, model, data in (
        ("sac", SAC(hidden_sizes=[256, 256], total_timesteps=10_000), "Pendulum-v1"),
        ("dqn", DQN(hidden_sizes=[256, 256], total_timesteps=10_000), "CartPole-v1"),
    ):
        pl.seed_everything(0)
        dm = ReplayDataModule(env_id=data, steps_per_epoch=300, learning_starts=100, batch_size=64, eval_episodes=2)
        trainer = _trainer([ActorSync(device="cpu", verify=True)], max_epochs=2)
        start = time.perf_counter()
        trainer.fit(model, dm)
        out[name] = {
            "learner_device": str(next(model.policy.parameters()).device),
            "gradient_steps": trainer.global_step,
            "seconds": time.perf_counter() - start,
            "eval_return": float(trainer.callback_metrics["eval/return_mean"]),
        }
    return out


def check_fsdp_offload() -> dict:
    """PPO under Lightning's FSDPStrategy(cpu_offload=True) on one GPU: does it fit, and how long."""
    from lightning.pytorch.strategies import FSDPStrategy

    pl.seed_everything(0)
    model = PPO(hidden_sizes=WIDE, total_timesteps=100_000)
    trainer = pl.Trainer(
        accelerator="gpu",
        devices=1,
        strategy=FSDPStrategy(cpu_offload=True),
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    )
    start = time.perf_counter()
    try:
        trainer.fit(model, _ppo_data())
    except Exception as err:  # the finding is the point: report it
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:2000]}
    return {
        "ok": True,
        "seconds": time.perf_counter() - start,
        "policy_loss": float(trainer.callback_metrics["train/policy_loss"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="gpu_check.json")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    if not torch.cuda.is_available():
        raise SystemExit("No CUDA GPU: this check needs one (the CPU tests cover the same code paths).")
    result = {
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "lightning": pl.__version__,
        "cpu_actor": check_actor("float32", "cpu"),
        "bf16_actor": check_actor("bfloat16", None),
        "offload": check_offload(),
        "off_policy": check_off_policy(),
        "fsdp_offload": check_fsdp_offload(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
