"""ActorSync: rollouts, replay collection and evaluation act with a copy synced to the learner."""

from __future__ import annotations

import lightning.pytorch as pl
import pytest
import torch

from rl_lightning import DQN, ReplayDataModule
from rl_lightning.callbacks import ActorSync, PhaseTimer
from rl_lightning.nets.actor_copy import ActorCopy, WeightSyncError
from tests.helpers import quiet_trainer, tiny_ppo, tiny_replay_data, tiny_rollout_data


def _trainer(callbacks, max_epochs=3):
    return quiet_trainer(callbacks=callbacks, max_epochs=max_epochs)


def _ppo_data(**kwargs):
    return tiny_rollout_data(**kwargs)


class _SyncRecorder:
    """Wraps ActorCopy.sync: after each sync, whether every copy tensor equals the learner's cast to the copy dtype."""

    def __init__(self, monkeypatch):
        self.equal: list[bool] = []
        original = ActorCopy.sync

        def sync(actor):
            original(actor)
            self.equal.append(
                all(
                    torch.equal(dst, src.to(dst.dtype))
                    for dst, src in zip(
                        actor.module.state_dict().values(), actor.learner.state_dict().values(), strict=True
                    )
                )
            )

        monkeypatch.setattr(ActorCopy, "sync", sync)


class _ActSpy(pl.Callback):
    """Counts acts of the copy and checks no update is pending when evaluation starts."""

    def __init__(self):
        self.pending_at_eval: list[int] = []

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
        self.pending_at_eval.append(pl_module.acting_copy.pending_updates)


def test_ppo_rollouts_act_with_a_copy_equal_to_the_learner_after_every_sync(monkeypatch):
    """Test a CPU actor copy under PPO: a sync per later rollout, each leaving copy == learner; the copy acts."""
    recorder = _SyncRecorder(monkeypatch)
    acts = []
    original_act = ActorCopy.act
    monkeypatch.setattr(ActorCopy, "act", lambda self, *a, **k: acts.append(1) or original_act(self, *a, **k))
    spy, timer = _ActSpy(), PhaseTimer(print_summary=False)
    pl.seed_everything(0)
    model, data = tiny_ppo(total_timesteps=10_000), _ppo_data()
    _trainer([ActorSync(device="cpu", verify=True), spy, timer]).fit(model, data)
    assert len(recorder.equal) >= 2 and all(recorder.equal)  # rollouts 2 and 3 each synced first
    assert len(acts) >= 3 * 16  # every rollout step acted through the copy
    assert spy.pending_at_eval and not any(spy.pending_at_eval)
    assert timer.totals["sync"] > 0  # the syncs are timed as the rollout's sync phase
    assert model.acting_copy is None  # detached when fit ends


def test_ppo_with_an_actor_copy_learns_exactly_as_without():
    """Test that a float32 CPU copy changes nothing: same seed, same final weights as acting with the learner."""
    results = []
    for callbacks in ([], [ActorSync(device="cpu")]):
        pl.seed_everything(1)
        model = tiny_ppo(total_timesteps=10_000)
        _trainer(callbacks).fit(model, _ppo_data(seed=1))
        results.append(model.state_dict())
    for name, value in results[0].items():
        torch.testing.assert_close(results[1][name], value, msg=name)


def test_bfloat16_actor_copy_trains(monkeypatch):
    """Test a bf16 copy under PPO: the consistency check passes after every sync, and metrics stay finite."""
    recorder = _SyncRecorder(monkeypatch)
    pl.seed_everything(0)
    model = tiny_ppo(total_timesteps=10_000)
    trainer = _trainer([ActorSync(device="cpu", dtype="bfloat16", verify=True)])
    trainer.fit(model, _ppo_data())
    assert recorder.equal and all(recorder.equal)
    assert torch.isfinite(trainer.callback_metrics["train/policy_loss"])


def test_ppo_rollouts_act_with_the_learners_weights_whatever_the_sync_interval(monkeypatch):
    """Test PPO with sync_interval=100 (more than a rollout's optimizer steps) and evaluation off: every rollout's
    stored log-probabilities are the learner's, so the copy was synced before each rollout."""
    from rl_lightning.data.rollout import RolloutDataset

    gaps, original = [], RolloutDataset.collect

    def collect(dataset):
        rollout = original(dataset)
        with torch.no_grad():
            log_prob, _, _ = model.policy.evaluate_actions(rollout["obs"][None].flatten(1, 2),
                                                           rollout["action"][None].flatten(1, 2))  # fmt: skip
        gaps.append(float((log_prob.flatten() - rollout["log_prob"].flatten()).abs().max()))
        return rollout

    monkeypatch.setattr(RolloutDataset, "collect", collect)
    pl.seed_everything(0)
    model = tiny_ppo(total_timesteps=10_000, lr=1e-2)
    trainer = quiet_trainer(callbacks=[ActorSync(device="cpu", sync_interval=100)], max_epochs=4, limit_val_batches=0)
    trainer.fit(model, _ppo_data(eval_interval=100))
    assert len(gaps) == 4 and max(gaps) < 1e-5, gaps  # without the sync before each rollout: 0.58


