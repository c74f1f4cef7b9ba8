"""A NaN in a loss stops the run naming the term and parameters, or (``on_nonfinite="skip"``) skips the update."""

from __future__ import annotations

import copy
import os

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import DQN, PPO, SAC
from rl_lightning.algos import dqn as dqn_module
from rl_lightning.algos import ppo as ppo_module
from rl_lightning.algos import sac as sac_module
from rl_lightning.faults import NumericalFault
from tests.helpers import quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data

NAN = float("nan")


def _poison_ppo(monkeypatch, calls: set[int]):
    """Make PPO's value loss NaN on the given minibatch calls (1-based)."""
    loss, count = ppo_module.ppo_loss, [0]

    def poisoned(*args, **kwargs):
        terms = loss(*args, **kwargs)
        count[0] += 1
        if count[0] in calls:
            terms.value_loss = terms.value_loss * NAN  # (detached: named in the message)
            terms.loss = terms.loss * NAN
        return terms

    monkeypatch.setattr(ppo_module, "ppo_loss", poisoned)


def _params(model) -> dict[str, torch.Tensor]:
    """The policy's learned parameters (not the observation normalizer's statistics, which move with the data)."""
    return {k: v.detach().clone() for k, v in model.policy.named_parameters()}


class _Snapshot(pl.Callback):
    """Copies the policy (and SAC's target critics) as training starts."""

    def on_train_start(self, trainer, module):
        self.policy = _params(module)
        if getattr(module, "target_critics", None) is not None:
            self.targets = copy.deepcopy(module.target_critics.state_dict())


def test_ppo_stops_on_a_nan_loss_naming_term_step_and_the_last_good_checkpoint(tmp_path, monkeypatch):
    """Test that a NaN value loss in epoch 3 stops fit before the update, and last.ckpt (epoch 2) stays intact."""
    pl.seed_everything(0)
    # tiny_rollout_data: 2 x 2 minibatches per epoch; the 9th minibatch is the first of epoch 3.
    _poison_ppo(monkeypatch, {9})
    model = tiny_ppo(total_timesteps=10_000, save_interval=1)
    trainer = quiet_trainer(tmp_path, max_epochs=5)
    with pytest.raises(NumericalFault) as info:
        trainer.fit(model, tiny_rollout_data(eval_interval=100))
    message = str(info.value)
    last = os.path.join(tmp_path, "checkpoints", "last.ckpt")
    assert "value_loss=nan" in message and "gradients of policy." in message
    assert "gradient step 8" in message and f"The last good checkpoint is {last}" in message
    assert "algo.on_nonfinite=skip" in message
    # The refused update was not applied, and nothing was written after the fault.
    assert all(torch.isfinite(v).all() for v in model.policy.state_dict().values())
    saved = PPO.load_from_checkpoint(last)
    assert saved.policy is not None and torch.load(last, weights_only=False)["global_step"] == 8
    assert all(torch.isfinite(v).all() for v in saved.state_dict().values())


def test_ppo_skip_drops_exactly_the_poisoned_updates(monkeypatch):
    """Test that with on_nonfinite=skip every poisoned minibatch is skipped, counted, and leaves weights untouched."""
    pl.seed_everything(0)
    _poison_ppo(monkeypatch, set(range(1, 100)))  # every update of the run
    model = tiny_ppo(total_timesteps=64, on_nonfinite="skip")
    snapshot = _Snapshot()
    trainer = quiet_trainer(max_epochs=-1, callbacks=[snapshot])
    data = tiny_rollout_data(eval_interval=100)
    trainer.fit(model, data)
    assert data.env_steps == 64 and trainer.callback_metrics["train/skipped_updates"] == 4
    assert trainer.global_step == 0  # no optimizer step was taken
    assert all(torch.equal(snapshot.policy[k], v) for k, v in _params(model).items())


def test_skip_mode_is_not_logged_in_stop_mode(monkeypatch):
    """Test that train/skipped_updates exists only with on_nonfinite=skip."""
    model = tiny_ppo(total_timesteps=32)
    trainer = quiet_trainer(max_epochs=-1)
    trainer.fit(model, tiny_rollout_data(eval_interval=100))
    assert "train/skipped_updates" not in trainer.callback_metrics


@pytest.mark.parametrize("how", ["nan_loss", "nan_reward"])
@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_sac_nan_critic_loss(mode, how, monkeypatch):
    """Test that SAC stops on a NaN critic loss naming it, or skips the update and its target update.

    ``nan_loss``: the losses with the critic loss made NaN. ``nan_reward``: a NaN reward in every batch.
    """
    loss = sac_module.sac_loss

    def nan_critic_loss(*args):
        terms = loss(*args)
        return terms._replace(loss_qvalue=terms.loss_qvalue * NAN)

    def nan_reward(actor, critics, targets, log_alpha, batch, *rest):
        batch = batch.clone()
        batch["reward"][0] = NAN
        return loss(actor, critics, targets, log_alpha, batch, *rest)

    monkeypatch.setattr(sac_module, "sac_loss", nan_critic_loss if how == "nan_loss" else nan_reward)
    pl.seed_everything(0)
    model = SAC(total_timesteps=120, hidden_sizes=(16, 16), on_nonfinite=mode)
    trainer = quiet_trainer(max_epochs=-1)
    data = tiny_replay_data("Pendulum-v1", eval_interval=100)
    if mode == "stop":
        with pytest.raises(NumericalFault, match=r"loss \(loss_qvalue=nan\).*gradients of critics\."):
            trainer.fit(model, data)
        return
    snapshot = _Snapshot()
    trainer = quiet_trainer(max_epochs=-1, callbacks=[snapshot])
    trainer.fit(model, data)
    # 2 epochs of 60 env steps, learning from step 40: the second epoch's 60 updates are all skipped.
    assert trainer.callback_metrics["train/skipped_updates"] == 60
    assert trainer.global_step == 0
    assert all(torch.equal(snapshot.targets[k], v) for k, v in model.target_critics.state_dict().items())
    assert all(torch.equal(snapshot.policy[k], v) for k, v in _params(model).items())


@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_dqn_nan_loss_between_a_chunks_gradient_steps(mode, monkeypatch):
    """Test that DQN refuses or skips a NaN update inside a chunk; skipped steps change nothing, not even the target."""
    loss = dqn_module.dqn_loss
    monkeypatch.setattr(dqn_module, "dqn_loss", lambda *a, **k: (t := loss(*a, **k))._replace(loss=t.loss * NAN))
    pl.seed_everything(0)
    model = DQN(total_timesteps=120, hidden_sizes=(16,), on_nonfinite=mode)
    data = tiny_replay_data("CartPole-v1", eval_interval=100)
    if mode == "stop":
        with pytest.raises(NumericalFault, match=r"DQN: non-finite loss \(loss=nan\)"):
            quiet_trainer(max_epochs=-1).fit(model, data)
        return
    snapshot = _Snapshot()
    trainer = quiet_trainer(max_epochs=-1, callbacks=[snapshot])
    trainer.fit(model, data)
    assert trainer.callback_metrics["train/skipped_updates"] == 60 and trainer.global_step == 0
    assert all(torch.equal(snapshot.policy[k], v) for k, v in _params(model).items())
    assert all(torch.equal(v, model.policy.state_dict()[k]) for k, v in model.target_net.state_dict().items())


def test_impossible_on_nonfinite_is_refused():
    """Test that on_nonfinite takes stop or skip only, named in the error."""
    with pytest.raises(ValueError, match=r"on_nonfinite must be one of \('stop', 'skip'\), got 'ignore'"):
        tiny_ppo(on_nonfinite="ignore")
