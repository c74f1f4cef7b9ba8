"""The ``compile`` option: each algorithm's loss and acting go through ``torch.compile`` during ``fit`` only."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch import Callback

from rl_lightning import DQN, SAC
from tests.helpers import quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data


class CompareLosses(Callback):
    """After each training batch: the loss ``fit`` calls is ``torch.compile(module.loss)``, and on one batch it gives
    the eager loss and the same gradients."""

    def __init__(self):
        self.checked = 0

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        assert pl_module.loss_fn is not None and pl_module.loss_fn.__wrapped__ == pl_module.loss
        for name in pl_module.acting_methods:
            compiled = vars(pl_module.acting_policy)[name]  # the instance's compiled method, over the class's
            assert compiled.__wrapped__.__func__ is getattr(type(pl_module.acting_policy), name)
        if isinstance(batch, dict) or hasattr(batch, "batch_size"):  # PPO's rollout [T, N], with GAE's columns
            keys = ("obs", "action", "log_prob", "value", "advantage", "return", "episode_start")
            sample = {key: batch[key].reshape(1, -1, *batch[key].shape[2:]) for key in keys}
        else:  # a replay epoch: a batch from the buffer
            sample = trainer.datamodule.buffer.sample()
        results = []
        for loss in (pl_module.loss_fn, pl_module.loss):
            pl_module.zero_grad(set_to_none=True)
            torch.manual_seed(0)  # SAC samples actions in its loss: the same draws for both
            terms = loss(sample)
            total = terms.loss if hasattr(terms, "loss") else terms.loss_qvalue + terms.loss_actor + terms.loss_alpha
            total.backward()
            grads = [p.grad.clone() for p in pl_module.parameters() if p.grad is not None]
            results.append((total.detach(), grads))
        pl_module.zero_grad(set_to_none=True)
        (compiled, compiled_grads), (eager, eager_grads) = results
        torch.testing.assert_close(compiled, eager, rtol=1e-4, atol=1e-5)
        assert len(compiled_grads) == len(eager_grads) > 0
        for a, b in zip(compiled_grads, eager_grads, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5)
        self.checked += 1


@pytest.mark.parametrize("algo", ["ppo", "sac", "dqn"])
def test_compile_runs_loss_and_acting_compiled_during_fit_and_restores_them(algo, monkeypatch):
    """Test that with compile=True the fit's loss and acting methods are torch.compile'd, the compiled loss equals the
    eager one (value and gradients) on a batch, and after the fit the module acts and computes its loss eagerly."""
    # Compiled code draws random numbers its own way unless told to call torch's (inductor's testing switch).
    monkeypatch.setattr(torch._inductor.config, "fallback_random", True)
    if algo == "ppo":
        model, data = tiny_ppo(compile=True, hidden_sizes=[16]), tiny_rollout_data()
    elif algo == "sac":
        model, data = SAC(compile=True, hidden_sizes=[16], total_timesteps=10**6), tiny_replay_data("Pendulum-v1")
    else:
        model, data = DQN(compile=True, hidden_sizes=[16], total_timesteps=10**6), tiny_replay_data("CartPole-v1")
    check = CompareLosses()
    quiet_trainer(max_epochs=1, callbacks=[check], num_sanity_val_steps=0).fit(model, data)
    assert check.checked == 1
    assert model.loss_fn == model.loss
    assert not set(model.acting_methods) & set(vars(model.acting_policy))  # the class's methods again
