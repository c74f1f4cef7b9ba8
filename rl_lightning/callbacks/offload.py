"""``OptimizerOffload``: optimizer state and gradients leave the accelerator while the policy only acts."""

from __future__ import annotations

import lightning.pytorch as pl
import torch
from lightning.pytorch.trainer.states import TrainerFn


def _move(tensor: torch.Tensor, device: torch.device, pin: bool) -> torch.Tensor:
    # copy=True: the state always lands in fresh memory, so the move is observable on any
    # device (tests on CPU check it) and the accelerator copy is released.
    moved = tensor.to(device, copy=True)
    return moved.pin_memory() if pin and device.type == "cpu" and torch.cuda.is_available() else moved


class OptimizerOffload(pl.Callback):
    """Moves every optimizer's state (and the gradients) to ``device`` during rollouts and evaluation.

    PPO's epoch is a rollout (acting only), the updates, then evaluation (acting only): the Adam moments (twice the
    parameters) and the gradients (once more) are dead weight on the accelerator outside the updates, memory a GPU
    simulator can use. The state goes to ``device`` when evaluation starts and when the epoch ends, and comes back
    before the first update of the next epoch. Off-policy algorithms interleave env steps and updates, so for them only
    evaluation runs offloaded.

    On a GPU, ``memory/accelerator_allocated_mb`` (while offloaded) and
    ``memory/offload_freed_mb`` are logged each epoch.

    Args:
        device: Where the state waits (``"cpu"``).
        pin_memory: Page-locked host memory for faster transfers (only with CUDA).
    """

    def __init__(self, device: str = "cpu", pin_memory: bool = True):
        self.device = torch.device(device)
        self.pin_memory = pin_memory
        self.offloaded = False
        self.moves: list[tuple[str, str]] = []  # (direction, device) of each move, for tests and debugging
        self._freed_bytes = 0
        self._allocated_bytes: int | None = None
        self._homes: list[tuple[dict, str, torch.device]] = []  # (optimizer state, key, device it came from)
        self._grads: list[tuple[torch.Tensor, torch.Tensor]] = []  # (parameter, its offloaded gradient)

    @staticmethod
    def _on_cuda(trainer: pl.Trainer) -> bool:
        return trainer.strategy.root_device.type == "cuda"

    def offload(self, trainer: pl.Trainer) -> None:
        """Move optimizer state and gradients to ``device`` (no-op when already there)."""
        if self.offloaded or not trainer.optimizers:
            return
        before = torch.cuda.memory_allocated() if self._on_cuda(trainer) else 0
        for optimizer in trainer.optimizers:
            for param, state in optimizer.state.items():
                for key, value in state.items():
                    # Tensors beside their parameter move; Adam's CPU step counters stay put.
                    if isinstance(value, torch.Tensor) and value.device == param.device:
                        self._homes.append((state, key, value.device))
                        state[key] = _move(value, self.device, self.pin_memory)
                if param.grad is not None:
                    # A CUDA parameter cannot hold a CPU gradient: the gradient waits beside it.
                    self._grads.append((param, _move(param.grad, self.device, self.pin_memory)))
                    param.grad = None
        self.offloaded = True
        self.moves.append(("offload", str(self.device)))
        if self._on_cuda(trainer):
            self._allocated_bytes = torch.cuda.memory_allocated()
            self._freed_bytes = before - self._allocated_bytes

    def onload(self, trainer: pl.Trainer) -> None:
        """Bring optimizer state and gradients back next to their parameters."""
        if not self.offloaded:
            return
        for state, key, device in self._homes:
            state[key] = state[key].to(device, non_blocking=True)
        self._homes = []
        for param, grad in self._grads:
            param.grad = grad.to(param.device, non_blocking=True)
        self._grads = []
        self.offloaded = False
        self.moves.append(("onload", str(trainer.strategy.root_device)))

    # ------------------------------------------------------------ hooks
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.onload(trainer)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            self.offload(trainer)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.offload(trainer)
        if self._allocated_bytes is not None and trainer.is_global_zero:
            metrics = {"memory/accelerator_allocated_mb": self._allocated_bytes / 2**20,
                       "memory/offload_freed_mb": self._freed_bytes / 2**20}  # fmt: skip
            step = int(getattr(pl_module, "env_steps", trainer.current_epoch))
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=step)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Checkpoints and a later fit find the state where the optimizer expects it.
        self.onload(trainer)
