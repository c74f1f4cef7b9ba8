"""OptimizerOffload: optimizer state leaves during rollouts and evaluation, returns for updates, loses nothing."""

from __future__ import annotations

import lightning.pytorch as pl
import torch

from rl_lightning.callbacks import OptimizerOffload
from tests.helpers import quiet_trainer, tiny_ppo, tiny_rollout_data


def _fit(callbacks, seed=0, max_epochs=3):
    pl.seed_everything(seed)
    model = tiny_ppo(total_timesteps=10_000)
    trainer = quiet_trainer(callbacks=callbacks, max_epochs=max_epochs)
    trainer.fit(model, tiny_rollout_data(seed=seed))
    return model, trainer


class _Spy(pl.Callback):
    """At each phase, records whether the optimizer state is the offloaded copy or the live one."""

    def __init__(self, offload: OptimizerOffload):
        self.offload = offload
        self.seen: list[tuple[str, bool]] = []
        self.after_update: dict[int, torch.Tensor] = {}

    def _state_ptrs(self, trainer):
        return {id(p): s["exp_avg"] for p, s in trainer.optimizers[0].state.items()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.after_update = self._state_ptrs(trainer)
        self.seen.append(("update", self.offload.offloaded))

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        if trainer.optimizers[0].state:
            current = self._state_ptrs(trainer)
            # Fresh memory (not the tensors the update wrote), same values.
            moved = all(current[k] is not v for k, v in self.after_update.items())
            same = all(torch.equal(current[k], v) for k, v in self.after_update.items())
            self.seen.append(("evaluation", self.offload.offloaded and moved and same))

    def on_train_epoch_start(self, trainer, pl_module):
        if trainer.current_epoch > 0:
            self.seen.append(("rollout", self.offload.offloaded))


def test_state_is_offloaded_outside_updates_and_back_for_them():
    """Test the phases: offloaded (moved, equal) during evaluation and before each rollout, back for every update."""
    offload = OptimizerOffload(device="cpu")
    spy = _Spy(offload)
    _fit([offload, spy])
    phases = {phase for phase, _ in spy.seen}
    assert phases == {"update", "evaluation", "rollout"}
    for phase, offloaded in spy.seen:
        assert offloaded == (phase != "update"), (phase, spy.seen)
    assert not offload.offloaded  # back where the optimizer expects it when fit ends
    assert [d for d, _ in offload.moves[:2]] == ["offload", "onload"]


def test_offloading_changes_nothing_learned():
    """Test that the same seed with and without offload ends with identical weights and optimizer state."""
    plain, plain_trainer = _fit([], seed=2)
    offloaded, offloaded_trainer = _fit([OptimizerOffload()], seed=2)
    for name, value in plain.state_dict().items():
        torch.testing.assert_close(offloaded.state_dict()[name], value, msg=name)
    a = plain_trainer.optimizers[0].state_dict()["state"]
    b = offloaded_trainer.optimizers[0].state_dict()["state"]
    for k in a:
        torch.testing.assert_close(b[k]["exp_avg_sq"], a[k]["exp_avg_sq"])


def test_gradients_wait_off_their_parameters_and_come_back():
    """Test that offloading leaves no gradient on a parameter (a CUDA one cannot hold a CPU one); onload restores it."""
    from types import SimpleNamespace

    net = torch.nn.Linear(3, 2)
    optimizer = torch.optim.Adam(net.parameters())
    net(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    grads = [p.grad.clone() for p in net.parameters()]
    trainer = SimpleNamespace(optimizers=[optimizer], strategy=SimpleNamespace(root_device=torch.device("cpu")))
    offload = OptimizerOffload()
    offload.offload(trainer)
    assert all(p.grad is None for p in net.parameters())
    offload.onload(trainer)
    for p, g in zip(net.parameters(), grads, strict=True):
        assert torch.equal(p.grad, g)