def test_off_policy_copy_syncs_every_interval_gradient_steps(monkeypatch):
    """Test DQN with sync_interval=4: about one sync per 4 gradient steps, each exact."""
    recorder = _SyncRecorder(monkeypatch)
    pl.seed_everything(0)
    model = DQN(hidden_sizes=[16, 16], total_timesteps=1000)
    data = ReplayDataModule(
        env_id="CartPole-v1",
        steps_per_epoch=60,
        learning_starts=20,
        batch_size=8,
        eval_episodes=1,
        eval_max_episode_steps=10,
    )
    trainer = _trainer([ActorSync(device="cpu", sync_interval=4)], max_epochs=2)
    trainer.fit(model, data)
    gradient_steps = trainer.global_step  # 100: one after each env step past learning_starts
    # One sync per 4 updates while collecting, plus one as each of the 3 validation runs starts
    # (the sanity check and 2 evaluations).
    assert gradient_steps // 4 <= len(recorder.equal) <= gradient_steps // 4 + 3
    assert all(recorder.equal)


def test_a_sync_that_misses_a_tensor_stops_the_run_naming_it(monkeypatch):
    """Test that with verify=True a sync that leaves one tensor behind fails loudly at that sync, naming the tensor."""

    def copy_all_but_the_last_bias(actor):
        with torch.no_grad():
            for (name, dst), src in zip(actor.module.named_parameters(), actor.learner.parameters(), strict=True):
                if name != "critic.4.bias":
                    dst.copy_(src)

    monkeypatch.setattr(ActorCopy, "_copy_weights", copy_all_but_the_last_bias)
    pl.seed_everything(0)
    trainer, data = _trainer([ActorSync(device="cpu", verify=True)]), _ppo_data()
    with pytest.raises(WeightSyncError, match="critic.4.bias"):
        trainer.fit(tiny_ppo(total_timesteps=10_000), data)
    # Caught at the first sync (before the first evaluation), before any further rollout acted.
    assert trainer.current_epoch == 0 and data.env_steps == 2 * 16


def test_bad_actor_sync_arguments_are_refused():
    """Test that ActorSync checks its arguments when built, not when fit starts."""
    with pytest.raises(ValueError, match="dtype"):
        ActorSync(dtype="half-ish")
    with pytest.raises(ValueError, match="sync_interval"):
        ActorSync(sync_interval=0)


def test_testing_a_checkpoint_evaluates_its_weights_not_the_stale_copy(tmp_path):
    """Test that trainer.test(ckpt_path=...) after fit acts with the checkpoint's weights through the copy."""
    pl.seed_everything(0)
    model, data = tiny_ppo(total_timesteps=10_000, save_interval=1), _ppo_data()
    trainer = quiet_trainer(tmp_path, [ActorSync(device="cpu")], max_epochs=2)
    trainer.fit(model, data)
    first = tmp_path / "checkpoints" / "epoch=0-env_steps=32.ckpt"
    seen = []

    class _Spy(pl.Callback):
        def on_test_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0):
            seen.append(
                all(
                    torch.equal(a, b)
                    for a, b in zip(
                        pl_module.acting_copy.module.state_dict().values(),
                        pl_module.policy.state_dict().values(),
                        strict=True,
                    )
                )
            )

    trainer.callbacks.append(_Spy())
    trainer.test(model, data, ckpt_path=str(first), verbose=False)
    expected = torch.load(first, weights_only=True)["state_dict"]
    assert torch.equal(model.policy.state_dict()["critic.0.weight"], expected["policy.critic.0.weight"])
    assert seen and all(seen)


def test_a_data_module_reused_by_a_second_fit_acts_with_the_new_copy():
    """Test that a second fit with the same data module collects with that fit's acting copy, not the first one's."""
    seen = []

    class _Spy(pl.Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            dataset = trainer.datamodule.train_dataset
            if dataset is not None:
                seen.append(dataset.policy is pl_module.acting_copy)

    pl.seed_everything(0)
    model = DQN(hidden_sizes=[16, 16], total_timesteps=1000)
    data = tiny_replay_data("CartPole-v1", learning_starts=20, batch_size=8)
    _trainer([ActorSync(device="cpu"), _Spy()], max_epochs=1).fit(model, data)
    _trainer([ActorSync(device="cpu"), _Spy()], max_epochs=2).fit(model, data)
    assert seen and all(seen)
